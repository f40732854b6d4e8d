"""``Estimate``: what one plan's estimate returns (times, throughput, memory, power, cost, the
per-operator breakdown, what the numbers rest on), and the prepared plan it is computed from."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, Optional

from ..catalog.device import Device
from ..models.config import Model
from .cost import cost_of

GB = 1e9

#: The numbers of a plan, in ``estimate_prepared``'s order.
_NUMBERS = ("batch", "prompt", "output", "prefix", "tp", "ep", "pp", "dp", "microbatches")


#: What an estimate of a plan that does not fit says (``allow_no_fit``): its times are those of a
#: device holding every weight and the whole KV cache, not of the plan with weights in host memory
#: (``offload``) that would run.
NO_FIT_WARNING = (
    "the plan does not fit: its times are priced as if every weight and the KV cache were resident in device "
    "memory; --offload auto prices it with weights kept in host memory"
)


BREAKDOWN_COLUMNS = {
    "phase": "prefill or decode",
    "op": "operator name",
    "layer_group": "which layers (or 'model' for embedding/head)",
    "launches": "kernel launches from the host over the phase (none where a captured CUDA graph replays the step)",
    "flops": "floating-point operations over the phase (2 per MAC)",
    "bytes": "bytes moved to or from device memory over the phase",
    "compute_s": "time at the compute roof (s)",
    "memory_s": "time at the memory roof (s)",
    "comm_s": "collective communication time (s)",
    "launch_s": "kernel launch overhead (s)",
    "time_s": "priced time: max(compute, memory) + launch, or comm + launch (s)",
    "bound": "compute, memory or comm",
    "intensity": "FLOPs per byte",
    "quantized": "a GEMM on weights stored below 16 bits",
    "role": "the weight role a GEMM reads",
    "format": "a quantized GEMM's weight format (its fitted efficiency prices it where the calibration has one)",
    "grouped": "routed-expert kernels over more than one token per step (priced at eta_moe)",
    "attention_kernel": "the fused attention kernel of a GQA/MQA layer, a prefill or a decode step's (a runtime with "
    "its attention kernels fitted prices it with them)",
}


#: Where a power or energy figure comes from, said with every one (estimate, simulate).
POWER_SOURCE = (
    "spec 60: P = P_idle + u (TDP - P_idle), u = max(u_c, rho u_m) from the engine's compute- and memory-roof "
    "times; idle_w and tdp_w from the catalog (data/hardware/hardware_sources.csv); rho = power_memory_rho "
    "(data/constants.csv), fitted by `ridgeline calibrate --power`, its error in `ridgeline validate --power`"
)


class _Prepared(NamedTuple):
    """What every plan of one (model, device, precisions, runtime, calibration, links) shares,
    resolved and checked once (``prepare``): the labels an estimate carries and the core's
    ``Prepared``, which prices a plan from its numbers alone."""

    model: str
    m: Model
    dev: Device
    core: Any
    plan_head: Mapping[str, Any]
    plan_tail: Mapping[str, Any]
    plan_labels: Mapping[str, Any]
    label: str
    note: str
    #: The fitted parameters in physical units, (name, value) each (``fitted_parameters``).
    fitted: tuple[tuple[str, str], ...]
    #: The offers a cost is reckoned from, cheapest first (``Catalog.offers``): the published
    #: on-demand rentals, or the purchase prices amortised over ``amortise_years``.
    offers: tuple[Mapping[str, Any], ...]
    runtime_note: str
    held_runtime: Optional[str]
    warnings: tuple[str, ...]
    group_labels: tuple[str, ...]
    formats: Mapping[str, str]
    #: The bytes of the config file a model path named when it was read (None: bundled or given
    #: as a Model): a warm call with the same path prepares again when the file changed (a
    #: timestamp can miss a rewrite within its tick).
    stamp: Optional[bytes]
    amortise_years: Optional[float] = None
    #: The price tier the offers were taken from (hyperscaler, neocloud, marketplace; None: any).
    price_tier: Optional[str] = None
    #: Whose fit priced the plan, in words (``_fits.basis_from``).
    basis_from: str = ""
    #: A request's front-end time (s) the plan's TTFT takes, as the core's efficiency holds it: the
    #: simulator delays each arrival by the same.
    request_s: float = 0.0


class Estimate:
    """The result of one plan. Times in seconds, sizes in bytes, rates per second.

    Immutable; the numbers stay in the core until read (``prefill``, ``memory``, the breakdown).
    """

    __slots__ = ("_d", "_n", "_p", "_price", "_r")
    _p: _Prepared
    _r: Any
    _n: tuple[Any, ...]
    _d: Optional[dict[str, Any]]
    _price: Optional[float]

    def __init__(
        self, prepared: _Prepared, result: Any, numbers: tuple[Any, ...], price_per_hour: Optional[float] = None
    ) -> None:
        object.__setattr__(self, "_p", prepared)
        object.__setattr__(self, "_r", result)
        object.__setattr__(self, "_n", numbers)
        object.__setattr__(self, "_d", None)
        object.__setattr__(self, "_price", price_per_hour)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Estimate is immutable: cannot set {name!r}")

    @property
    def _dict(self) -> dict[str, Any]:
        d = self._d
        if d is None:
            d = self._r.to_dict()
            object.__setattr__(self, "_d", d)
        return d

    @property
    def model(self) -> str:
        """Model name."""
        return str(self._p.model)

    @property
    def hardware(self) -> str:
        """Catalog device name."""
        return str(self._p.dev.name)

    @property
    def ttft_s(self) -> float:
        """Time to first token (s)."""
        return float(self._r.ttft_s)

    @property
    def tpot_s(self) -> Optional[float]:
        """Mean time per output token after the first (s); None with one."""
        out: Optional[float] = self._r.tpot_s
        return out

    @property
    def e2e_s(self) -> float:
        """Request latency (s)."""
        return float(self._r.e2e_s)

    @property
    def throughput_tok_s(self) -> float:
        """Batch x output / e2e, all replicas."""
        return float(self._r.throughput_tok_s)

    @property
    def decode_tok_s_per_user(self) -> Optional[float]:
        """The decode speed one request sees: 1 / TPOT (output tokens/s); None with one output token."""
        t = self.tpot_s
        return None if t is None or t <= 0 else 1.0 / t

    @property
    def decode_tok_s_per_gpu(self) -> Optional[float]:
        """Output tokens/s per device while decoding: the requests a replica decodes together
        (batch x attention DP) / TPOT over its devices; None with one output token."""
        u = self.decode_tok_s_per_user
        if u is None:
            return None
        p, par = self.plan, self.parallel
        replica = int(par["devices"]) // int(p.get("dp", 1))
        return u * int(p["batch"]) * int(p.get("attention_dp", 1)) / replica

    @property
    def prefill_tok_s(self) -> float:
        """Prompt tokens per second during prefill."""
        return float(self._r.prefill_tok_s)

    @property
    def fits(self) -> bool:
        """Whether the plan fits in memory x gpu_memory_utilization."""
        return bool(self._r.fits)

    @property
    def prefill(self) -> Mapping[str, Any]:
        """Prefill totals (steps, flops, bytes, times, mfu, mbu)."""
        out: Mapping[str, Any] = self._dict["prefill"]
        return out

    @property
    def decode(self) -> Mapping[str, Any]:
        """Decode totals, as prefill's."""
        out: Mapping[str, Any] = self._dict["decode"]
        return out

    @property
    def memory(self) -> Mapping[str, Any]:
        """Memory per device (bytes) and the fit."""
        out: Mapping[str, Any] = self._dict["memory"]
        return out

    @property
    def power(self) -> Mapping[str, Any]:
        """Watts per device over prefill and decode (with their compute and memory occupancy and
        utilisation), energy over a request round and per output token (spec 60); or
        ``{"missing": why}`` where the device has no sourced idle or TDP power or the memory-bound
        power share is not fitted."""
        out: Mapping[str, Any] = self._dict["power"]
        return out if "missing" in out else {**out, "source": POWER_SOURCE}

    @property
    def cost(self) -> Mapping[str, Any]:
        """What the plan costs to rent (spec 60): the price per device-hour (the one given, else the
        cheapest on-demand offer in the catalog's ``hardware_cost``, said with its provider, sku,
        date and source, and the range of all on-demand offers), per hour for the plan's devices,
        per request, per million output tokens and per million tokens (prompt and output); or
        ``{"missing": why}`` where no price is given or published."""
        return cost_of(self.plan, self.parallel, self._p.offers, self._price, self._p.dev.name, self._p.amortise_years,
                       self._p.price_tier)  # fmt: skip

    @property
    def parallel(self) -> Mapping[str, Any]:
        """Devices, nodes, stages and pipeline times."""
        out: Mapping[str, Any] = self._dict["parallel"]
        return out

    @property
    def calibration(self) -> str:
        """The calibration that priced the plan."""
        return str(self._p.label)

    @property
    def calibration_note(self) -> str:
        """Its efficiencies, or why there are none."""
        return str(self._p.note)

    @property
    def basis(self) -> str:
        """What the numbers rest on: ``measured`` (the device's own fit), ``borrowed`` (a fit of
        other devices: its architecture's or the runtime's profile) or ``bound`` (no calibration:
        the efficiency-1 bound, an optimistic upper bound on speed). Rankings keep bound plans apart."""
        from .fits import basis

        return basis(self._p.label)

    @property
    def basis_from(self) -> str:
        """Whose fit priced the plan, in words: the device's own, the one it borrowed, or none."""
        return self._p.basis_from

    #: Which runtime the plan runs under and why (the default for the device, the one given, or none),
    #: said the same by every door: estimate, sweep and the CLI choose through ``choose_runtime``.
    @property
    def fitted(self) -> tuple[tuple[str, str], ...]:
        """The calibration's fitted parameters in physical units, rounded: (name, value) pairs;
        empty uncalibrated."""
        return self._p.fitted

    @property
    def runtime_note(self) -> str:
        """The runtime the plan runs under and why."""
        return str(self._p.runtime_note)

    @property
    def verified(self) -> bool:
        """The device row is vendor-reconciled."""
        return bool(self._p.dev.verified)

    @property
    def estimated(self) -> bool:
        """The device row is not vendor-reconciled."""
        return not self._p.dev.verified

    @property
    def gemm_dtype(self) -> str:
        """The dtype whose peak prices the GEMMs."""
        return str(self._dict["gemm_dtype"])

    @property
    def attention_dtype(self) -> str:
        """The dtype of attention's peak."""
        return str(self._dict["attention_dtype"])

    @property
    def peak_tflops(self) -> float:
        """Dense peak the GEMMs run at."""
        return float(self._dict["peak_flops"] / 1e12)

    @property
    def memory_bw_gbs(self) -> float:
        """Memory bandwidth (GB/s)."""
        return float(self._dict["memory_bw"] / 1e9)

    @property
    def params(self) -> Mapping[str, int]:
        """Parameter counts by tensor class."""
        out: Mapping[str, int] = self._p.m.params
        return out

    @property
    def plan(self) -> Mapping[str, Any]:
        """The plan as priced: the numbers given, what came from the runtime, the precisions."""
        return {**dict(zip(_NUMBERS[:4], self._n)), **self._p.plan_head, **dict(zip(_NUMBERS[4:], self._n[4:])),
                **self._p.plan_tail, "kv_dtype": self._dict["kv_dtype"], **self._p.plan_labels}  # fmt: skip

    @property
    def warnings(self) -> tuple[str, ...]:
        # a plan that does not fit is priced as if it did: said, with the way to price it offloaded
        spill = () if self.fits else (NO_FIT_WARNING,)
        return (*self._dict["warnings"], *self._p.warnings, *spill)

    @property
    def held_out(self) -> Mapping[str, Any]:
        """Where the calibrated runtime's held-out rows fell: per phase (prefill, decode) the
        10th-90th percentile of observed/predicted speed on devices its fit never saw, with the
        TTFT or TPOT range that gives; empty for the bound, and for a plan that speculates or
        keeps weights on the host (no held-out row did)."""
        off = self._p.plan_labels.get("offload")
        if self._p.plan_labels.get("speculation") or (off and off["kind"] != "none"):
            return {}
        return _held_out(self._p.held_runtime, self.ttft_s, self.tpot_s)

    @property
    def mfu_prefill(self) -> float:
        return float(self.prefill["mfu"])

    @property
    def mbu_decode(self) -> float:
        return float(self.decode["mbu"])

    def __repr__(self) -> str:
        return (f"Estimate(model={self.model!r}, hardware={self.hardware!r}, ttft_s={self.ttft_s!r}, "
                f"tpot_s={self.tpot_s!r}, fits={self.fits!r}, calibration={self.calibration!r})")  # fmt: skip

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Estimate) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def breakdown_rows(self) -> list[dict[str, Any]]:
        b = self._dict["breakdown"]
        labels, formats = self._p.group_labels, self._p.formats
        rows = []
        for i in range(len(b["op"])):
            g = b["group"][i]
            r = {
                "phase": b["phase"][i],
                "op": b["op"][i],
                "layer_group": {-1: "model", -2: "drafter", -3: "host"}.get(g) or labels[g],
            }
            for k in ("launches", "flops", "bytes", "compute_s", "memory_s", "comm_s", "launch_s", "time_s"):
                r[k] = b[k][i]
            r["quantized"] = bool(b["quantized"][i])
            r["role"] = b["role"][i]
            r["format"] = formats.get(r["role"]) if r["quantized"] and r["role"] else None
            r["grouped"] = bool(b["grouped"][i])
            r["attention_kernel"] = b["attention_kernel"][i]
            r["bound"] = "comm" if r["comm_s"] > 0 else ("compute" if r["compute_s"] >= r["memory_s"] else "memory")
            r["intensity"] = r["flops"] / r["bytes"] if r["bytes"] > 0 else None
            rows.append(r)
        return rows

    @property
    def breakdown(self) -> Any:
        """Per-operator rows as a Polars DataFrame (columns in ``BREAKDOWN_COLUMNS``)."""
        import polars as pl

        return pl.DataFrame(
            self.breakdown_rows(),
            schema={
                "phase": pl.Utf8,
                "op": pl.Utf8,
                "layer_group": pl.Utf8,
                "launches": pl.Float64,
                "flops": pl.Float64,
                "bytes": pl.Float64,
                "compute_s": pl.Float64,
                "memory_s": pl.Float64,
                "comm_s": pl.Float64,
                "launch_s": pl.Float64,
                "time_s": pl.Float64,
                "bound": pl.Utf8,
                "intensity": pl.Float64,
                "quantized": pl.Boolean,
                "role": pl.Utf8,
                "format": pl.Utf8,
                "grouped": pl.Boolean,
                "attention_kernel": pl.Utf8,
            },
        )

    #: The keys of ``to_dict``, in order (documented in the README).
    KEYS = (
        "model", "hardware", "plan", "ttft_s", "tpot_s", "decode_tok_s_per_user", "decode_tok_s_per_gpu", "e2e_s",
        "throughput_tok_s", "prefill_tok_s", "prefill",
        "decode", "memory", "power", "cost", "fits", "calibration", "calibration_note", "basis", "basis_from",
        "fitted", "runtime_note",
        "held_out", "verified", "estimated", "gemm_dtype", "attention_dtype", "peak_tflops", "memory_bw_gbs", "params",
        "parallel", "warnings",
    )  # fmt: skip

    def to_dict(self, breakdown: bool = False) -> dict[str, Any]:
        """A JSON-ready dict; the keys are stable and documented in the README."""
        d = {k: getattr(self, k) for k in self.KEYS}
        d["warnings"] = list(self.warnings)
        d["fitted"] = dict(self.fitted)
        d["plan"] = dict(self.plan)
        d["params"] = dict(self.params)
        d["cost"] = dict(self.cost)
        for k in ("prefill", "decode", "memory", "parallel", "power"):
            d[k] = dict(d[k])
        if breakdown:
            d["breakdown"] = self.breakdown_rows()
        return d


def _held_out(runtime: Optional[str], ttft_s: float, tpot_s: Optional[float]) -> dict[str, Any]:
    """The range 80% of ``runtime``'s held-out rows put around this estimate's TTFT and TPOT
    (data/calibration/holdout.csv, written by ``ridgeline calibrate``)."""
    from .fits import shipped_holdout

    out: dict[str, Any] = {}
    for phase, key, t in (("prefill", "ttft_s", ttft_s), ("decode", "tpot_s", tpot_s)):
        h = shipped_holdout().get((str(runtime), phase)) if runtime else None
        if h is None or t is None:
            continue
        q10, q50, q90 = float(h["q10"]), float(h["q50"]), float(h["q90"])
        # a row q times as fast as predicted took t / q
        out[phase] = {"runtime": runtime, "rows": int(h["n_rows"]), "devices": int(h["n_devices"]),
                      "q10": q10, "q50": q50, "q90": q90, key: [t / q90, t / q10]}  # fmt: skip
    return out
