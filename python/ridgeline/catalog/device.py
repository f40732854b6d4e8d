"""``Device``: one catalog row, with the numbers the engine reads and where each came from."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, Optional

from .. import names as _names

_NO_NAMES: Mapping[str, str] = {}


def _normalise_name(s: str) -> str:
    return _names.normalise(s)


#: What the engine reads of a link measurement (rust/src/collectives.rs LinkFit).
LINK_FIT_KEYS = ("op", "ranks", "floor_us", "latency_us", "bw_efficiency")


@dataclasses.dataclass(frozen=True)
class Device:
    """One catalog row as the engine sees it (units in the names)."""

    name: str
    vendor: str
    arch: str
    kind: str
    verified: bool
    tflops_bf16: Optional[float]
    tflops_fp16: Optional[float]
    tflops_fp16_acc16: Optional[float]
    tflops_fp8: Optional[float]
    tflops_fp4: Optional[float]
    tflops_int8: Optional[float]
    tflops_tf32: Optional[float]
    tflops_fp32: Optional[float]
    memory_gb: float
    memory_bw_gbs: float
    memory_type: Optional[str]
    scaleup_bw_gbs: Optional[float]
    scaleup_latency_us: Optional[float]
    scaleup_latency_source: Optional[str]
    scaleup_domain: Optional[int]
    scaleout_bw_gbs: Optional[float]
    scaleout_latency_us: Optional[float]
    host_link: Optional[str]
    host_link_bw_gbs: Optional[float]
    tdp_w: Optional[float]
    idle_w: Optional[float]
    source: Optional[str]
    #: Measured collectives on the device's own link, per library (data/hardware/link_collectives.csv),
    #: or the median of its vendor's measured devices on the same fabric; ``links_source`` says which.
    links: tuple[dict[str, Any], ...] = ()
    links_source: Optional[str] = None
    #: The catalog's product family (nvidia_dc_sxm, nvidia_superchip, nvidia_consumer ...).
    family: Optional[str] = None
    #: A memory configuration of another row (``M3_MAX_64GB`` of ``M3_MAX``: the same chip with
    #: another memory size, data/hardware/hardware_memory.csv); None for a catalog row.
    memory_of: Optional[str] = None

    @property
    def chip(self) -> str:
        """The device whose measurements and fits price this one: itself, or the row a memory
        configuration is of (the same chip and memory bandwidth; only the capacity differs)."""
        return self.memory_of or self.name

    def collective_links(self, library: str = "nccl") -> list[dict[str, Any]]:
        """The link measurements a plan's collectives use: NCCL's for every collective, with the
        all-reduce of ``library`` (a runtime's own kernel) where this device has it measured."""
        own = [x for x in self.links if x["library"] == library and x["op"] == "all_reduce"]
        nccl = [x for x in self.links if x["library"] == "nccl" and not (own and x["op"] == "all_reduce")]
        return [{k: x[k] for k in LINK_FIT_KEYS} for x in (*nccl, *own)]

    @property
    def links_source_is_measured(self) -> bool:
        return bool(self.links_source and self.links_source.startswith("measured"))

    def core_for(self, library: str = "nccl") -> Any:
        """The Rust core's device, its collectives as ``library`` runs them (built once each)."""
        from .. import _core

        cores: dict[str, Any] = self.__dict__.setdefault("_cores", {})  # frozen: memo beside the fields
        if library not in cores:
            fields = {
                "name",
                "memory_gb",
                "memory_bw_gbs",
                "scaleup_bw_gbs",
                "scaleup_latency_us",
                "host_link_bw_gbs",
                "tdp_w",
                "idle_w",
            }
            row = {k: getattr(self, k) for k in (f.name for f in dataclasses.fields(self))
                   if k in fields or k.startswith("tflops_")}  # fmt: skip
            row["links"] = self.collective_links(library)
            if self.links and not self.links_source_is_measured:
                row["links_note"] = self.links_source
            cores[library] = _core.CoreDevice(json.dumps(row))
        return cores[library]

    @property
    def core(self) -> Any:
        """The Rust core's device with NCCL collectives."""
        return self.core_for("nccl")
