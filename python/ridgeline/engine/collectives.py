"""Collective communication times (spec 40), with the topology precedence:
explicit arguments, then the catalog, then a flat ring (flagged as such)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from typing import Any, Optional

from .. import _core
from .._checks import MAX_EXACT, number, whole
from ..catalog.device import Device
from ..catalog.store import Catalog, default_catalog
from ..errors import PlanError

_UNITS = {
    "": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}  # fmt: skip
FLAT_RING_NOTE = "flat ring, no scale-out topology known"


def parse_size(text: str) -> int:
    """Bytes from '4MiB', '512KiB', '1GB', '65536' or '1e6'.

    >>> parse_size("4MiB")
    4194304
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise PlanError(f"size: cannot read {text!r}; use bytes or a unit such as 64KiB, 4MiB, 1GiB, 1GB")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not 1 <= value <= MAX_EXACT:
        raise PlanError(f"size: must be 1 byte to 2^53 bytes, got {text!r}")
    return int(value)


def bus_factor(op: str, ranks: int) -> float:
    """nccl-tests busBW / algBW: 2(n-1)/n for all-reduce, (n-1)/n for all-gather,
    reduce-scatter and all-to-all, 1 for send/recv."""
    key = op.lower().replace("_", "").replace("-", "")
    if key == "allreduce":
        return 2 * (ranks - 1) / ranks
    if key in ("allgather", "reducescatter", "alltoall"):
        return (ranks - 1) / ranks
    return 1.0


@dataclasses.dataclass(frozen=True)
class Topology:
    """Node layout of a device group, with where each part came from."""

    devices_per_node: Optional[int]
    scaleout_bw_gbs: Optional[float]
    scaleout_latency_us: Optional[float]
    source: str

    def core(self) -> dict[str, Any]:
        """The Rust core's TopologySpec (the same four fields; a shallow copy, unlike
        dataclasses.asdict, which deep-copies and costs more than the estimate it feeds)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def resolve_topology(
    dev: Device,
    devices_per_node: Optional[int] = None,
    scaleout_gbs: Optional[float] = None,
    scaleout_latency_us: Optional[float] = None,
) -> Topology:
    """Explicit arguments first, then the catalog's scaleup_domain / scaleout_* columns."""
    explicit = any(v is not None for v in (devices_per_node, scaleout_gbs, scaleout_latency_us))
    dpn = devices_per_node if devices_per_node is not None else dev.scaleup_domain
    bw = scaleout_gbs if scaleout_gbs is not None else dev.scaleout_bw_gbs
    lat = scaleout_latency_us if scaleout_latency_us is not None else dev.scaleout_latency_us
    if explicit:
        source = "explicit topology" + (" (rest from the catalog)" if None in (devices_per_node, scaleout_gbs) else "")
    elif dpn is not None or bw is not None:
        source = "catalog"
    else:
        source = FLAT_RING_NOTE
    return Topology(dpn, bw, lat, source)


@dataclasses.dataclass(frozen=True)
class CollectiveResult:
    op: str
    ranks: int
    hardware: str
    size_bytes: tuple[int, ...]
    time_s: tuple[float, ...]
    algbw_gbs: tuple[float, ...]
    busbw_gbs: tuple[float, ...]
    link_gbs_per_direction: float
    nodes: int
    hierarchical: bool
    topology: str
    notes: tuple[str, ...]

    def rows(self) -> list[dict[str, Any]]:
        return [
            {"size_bytes": s, "time_us": t * 1e6, "algbw_gbs": a, "busbw_gbs": b}
            for s, t, a, b in zip(self.size_bytes, self.time_s, self.algbw_gbs, self.busbw_gbs)
        ]


def protocol_json(cat: Catalog) -> str:
    """The NCCL protocol table from the constants table (one source for every collective)."""
    return json.dumps(
        {
            "beta_ll": cat.constant("nccl_beta_ll"),
            "beta_ll128": cat.constant("nccl_beta_ll128"),
            "beta_simple": cat.constant("nccl_beta_simple"),
            "ll_max_bytes": cat.constant("nccl_ll_max_bytes"),
            "ll128_max_bytes": cat.constant("nccl_ll128_max_bytes"),
        }
    )


def collective(
    op: str,
    ranks: int,
    sizes: int | Sequence[int],
    hardware: str | Device,
    *,
    devices_per_node: Optional[int] = None,
    scaleout_gbs: Optional[float] = None,
    scaleout_latency_us: Optional[float] = None,
    catalog: Optional[Catalog] = None,
    library: str = "nccl",
) -> CollectiveResult:
    """Time, algBW and busBW of one collective over message sizes (bytes), with the device's
    measured collectives (``library``: nccl, or a runtime whose own all-reduce was measured).

    >>> r = collective("allreduce", 8, 2**30, "H100_SXM")
    >>> round(r.busbw_gbs[0])
    329
    """
    import numpy as np  # here, not at import: an estimate imports this module and needs no numpy

    cat = catalog or default_catalog()
    dev = hardware if isinstance(hardware, Device) else cat.get(hardware)
    ranks = whole("ranks", ranks, 1)
    many = [sizes] if isinstance(sizes, (int, float, np.generic)) else sizes
    size_list = [whole("size", s.item() if isinstance(s, np.generic) else s, 1) for s in many]
    if devices_per_node is not None:
        devices_per_node = whole("devices_per_node", devices_per_node, 1)
    if scaleout_gbs is not None:
        scaleout_gbs = number("scaleout_gbs", scaleout_gbs, positive=True)
    if scaleout_latency_us is not None:
        scaleout_latency_us = number("scaleout_latency_us", scaleout_latency_us)
    notes = []
    if dev.scaleup_bw_gbs is not None:
        link, latency = dev.scaleup_bw_gbs, dev.scaleup_latency_us
    elif dev.host_link_bw_gbs is not None:
        link, latency = dev.host_link_bw_gbs, None
        notes.append(f"{dev.name} has no scale-up fabric in the catalog: the host link carries the collective")
    else:
        raise PlanError(f"hardware: {dev.name} has no scale-up or host-link bandwidth in the catalog")
    libraries = sorted({"nccl", *(x["library"] for x in dev.links)})
    if library not in libraries:
        raise PlanError(f"library: {library!r} has no measurement for {dev.name}; accepted: {', '.join(libraries)}")
    links = dev.collective_links(library)
    if links:
        notes.append(f"{library if library != 'nccl' else 'NCCL'} collectives: {dev.links_source}")
    elif latency is None:
        notes.append("scale-up latency not in the catalog: alpha terms omitted (optimistic)")
    elif dev.scaleup_latency_source:
        notes.append(f"scale-up latency {latency} us: {dev.scaleup_latency_source[:100]}")
    topo = resolve_topology(dev, devices_per_node, scaleout_gbs, scaleout_latency_us)
    r = _core.collective(
        op, ranks, np.asarray(size_list, dtype=np.float64), link, latency or 0.0, protocol_json(cat),
        topo.devices_per_node, topo.scaleout_bw_gbs, topo.scaleout_latency_us, json.dumps(links),
    )  # fmt: skip
    if r["flat_ring_fallback"] or topo.source == FLAT_RING_NOTE:
        notes.append(FLAT_RING_NOTE)
    times = [float(t) for t in r["time_s"]]
    alg = [s / t / 1e9 if t > 0 else 0.0 for s, t in zip(size_list, times)]
    f = bus_factor(op, ranks)
    return CollectiveResult(
        op=op, ranks=ranks, hardware=dev.name, size_bytes=tuple(size_list), time_s=tuple(times),
        algbw_gbs=tuple(alg), busbw_gbs=tuple(a * f for a in alg), link_gbs_per_direction=link / 2,
        nodes=int(r["nodes"]), hierarchical=bool(r["hierarchical"]), topology=topo.source, notes=tuple(notes),
    )  # fmt: skip
