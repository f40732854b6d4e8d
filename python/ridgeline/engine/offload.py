"""Offload as a plan setting: weights kept in host memory, as the runtimes run them. llama.cpp
computes the experts of its first ``--n-cpu-moe`` layers, and the layers below ``-ngl``, on the
CPU; vLLM's ``--cpu-offload-gb`` keeps that many GiB per device on the host and reads them over
the host link every forward pass. The host is a row of data/hardware/hosts.csv (``--host``), the
link the device's catalog host link, and the runtime's efficiencies on them the calibration's
(data/calibration/offload_fits.csv, ``ridgeline calibrate --offload``). What the core prices from
it is ``rust/src/plan.rs``'s ``Offload``.

>>> parse("experts:12")
('experts', 12.0)
>>> parse("gpu-layers:40")
('gpu-layers', 40.0)
"""

from __future__ import annotations

import csv
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from .. import _data
from ..errors import PlanError
from ..models.config import Model

_HOSTS = "data/hardware/hosts.csv"
_FITS = "data/calibration/offload_fits.csv"
#: The placements ``--offload`` takes, with what each realises.
KINDS = {
    "experts": "the routed experts of the first N MoE layers on the host, computed there (llama.cpp --n-cpu-moe N)",
    "gpu-layers": "N layers on the device, the rest (the first ones, with the LM head) held and run by the host "
    "(llama.cpp -ngl N)",
    "stream-gb": "G GiB of each device's weights kept on the host and read over the host link every pass "
    "(vLLM --cpu-offload-gb G)",
}
#: The runtime families that run each placement (the others do not compute on the host, or
#: cannot stream): a runtime belongs to a family its name starts with (llamacpp-cuda: llamacpp).
_RUNTIMES = {"experts": ("llamacpp",), "gpu-layers": ("llamacpp",), "stream-gb": ("vllm", "sglang")}


def family(runtime: Optional[str]) -> Optional[str]:
    """The runtime family of ``runtime`` that offload_fits.csv keys its terms by (None: none)."""
    return next((f for fs in _RUNTIMES.values() for f in fs if runtime and runtime.startswith(f)), None)


GIB = 2**30
ACCEPTED = "auto, experts:N, gpu-layers:N or stream-gb:G"


def parse(text: Any) -> tuple[str, float]:
    """``--offload``'s value as (kind, amount); ``auto`` is ("auto", 0). A PlanError names what
    is accepted."""
    if not isinstance(text, str) or not text.strip():
        raise PlanError(f"offload: expected {ACCEPTED}, got {text!r}")
    s = text.strip().lower()
    if s == "auto":
        return "auto", 0.0
    kind, sep, amount = s.partition(":")
    if not sep or kind not in KINDS:
        raise PlanError(f"offload: expected {ACCEPTED} ({'; '.join(f'{k}: {v}' for k, v in KINDS.items())}), "
                        f"got {text!r}")  # fmt: skip
    try:
        v = float(amount)
    except ValueError:
        raise PlanError(f"offload: {kind} takes a number after the colon, got {text!r}") from None
    whole = kind != "stream-gb"
    if not (v == v and 0 <= v < 1e12) or (whole and v != int(v)):
        what = "a whole number >= 0" if whole else "a number of GiB >= 0"
        raise PlanError(f"offload: {kind} takes {what}, got {text!r}")
    return kind, v


@functools.lru_cache(maxsize=1)
def hosts() -> dict[str, dict[str, str]]:
    """name -> row of data/hardware/hosts.csv."""
    return {r["name"]: r for r in csv.DictReader(_data.read_text(_HOSTS).splitlines())}


def default_host() -> str:
    """The host an offloading plan is priced on when it names none (the row marked
    ``assumed_default``, whose notes say why)."""
    return next(n for n, r in hosts().items() if r["assumed_default"] == "true")


@functools.lru_cache(maxsize=1)
def fits() -> dict[str, dict[str, str]]:
    """runtime -> its fitted host terms (data/calibration/offload_fits.csv; empty before a fit)."""
    try:
        text = _data.read_text(_FITS)
    except FileNotFoundError:
        return {}
    return {r["runtime"]: r for r in csv.DictReader(text.splitlines())}


@dataclass(frozen=True)
class Offload:
    """A plan's offload, resolved: what the core prices and what the result says."""

    kind: str
    amount: float
    host: str
    #: The host was not named: the assumed default (labelled).
    host_assumed: bool
    #: The runtime's fitted host terms, or the bound (labelled).
    terms: str
    core: Mapping[str, Any]

    def label(self) -> str:
        """One line: the placement, the host and where the host terms come from."""
        what = {"experts": f"experts of {self.amount:g} MoE layers on the host (--n-cpu-moe {self.amount:g})",
                "gpu-layers": f"{self.amount:g} layers on the device, the rest on the host (-ngl {self.amount:g})",
                "stream-gb": f"{self.amount:g} GiB a device streamed from the host (--cpu-offload-gb {self.amount:g})",
                }[self.kind]  # fmt: skip
        host = f"{self.host} (assumed: no --host given)" if self.host_assumed else self.host
        return f"{what}; host {host}; {self.terms}"

    def warnings(self) -> list[str]:
        """What an estimate warns of: a host it assumed, or host terms at the bound."""
        return [f"offload: {self.label()}"] if self.host_assumed or "not fitted" in self.terms else []

    def summary(self) -> dict[str, Any]:
        return {"kind": self.kind, "amount": self.amount, "host": self.host, "host_assumed": self.host_assumed,
                "terms": self.terms, "label": self.label()}  # fmt: skip


#: The keys a host given as a mapping takes (hosts.csv's figures; the terms replace the fit's).
HOST_KEYS = {"name", "memory_bw_gbs", "tflops_fp32", "memory_gb", "eta_mem", "t_round_trip_us"}


def _host_row(host: Any) -> tuple[Mapping[str, Any], str, bool]:
    """The host's figures, its name and whether it was assumed (None: the default row)."""
    if host is None:
        name = default_host()
        return hosts()[name], name, True
    if isinstance(host, Mapping):
        unknown = sorted(set(host) - HOST_KEYS)
        missing = sorted({"memory_bw_gbs", "tflops_fp32", "memory_gb"} - set(host))
        if unknown or missing:
            raise PlanError(f"host: a mapping takes {', '.join(sorted(HOST_KEYS))}"
                            + (f"; unknown {', '.join(unknown)}" if unknown else "")
                            + (f"; missing {', '.join(missing)}" if missing else ""))  # fmt: skip
        return host, str(host.get("name") or "given"), False
    name = str(host).strip().upper()
    row = hosts().get(name)
    if row is None:
        raise PlanError(f"host: {host!r} is not a host of {_HOSTS}; known: {', '.join(sorted(hosts()))}")
    return row, name, False


def host_core(
    host: Any, link_gbs: Optional[float], runtime: Optional[str], min_tokens: Optional[int]
) -> tuple[dict[str, Any], str, bool, str]:
    """The core's ``Host`` for ``host`` (a row name of hosts.csv, a mapping of its figures, or None:
    the assumed default), the device's host link ``link_gbs`` (bidirectional, the catalog's),
    ``runtime``'s fitted terms (or the mapping's own) and the step size from which it computes
    host-held weights on the device (``min_tokens``; None: never): (host, name, assumed, where the
    terms come from)."""
    row, name, assumed = _host_row(host)
    if not link_gbs:
        raise PlanError("offload: the device has no host link in the catalog (host_link), so nothing can be "
                        "priced over it; a device with a PCIe or C2C link offloads")  # fmt: skip
    fit = fits().get(family(runtime) or "")
    if "eta_mem" in row or "t_round_trip_us" in row:
        terms = "host terms given"
        eta_mem, eta_link = _positive("eta_mem", row.get("eta_mem", 1.0)), 1.0
        rt = _positive("t_round_trip_us", row.get("t_round_trip_us", 0.0), zero=True) * 1e-6
    elif fit is None:
        terms = (f"host terms not fitted for {runtime or 'no runtime'}: the bound (host memory and link at full "
                 "bandwidth, no round-trip time)")  # fmt: skip
        eta_mem, eta_link, rt = 1.0, 1.0, 0.0
    else:
        terms = f"host terms fitted for {fit['runtime']} ({fit['rows']} rows, {_FITS})"
        eta_mem, eta_link = float(fit["eta_mem"]), float(fit["eta_link"])
        rt = float(fit["t_round_trip_us"]) * 1e-6
    core = {"memory_bw_gbs": _positive("memory_bw_gbs", row["memory_bw_gbs"]),
            "tflops": _positive("tflops_fp32", row["tflops_fp32"]),
            "memory_gb": _positive("memory_gb", row["memory_gb"]), "link_gbs": float(link_gbs) / 2.0,
            "eta_mem": eta_mem, "eta_link": eta_link, "t_round_trip_s": rt,
            "device_min_tokens": min_tokens}  # fmt: skip
    return core, name, assumed, terms


def _positive(name: str, v: Any, zero: bool = False) -> float:
    """``v`` as a finite number > 0 (>= 0 with ``zero``), else a PlanError naming ``host.name``."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        x = float("nan")
    if not (x == x and abs(x) != float("inf") and (x >= 0 if zero else x > 0)):
        raise PlanError(f"host.{name}: expected a {'non-negative' if zero else 'positive'} number, got {v!r}")
    return x


def resolve(
    kind: str,
    amount: float,
    m: Model,
    host_name: Optional[str],
    link_gbs: Optional[float],
    runtime: Optional[str],
    llamacpp_min_tokens: int,
) -> Offload:
    """The offload ``kind`` of ``amount`` (``parse``) of model ``m`` on a device whose host link is
    ``link_gbs``, under ``runtime``: refused where the runtime does not run it that way. llama.cpp
    computes host-held weights on the device for steps of ``llamacpp_min_tokens`` tokens or more
    (data/constants.csv ``llamacpp_offload_min_batch``)."""
    if family(runtime) not in _RUNTIMES[kind]:
        runs = " and ".join(f"{f}*" for f in _RUNTIMES[kind])
        raise PlanError(f"offload: {kind} is how {runs} runtimes offload; the plan runs {runtime or 'no runtime'} "
                        "(--runtime names one that does)")  # fmt: skip
    layers = sum(int(g["count"]) for g in m.layer_groups)
    moe = sum(int(g["count"]) for g in m.layer_groups if (g.get("ffn") or {}).get("kind") == "moe")
    core: dict[str, Any] = {}
    if kind == "experts":
        if moe == 0:
            raise PlanError(f"offload: {m.name} has no routed experts; offload layers (gpu-layers:N) instead")
        if amount > moe:
            raise PlanError(f"offload: {m.name} has {moe} MoE layers, got experts:{amount:g}")
        core["expert_layers"] = int(amount)
    elif kind == "gpu-layers":
        core["host_layers"] = max(layers - int(amount), 0)
    else:
        core["streamed_bytes"] = amount * GIB
    min_tokens = llamacpp_min_tokens if family(runtime) == "llamacpp" else None
    host, name, assumed, terms = host_core(host_name, link_gbs, runtime, min_tokens)
    core["host"] = host
    return Offload(kind, amount, name, assumed, terms, core)


def candidates(m: Model, runtime: Optional[str], device_weight_bytes: float) -> tuple[list[str], str, str]:
    """The placements ``auto`` tries for model ``m`` under ``runtime``, from the least kept on the
    host to the most (the device's memory falls along them), what choosing one means, and what the
    last one keeps there; ``device_weight_bytes``: the weights a device holds without offload."""
    fam = family(runtime)
    if fam in ("vllm", "sglang"):
        top = max(1, math.floor(device_weight_bytes / GIB))
        return ([f"stream-gb:{g}" for g in range(1, top + 1)], "the fewest GiB a device streamed from the host "
                "that fit", "as many GiB streamed as the layers hold")  # fmt: skip
    if fam == "llamacpp":
        moe = sum(int(g["count"]) for g in m.layer_groups if (g.get("ffn") or {}).get("kind") == "moe")
        layers = sum(int(g["count"]) for g in m.layer_groups)
        if moe:
            return ([f"experts:{n}" for n in range(1, moe + 1)], "the fewest MoE layers' experts on the host that "
                    "fit", f"every MoE layer's experts ({moe})")  # fmt: skip
        return ([f"gpu-layers:{g}" for g in range(layers - 1, -1, -1)], "the most layers on the device that fit",
                "every layer")  # fmt: skip
    raise PlanError(f"offload: auto needs a runtime that keeps weights on the host (llamacpp-*, vllm, sglang); "
                    f"the plan runs {runtime or 'no runtime'} (--runtime)")  # fmt: skip
