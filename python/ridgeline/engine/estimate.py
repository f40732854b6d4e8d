"""One plan, one call into the Rust core: ``ridgeline.estimate(model, hardware, **plan)``."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Optional

from .. import _checks, _core
from .._checks import MAX_EXACT
from .._fmt import duration_us, pct, sig
from ..catalog.store import Catalog, Device, default_catalog
from ..errors import DoesNotFitError, PlanError
from ..models import quant
from ..models.config import Model, identify
from .collectives import protocol_json, resolve_topology
from .plan import NAMES as PLAN_FIELDS
from .plan import Plan, merged
from .runtimes import _NO_RUNTIME_EXECUTION, KERNEL_RUNTIMES, choose_runtime, collective_library, runtime_execution

GB = 1e9

#: What an estimate of a plan that does not fit says (``allow_no_fit``): its times are those of a
#: device holding every weight and the whole KV cache; weights kept in host memory (llama.cpp's
#: -ngl / --n-cpu-moe, vLLM's --cpu-offload-gb) and speculative decoding are not modelled yet.
NO_FIT_WARNING = (
    "the plan does not fit: its times are priced as if every weight and the KV cache were resident in device "
    "memory; offload to host memory is not modelled"
)
#: What every estimate says about its efficiencies until calibration exists.
UNCALIBRATED = "uncalibrated"
UNCALIBRATED_NOTE = (
    "efficiencies are 1.0 (no calibration row for this device and runtime): "
    "the times are an optimistic bound on what a real runtime achieves"
)
_UNCALIBRATED_EFF = json.dumps(
    {"eta_compute": 1.0, "eta_mem": 1.0, "t_launch_s": 0.0, "t_layer_s": 0.0, "t_step_s": 0.0}
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


_whole, _flag, _number, _text = _checks.whole, _checks.flag, _checks.number, _checks.text


#: Where a power or energy figure comes from, said with every one (estimate, simulate).
POWER_SOURCE = (
    "spec 60: P = P_idle + u (TDP - P_idle), u = max(u_c, rho u_m) from the engine's compute- and memory-roof "
    "times; idle_w and tdp_w from the catalog (data/hardware/hardware_sources.csv); rho = power_memory_rho "
    "(data/constants.csv), fitted by `ridgeline calibrate --power`, its error in `ridgeline validate --power`"
)


def _count(name: str, v: Any) -> int:
    """A whole number >= 0."""
    return _whole(name, v, 0)


def _positive_int(name: str, v: Any) -> int:
    return _whole(name, v, 1)


def canonical_dtype(name: str, v: Any) -> str:
    """The canonical dtype for a name as users write it (``bfloat16``, ``half``, ``BF16``), through
    the core's one alias table; an empty or unknown name is a PlanError naming ``name``.

    >>> canonical_dtype("dtype", "bfloat16")
    'bf16'
    """
    if not isinstance(v, str):
        raise PlanError(f"{name}: expected a dtype name such as bf16, got {v!r}")
    return _core.parse_dtype(name, v)


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
    #: Whose fit priced the plan, in words (``_fits.basis_from``).
    basis_from: str = ""


#: The numbers of a plan, in ``estimate_prepared``'s order.
_NUMBERS = ("batch", "prompt", "output", "prefix", "tp", "ep", "pp", "dp", "microbatches")


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
        return cost_of(self.plan, self.parallel, self._p.offers, self._price, self._p.dev.name, self._p.amortise_years)

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
        # a plan that does not fit is priced as if it did: said, since offload is not modelled
        spill = () if self.fits else (NO_FIT_WARNING,)
        return (*self._dict["warnings"], *self._p.warnings, *spill)

    @property
    def held_out(self) -> Mapping[str, Any]:
        """Where the calibrated runtime's held-out rows fell: per phase (prefill, decode) the
        10th-90th percentile of observed/predicted speed on devices its fit never saw, with the
        TTFT or TPOT range that gives; empty for the bound."""
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
                "layer_group": "model" if g < 0 else labels[g],
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
        "model", "hardware", "plan", "ttft_s", "tpot_s", "e2e_s", "throughput_tok_s", "prefill_tok_s", "prefill",
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


def _group_labels(model: Model) -> tuple[str, ...]:
    out = []
    for g in model.layer_groups:
        a = g["attention"] or {}
        attn = f"window {a['window']}" if a.get("window") else ("full attention" if a else "no attention")
        ffn = "moe" if g["ffn"]["kind"] == "moe" else "dense"
        out.append(f"{g['count']} layers, {attn}, {ffn}")
    return tuple(out)


#: Prepared layouts by their categorical inputs (bounded: cleared when full).
_PREPARED: dict[tuple[Any, ...], _Prepared] = {}
_PREPARED_MAX = 4096


def estimate(
    model: str | Model,
    hardware: str | Device,
    *,
    plan: Optional[Plan] = None,
    batch: int = 1,
    prompt: int = 1024,
    output: int = 256,
    prefix: int = 0,
    identical_sequences: bool = False,
    routing_skew: Optional[float] = None,
    flash_attention: bool = True,
    swa_cache_extra: Optional[int] = None,
    kv_pad: Optional[int] = None,
    kv_skip_masked_tail: Optional[bool] = None,
    decode_graphs: Optional[bool] = None,
    tp: int = 1,
    ep: int = 1,
    attention_dp: int = 1,
    pp: int = 1,
    dp: int = 1,
    microbatches: Optional[int] = None,
    devices_per_node: Optional[int] = None,
    scaleout_gbs: Optional[float] = None,
    scaleout_latency_us: Optional[float] = None,
    dtype: str = "bf16",
    weight_dtype: Optional[str] = None,
    kv_dtype: Optional[str] = None,
    chunk: Optional[int] = None,
    runtime: Optional[str] = None,
    allow_no_fit: bool = False,
    calibrated: bool = True,
    breakdown: bool = True,
    catalog: Optional[Catalog] = None,
    price_per_hour: Optional[float] = None,
    amortise_years: Optional[float] = None,
) -> Estimate:
    """Estimates TTFT, TPOT, throughput and memory of one plan.

    Args:
        model: a bundled Hugging Face id, a path to a config.json, or a ``Model``.
        hardware: a catalog name or alias, or a ``Device``.
        plan: the plan's settings as one ``Plan`` (``ridgeline.Plan(tp=2, batch=8)``), instead of
            the keywords below or beside them: a keyword set to other than its default must agree
            with the plan. Each keyword is a field of ``Plan``, whose help says the same.
        batch: concurrent sequences.
        prompt: prompt tokens per sequence.
        output: output tokens per sequence (the first comes from prefill).
        prefix: tokens already cached before the prompt (llama-bench ``-d``, a prefix-cache hit).
        identical_sequences: every sequence holds the same tokens (n copies of one request), so
            MoE routing picks the same experts for all of them.
        routing_skew: Zipf exponent of MoE expert popularity (0: uniform routing, spec 30);
            default: the calibration's fitted value where it has one, else 0.
        flash_attention: fused attention (default). False: the runtime materialises the score
            matrix (llama.cpp without ``-fa``): the full query x key rectangle is computed and each
            score moves through memory (``unfused_attention_score_bytes`` in the constants table).
        swa_cache_extra: cells a sliding-window layer's KV cache holds beyond its window, all of
            them read by each decode step (llama.cpp: ``n_ubatch``, its SWA cache being
            n_swa + n_ubatch per sequence, filled as a ring); 0: exactly the window is read.
        kv_pad: decode reads the KV cache in multiples of this many cells (llama.cpp pads its
            n_kv to 256); 1: exactly the cells used.
        kv_skip_masked_tail: with several sequences, decode skips each one's trailing
            ``kv_pad``-cell tiles that hold no attended cell (llama.cpp's CUDA flash attention
            over one KV stream per sequence), so a wrapped sliding-window ring is read up to its
            newest cell; one sequence reads its whole view.
        decode_graphs: one-token decode steps (batch 1) are replayed from a captured CUDA graph,
            so no per-kernel launch overhead is paid there (llama.cpp CUDA); larger batches launch.
            These four and ``chunk`` default to how ``runtime`` runs the plan
            (``runtime_execution``: llama.cpp's from its source; any other runtime, or none,
            reads exactly the cells used, prefills in one step and launches every kernel);
            ``plan["from_runtime"]`` names the ones taken from it that shape this model's
            numbers. A value given wins.
        tp: tensor-parallel degree.
        ep: expert-parallel degree: it divides ``tp`` x ``attention_dp`` (E/ep whole experts a rank,
            each sharded over the rest of the group).
        attention_dp: attention data-parallel groups of ``tp`` ranks, each running attention and
            the dense layers on its own ``batch`` sequences while the routed experts serve every
            group's tokens (dispatch and combine all-to-alls); throughput counts every group.
        pp: pipeline stages (ceil(layers / pp) layers each); latency is the full pass plus the sends.
        dp: data-parallel replicas (throughput only).
        microbatches: micro-batches per pipeline round (default ``pp``); throughput follows GPipe.
        devices_per_node: devices per node (default: the catalog's scale-up domain).
        scaleout_gbs: per-device scale-out bandwidth between nodes, GB/s per direction (default: catalog).
        scaleout_latency_us: scale-out per-hop latency (default: catalog, else omitted and flagged).
        dtype: activation (compute) dtype: bf16, fp16, fp32 or tf32.
        weight_dtype: weight storage format of the linear layers: a dtype (bf16, fp8, int8), a
            quantisation (int4, w4a16, gptq, awq, mxfp4, nvfp4) or a GGUF type (q4_0, q4_k_m, q8_0, ...);
            default: the checkpoint's quantization_config, else a hint in the model name, else ``dtype``.
        kv_dtype: KV-cache dtype (default: ``dtype``).
        chunk: chunked-prefill token budget per step (default: the runtime's, llama.cpp's
            ``n_ubatch``; else one prefill step).
        runtime: the serving runtime the numbers describe: its way of running the plan
            (``runtime_execution``) and its shipped calibration. Default: the one ``ridgeline
            estimate`` and ``ridgeline sweep`` pick for the device (``choose_runtime``: of the
            runtimes that run there, vllm where fitted, else the best-covered one; none where no
            calibrated runtime runs). ``"none"``: no runtime, the plan as written at the bound.
            ``runtime_note`` says which and why.
        allow_no_fit: return a result with ``fits = False`` instead of raising.
        calibrated: apply the runtime's shipped calibration (False: the efficiency-1 bound of the
            same plan, run the same way, so the memory fit does not change).
        breakdown: keep per-operator rows.
        catalog: a ``Catalog`` other than the default one.
        price_per_hour: USD per device-hour for ``cost`` (default: the cheapest published
            on-demand offer for the device; none published: cost is missing).
        amortise_years: reckon ``cost`` from the device's cheapest published purchase price
            spread evenly over this many years of hours, instead of a rental.

    Raises:
        PlanError, ModelConfigError, UnknownNameError, DoesNotFitError.

    >>> e = estimate("meta-llama/Llama-3.1-8B", "H100_SXM")
    >>> e.calibration, e.basis, e.fits
    ('calibrated (H100_SXM, vllm 0.24.0, 107425 rows)', 'measured', True)
    """
    if plan is not None:
        settings = merged(plan, {k: v for k, v in locals().items() if k in PLAN_FIELDS}, "estimate")
        return estimate(model, hardware, allow_no_fit=allow_no_fit, breakdown=breakdown, catalog=catalog, **settings)
    # What the plan's numbers do not change (model, device, precisions, runtime, calibration,
    # links) is resolved once and kept: a warm call checks the numbers and prices them. Each
    # value is keyed with its exact type (a True is not the 1 a cached chunk was given as), an
    # unhashable one is checked on the full path, which names it.
    key = (
        model if model.__class__ is str else id(model), hardware if hardware.__class__ is str else id(hardware),
        runtime, dtype, weight_dtype, kv_dtype, chunk, routing_skew, identical_sequences, flash_attention,
        swa_cache_extra, kv_pad, kv_skip_masked_tail, decode_graphs, devices_per_node, scaleout_gbs,
        scaleout_latency_us, calibrated, catalog, attention_dp,
    )  # fmt: skip
    exact = (
        identical_sequences.__class__ is bool and flash_attention.__class__ is bool and calibrated.__class__ is bool
        and (kv_skip_masked_tail is None or kv_skip_masked_tail.__class__ is bool)
        and (decode_graphs is None or decode_graphs.__class__ is bool)
        and (chunk is None or chunk.__class__ is int) and (kv_pad is None or kv_pad.__class__ is int)
        and (swa_cache_extra is None or swa_cache_extra.__class__ is int)
        and (devices_per_node is None or devices_per_node.__class__ is int) and attention_dp.__class__ is int
        and routing_skew.__class__ is not bool and scaleout_gbs.__class__ is not bool
        and scaleout_latency_us.__class__ is not bool
    )  # fmt: skip
    try:
        p = _PREPARED.get(key) if exact else None
    except TypeError:
        p = None
    if (
        p is None
        or (model.__class__ is not str and p.m is not model)
        or (hardware.__class__ is not str and p.dev is not hardware)
        or (p.stamp is not None and p.stamp != _stamp(model))
    ):
        p = prepare(model, hardware, catalog, runtime=runtime, dtype=dtype, weight_dtype=weight_dtype,
                     kv_dtype=kv_dtype, chunk=chunk, routing_skew=routing_skew,
                     identical_sequences=identical_sequences, flash_attention=flash_attention,
                     swa_cache_extra=swa_cache_extra, kv_pad=kv_pad, kv_skip_masked_tail=kv_skip_masked_tail,
                     decode_graphs=decode_graphs, devices_per_node=devices_per_node, scaleout_gbs=scaleout_gbs,
                     scaleout_latency_us=scaleout_latency_us, calibrated=calibrated,
                     attention_dp=attention_dp)  # fmt: skip
        if exact:
            if len(_PREPARED) >= _PREPARED_MAX:
                _PREPARED.clear()
            _PREPARED[key] = p
    if allow_no_fit.__class__ is not bool:
        _flag("allow_no_fit", allow_no_fit)
    if breakdown.__class__ is not bool:
        _flag("breakdown", breakdown)
    n: tuple[Any, ...] = (batch, prompt, output, prefix, tp, ep, pp, dp, microbatches)
    r, n = _run(p, n, allow_no_fit=allow_no_fit, breakdown=breakdown)
    p, price = pricing(p, price_per_hour, amortise_years, catalog)
    return Estimate(p, r, n, price)


def _run(p: _Prepared, n: tuple[Any, ...], *, allow_no_fit: bool, breakdown: bool) -> tuple[Any, tuple[Any, ...]]:
    """A prepared plan priced at its numbers ``n`` (``_NUMBERS`` order, each checked): the core's
    result and the numbers as checked; a plan that does not fit is refused unless ``allow_no_fit``."""
    batch, prompt, output, prefix, tp, ep, pp, dp, microbatches = n
    if not (
        batch.__class__ is int and prompt.__class__ is int and output.__class__ is int and prefix.__class__ is int
        and tp.__class__ is int and ep.__class__ is int and pp.__class__ is int and dp.__class__ is int
        and 1 <= batch <= MAX_EXACT and 1 <= prompt <= MAX_EXACT and 1 <= output <= MAX_EXACT
        and 0 <= prefix <= MAX_EXACT and 1 <= tp <= MAX_EXACT and 1 <= ep <= MAX_EXACT and 1 <= pp <= MAX_EXACT
        and 1 <= dp <= MAX_EXACT and (microbatches is None or (microbatches.__class__ is int
                                                               and 1 <= microbatches <= MAX_EXACT))
    ):  # fmt: skip
        n = tuple(
            None if k == "microbatches" and v is None else _whole(k, v, 0 if k == "prefix" else 1)
            for k, v in zip(_NUMBERS, n)
        )
    r = _core.estimate_prepared(p.core, n[0], n[1], n[2], n[3], n[4], n[5], n[6], n[7], n[8], breakdown)
    if not r.fits and not allow_no_fit:
        mem = r.to_dict()["memory"]
        batch, prompt, output, tp = n[0], n[1], n[2], n[4]
        budget = p.plan_tail["gpu_memory_utilization"]
        raise DoesNotFitError(
            f"{p.model} on {p.dev.name} (batch {batch}, {prompt}+{output} tokens, TP {tp}) "
            f"needs {mem['total_bytes'] / GB:.1f} GB per device but {mem['budget_bytes'] / GB:.1f} GB is usable "
            f"({p.dev.memory_gb:g} GiB x gpu_memory_utilization {budget:g}): "
            f"short by {mem['shortfall_bytes'] / GB:.1f} GB; use more TP, a smaller batch or a shorter context "
            "(or --allow-no-fit to see the numbers)"
        )
    return r, n


def prepare(
    model: Any,
    hardware: Any,
    catalog: Any = None,
    *,
    runtime: Any = None,
    dtype: Any = "bf16",
    weight_dtype: Any = None,
    kv_dtype: Any = None,
    chunk: Any = None,
    routing_skew: Any = None,
    identical_sequences: Any = False,
    flash_attention: Any = True,
    swa_cache_extra: Any = None,
    kv_pad: Any = None,
    kv_skip_masked_tail: Any = None,
    decode_graphs: Any = None,
    devices_per_node: Any = None,
    scaleout_gbs: Any = None,
    scaleout_latency_us: Any = None,
    calibrated: Any = True,
    attention_dp: Any = 1,
    serving_step: bool = False,
    t_step_us: Optional[float] = None,
    attention_row: Optional[Mapping[str, Any]] = None,
) -> _Prepared:
    """Resolves and checks everything of a plan but its numbers (``estimate`` keeps the result).
    ``t_step_us`` replaces the calibration's step overhead; else, with ``serving_step`` (the serving
    simulator), a calibrated plan takes the overhead fitted on replayed serving runs where there is
    one (``_fits.serving_step``). The note says which. Uncalibrated with ``attention_row``, the plan
    is the bound but for its fused attention kernels, which that calibration row's fitted kernels
    price (``bound_with_attention``)."""
    if catalog is not None and not isinstance(catalog, Catalog):
        raise PlanError(f"catalog: expected a ridgeline.Catalog, got {type(catalog).__name__}")
    cat = catalog or default_catalog()
    m = model if isinstance(model, Model) else Model.from_config(_text("model", model))
    dev = hardware if isinstance(hardware, Device) else cat.get(_text("hardware", hardware))
    flags = {"identical_sequences": identical_sequences, "flash_attention": flash_attention, "calibrated": calibrated}
    for k, v in flags.items():
        _flag(k, v)
    dtype = canonical_dtype("dtype", dtype)
    weight_dtype = None if weight_dtype is None else _text("weight_dtype", weight_dtype)
    # a name with a quantisation suffix ("Meta-Llama-3.1-8B-FP8") states its weights
    named = identify(model)[1] if not isinstance(model, Model) and m.source.startswith("bundled") else None
    named = quant.named_format(m, named)
    if named is not None:
        if weight_dtype is None:
            weight_dtype = named
        elif quant._canonical(weight_dtype) != named:
            raise PlanError(
                f"weight_dtype: {weight_dtype} disagrees with the model name '{model}', which says {named} weights; "
                f"give {named}, or the bundled model's own name ({m.name}) with the weight format"
            )
    # the weights' formats as stored: a runtime that has no type for one of them cannot run the plan
    stored = quant.resolve(m, dtype, weight_dtype)
    if named is not None:
        stored = dataclasses.replace(stored, source=f"the model name '{model}'")
    runtime, runtime_note = choose_runtime(runtime, dev, cat, stored.format_names().values())
    given = {"chunk": chunk, "swa_cache_extra": swa_cache_extra, "kv_pad": kv_pad,
             "kv_skip_masked_tail": kv_skip_masked_tail, "decode_graphs": decode_graphs}  # fmt: skip
    ex = runtime_execution(runtime, cat, flash_attention=flash_attention,
                           ubatch=None if chunk is None else _positive_int("chunk", chunk))  # fmt: skip
    # what the plan took from the runtime (a sliding-window cache only where the model has one)
    windowed = any((g.get("attention") or {}).get("window") for g in m.layer_groups)
    from_runtime = tuple(k for k, v in given.items() if v is None and ex[k] != _NO_RUNTIME_EXECUTION[k]
                         and (windowed or k != "swa_cache_extra"))  # fmt: skip
    run = {k: ex[k] if v is None else v for k, v in given.items()}
    head = {
        "identical_sequences": identical_sequences,
        "attention_score_bytes": 0.0 if flash_attention else cat.constant("unfused_attention_score_bytes"),
        "swa_cache_extra": _count("swa_cache_extra", run["swa_cache_extra"]),
        "kv_pad": _positive_int("kv_pad", run["kv_pad"]),
        "kv_skip_masked_tail": _flag("kv_skip_masked_tail", run["kv_skip_masked_tail"]),
        "decode_graphs": _flag("decode_graphs", run["decode_graphs"]),
        "attention_dp": _positive_int("attention_dp", attention_dp),
    }
    tail = {
        "dtype": dtype,
        "weight_dtype": weight_dtype,
        "kv_dtype": None if kv_dtype is None else canonical_dtype("kv_dtype", kv_dtype),
        "chunk": None if run["chunk"] is None else _positive_int("chunk", run["chunk"]),
        "gpu_memory_utilization": cat.constant("gpu_memory_utilization"),
        "linear_chunk": int(cat.constant("linear_attention_chunk")),
        "power_rho": cat.constant_or_none("power_memory_rho"),
    }
    weights = quant.on_runtime(stored, runtime)
    if devices_per_node is not None:
        devices_per_node = _positive_int("devices_per_node", devices_per_node)
    if scaleout_gbs is not None:
        scaleout_gbs = _number("scaleout_gbs", scaleout_gbs, positive=True)
    if scaleout_latency_us is not None:
        scaleout_latency_us = _number("scaleout_latency_us", scaleout_latency_us)
    topo = resolve_topology(dev, devices_per_node, scaleout_gbs, scaleout_latency_us)
    from .fits import attention_efficiency, basis_from, efficiency_json, lookup
    from .fits import serving_step as serving_fit

    label, fit_row = lookup(dev.chip, runtime, cat) if calibrated else (UNCALIBRATED, None)
    formats = weights.format_names()
    eff = _UNCALIBRATED_EFF if fit_row is None else efficiency_json(fit_row, formats)
    if fit_row is None and attention_row is not None:
        eff = json.dumps({**json.loads(_UNCALIBRATED_EFF), **attention_efficiency(attention_row)})
    step = (t_step_us, "step overhead given") if t_step_us is not None else None
    if step is None and serving_step and fit_row is not None:
        step = serving_fit(runtime, dev.chip)
    if step is not None:
        eff = json.dumps({**json.loads(eff), "t_step_s": step[0] * 1e-6})
    if routing_skew is None:
        tail["routing_skew"] = float(fit_row.get("routing_skew") or 0.0) if fit_row else 0.0
    else:
        tail["routing_skew"] = _number("routing_skew", routing_skew)
    core_plan = {"batch": 1, "prompt": 1, "output": 1, **head, **tail, "weights": weights.core(),
                 "topology": topo.core()}  # fmt: skip
    core = _core.Prepared(m._core, dev.core_for(collective_library(runtime)), _plan_json(core_plan), eff,
                          _protocol_cached(cat))  # fmt: skip
    warnings = []
    overridden = cat.override_note(dev.name)
    if overridden:
        warnings.append(overridden)
    if not dev.verified:
        warnings.append(f"{dev.name} is not vendor-reconciled in the catalog (verified = false): results are estimated")
    for tower, n in zip(m.towers, m.tower_params):
        size = "its structure is not known" if n is None else f"{n:,} parameters"
        warnings.append(f"the text decoder only is priced: the {tower} ({size}) is not, nor its memory")
    return _Prepared(
        model=m.name, m=m, dev=dev, core=core, plan_head=head, plan_tail=tail,
        label=label, note=(UNCALIBRATED_NOTE if fit_row is None else _calibrated_note(fit_row))
        + (f"; {step[1]}" if step else ""),
        fitted=_fitted(fit_row, step), offers=tuple(cat.prices(dev.name, "on-demand")),
        runtime_note=runtime_note, held_runtime=runtime if fit_row is not None else None,
        warnings=tuple(warnings), group_labels=_group_labels(m), formats=formats,
        plan_labels={"runtime": runtime, "from_runtime": from_runtime, "weights": weights.label,
                     "weights_source": weights.source, "topology": topo.source},
        stamp=None if isinstance(model, Model) or m.source.startswith("bundled") else _stamp(model),
        basis_from=basis_from(label, fit_row),
    )  # fmt: skip


def bound_with_attention(model: Any, hardware: Any, attention_row: Mapping[str, Any], catalog: Any = None,
                         **kw: Any) -> Estimate:  # fmt: skip
    """The efficiency-1 bound of a plan (``estimate``'s keywords) but for its fused attention kernels,
    priced by the kernels ``attention_row`` fits (``_fits.attention_of``): what the calibration
    decomposes a production runtime's measured run into, its attention already priced by the
    runtime's own measured kernels."""
    n = tuple(kw.pop(k, None if k == "microbatches" else (0 if k == "prefix" else 1)) for k in _NUMBERS)
    allow_no_fit = kw.pop("allow_no_fit", False)
    p = prepare(model, hardware, catalog, calibrated=False, attention_row=attention_row, **kw)
    r, n = _run(p, n, allow_no_fit=allow_no_fit, breakdown=True)
    return Estimate(p, r, n, None)


def pricing(
    p: _Prepared, price_per_hour: Optional[float], amortise_years: Optional[float], catalog: Optional[Catalog]
) -> tuple[_Prepared, Optional[float]]:
    """The price per device-hour given (checked), and the prepared plan with the offers its cost
    is reckoned from: the published on-demand rentals, or with ``amortise_years`` the published
    purchase prices spread over that many years (``Catalog.offers``)."""
    if price_per_hour is not None and amortise_years is not None:
        raise PlanError("price_per_hour and amortise_years: give one (a price per device-hour, or the years a "
                        "published purchase price is spread over)")  # fmt: skip
    price = None if price_per_hour is None else _number("price_per_hour", price_per_hour, positive=True)
    if amortise_years is None:
        return p, price
    years = _number("amortise_years", amortise_years, positive=True)
    offers = (catalog or default_catalog()).offers(p.dev.name, years)
    return p._replace(offers=tuple(offers), amortise_years=years), price


def price_of(
    price_per_hour: Optional[float], offers: Sequence[Mapping[str, Any]]
) -> Optional[tuple[float, Optional[dict[str, Any]]]]:
    """The price per device-hour a cost is reckoned at, and the offer it came from: the one given
    (no offer), else the cheapest published on-demand offer; None where there is neither."""
    if price_per_hour is not None:
        return float(price_per_hour), None
    if offers:
        return float(offers[0]["usd_per_device_hour"]), dict(offers[0])
    return None


def usd_per_million(usd_per_hour: Any, tok_s: Any) -> Any:
    """USD per million tokens produced at ``tok_s`` tokens/s by devices costing ``usd_per_hour``
    together (numbers or Polars expressions alike)."""
    return usd_per_hour / (tok_s * 3600) * 1e6


def cost_of(
    plan: Mapping[str, Any],
    parallel: Mapping[str, Any],
    offers: Sequence[Mapping[str, Any]],
    price_per_hour: Optional[float],
    device: str,
    amortise_years: Optional[float] = None,
) -> dict[str, Any]:
    """A plan's cost from its round (``parallel.round_s``: a replica serves ``batch x attention_dp``
    requests in it) at a price per device-hour: the one given, else the cheapest offer (on-demand,
    or a purchase price amortised over ``amortise_years``)."""
    priced = price_of(price_per_hour, offers)
    if priced is None:
        return {"missing": missing_price(device, amortise_years)}
    price, offer = priced
    basis = ("given (price_per_hour)" if offer is None else "the cheapest published on-demand offer"
             if amortise_years is None
             else f"the cheapest published purchase price over {amortise_years:g} years")  # fmt: skip
    devices = int(parallel["devices"])
    replica = devices // int(plan["dp"])
    requests = int(plan["batch"]) * int(plan.get("attention_dp", 1))
    per_request = price * replica * float(parallel["round_s"]) / 3600 / requests
    out: dict[str, Any] = {
        "usd_per_device_hour": price, "basis": basis, "devices": devices, "usd_per_hour": price * devices,
        "usd_per_request": per_request,
        "usd_per_million_output_tokens": per_request / int(plan["output"]) * 1e6,
        "usd_per_million_tokens": per_request / (int(plan["prompt"]) + int(plan["output"])) * 1e6,
    }  # fmt: skip
    if offer is not None:
        out["offer"] = offer
    if offers:
        usd = [float(o["usd_per_device_hour"]) for o in offers]
        key = "on_demand" if amortise_years is None else "purchase"
        out[f"{key}_usd_per_device_hour"] = {"offers": len(usd), "min": min(usd), "max": max(usd)}
    return out


def missing_price(device: str, amortise_years: Optional[float]) -> str:
    """Why a cost is missing: no published price of the kind asked for."""
    if amortise_years is None:
        return (f"no published price for {device} (data/hardware/hardware_cost.csv); --price-per-hour (CLI) or "
                "price_per_hour= (Python) gives one")  # fmt: skip
    return (f"no published purchase price for {device} (data/hardware/hardware_purchase.csv); --price-per-hour "
            "(CLI) or price_per_hour= (Python) gives a price per device-hour")  # fmt: skip


def _fitted(fit_row: Optional[Mapping[str, Any]], step: Optional[tuple[float, str]]) -> tuple[tuple[str, str], ...]:
    """The fitted parameters a plan is priced with: a step overhead given or fitted on serving
    runs replaces the row's."""
    rows = [r for r in fitted_parameters(fit_row) if step is None or r[0] != "step overhead"]
    if step is not None:
        rows.append(("step overhead", f"{duration_us(step[0])} per step ({step[1]})"))
    return tuple(rows)


def _stamp(path: Any) -> Optional[bytes]:
    """The bytes of a model config path (a folder: its config.json); None when unreadable."""
    try:
        p = Path(path)
        return (p / "config.json" if p.is_dir() else p).read_bytes()
    except (OSError, TypeError, ValueError):
        return None


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


def _calibrated_note(f: Mapping[str, Any]) -> str:
    """One line on the fit: its rows, its error, and whether a parameter sits at a bound."""
    pinned = str(f.get("pinned") or "").split()
    return f"typical error x{math.exp(float(f['rms_log'])):.2f} over its rows (rms log {float(f['rms_log']):.2f})" + (
        f"; {len(pinned)} parameter(s) at a bound of the search (--verbose)" if pinned else ""
    )


def fitted_parameters(f: Optional[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """A calibration row's fitted parameters in physical units, rounded, each named for what it
    does; one the fit left at a bound of its search range says so (a sign of missing structure)."""
    if f is None:
        return []
    pinned = set(str(f.get("pinned") or "").split())

    def at(k: str, text: str) -> str:
        return text + (" (at its search bound)" if k in pinned else "")

    def frac(k: str) -> float:
        v = float(f[k])
        return 0.0 if k in pinned and v < 0.5 else v  # a lower bound of 0 fitted as 1e-18 is 0

    out = [("memory efficiency", at("eta_mem", f"{pct(frac('eta_mem'))} of the memory roof")),
           ("compute efficiency", at("eta_compute", f"{pct(frac('eta_compute'))} of the compute roof"))]  # fmt: skip
    if float(f["eta_compute_quant"]) != float(f["eta_compute"]):
        out.append(
            ("quantised GEMMs", at("eta_compute_quant", f"{pct(frac('eta_compute_quant'))} of the compute roof"))
        )
    for k, v in sorted((f.get("quant_formats") or {}).items()):
        out.append((f"{k} GEMMs", f"{pct(float(v))} of the compute roof"))
    if float(f["eta_moe"]) != float(f["eta_mem"]):
        out.append(("expert weights", at("eta_moe", f"{pct(frac('eta_moe'))} of the memory roof")))
    if float(f.get("routing_skew") or 0):
        out.append(("routing skew", at("routing_skew", sig(float(f["routing_skew"])))))
    if float(f.get("overlap", 1.0)) != 1.0:
        out.append(
            (
                "compute/memory overlap",
                at("overlap", f"hides {pct(frac('overlap'))} of the shorter of compute and memory time"),
            )
        )
    if float(f.get("overlap_moe", f.get("overlap", 1.0))) != float(f.get("overlap", 1.0)):
        out.append(
            (
                "expert-kernel overlap",
                at("overlap_moe", f"hides {pct(frac('overlap_moe'))} of the shorter of compute and memory time"),
            )
        )
    launch = 0.0 if "t_launch_us" in pinned and float(f["t_launch_us"]) < 1 else float(f["t_launch_us"])
    if f["runtime"] in KERNEL_RUNTIMES:
        out.append(("kernel floor", at("t_launch_us", f"{duration_us(launch)} per kernel (CUDA graphs)")))
    else:
        out.append(("launch overhead", at("t_launch_us", f"{duration_us(launch)} per kernel")))
    from .fits import attention_of

    for ph, a in attention_of(f).items():

        def att(k: str, text: str, ph: str = ph) -> str:
            return at(f"attn_{ph}_{k}", text)

        out.append((f"{ph} attention", ", ".join((
            att("eta_compute", f"{pct(a['eta_compute'])} of the compute roof"),
            att("eta_mem", f"{pct(a['eta_mem'])} of the memory roof"),
            att("t_floor_us", f"{duration_us(a['t_floor_us'])} per call"),
            att("t_item_us", f"{duration_us(a['t_item_us'])} per sequence x KV head"),
        ))))  # fmt: skip
    out.append(("step overhead", at("t_step_us", f"{duration_us(float(f['t_step_us']))} per step")))
    if float(f.get("t_layer_us") or 0):
        out.append(("layer overhead", f"{duration_us(float(f['t_layer_us']))} per layer"))
    return out


def _plan_json(plan: Mapping[str, Any]) -> str:
    return json.dumps({k: v for k, v in plan.items() if v is not None and k != "weight_dtype"})


def _protocol_cached(cat: Catalog) -> str:
    return cat.memo("protocol_json", protocol_json)
