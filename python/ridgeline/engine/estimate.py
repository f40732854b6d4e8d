"""One plan, one call into the Rust core: ``ridgeline.estimate(model, hardware, **plan)``."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from .. import _checks, _core
from .._checks import MAX_EXACT
from .._fmt import duration_us, pct, sig
from ..catalog.device import Device
from ..catalog.store import Catalog, default_catalog
from ..errors import DoesNotFitError, PlanError
from ..models import quant
from ..models.config import Model, identify
from .collectives import protocol_json, resolve_topology
from .result import _NUMBERS, GB, Estimate, _Prepared
from .runtimes import _NO_RUNTIME_EXECUTION, KERNEL_RUNTIMES, choose_runtime, collective_library, runtime_execution

if TYPE_CHECKING:
    from .plan import Plan

#: What every estimate says about its efficiencies until calibration exists.
UNCALIBRATED = "uncalibrated"


UNCALIBRATED_NOTE = (
    "efficiencies are 1.0 (no calibration row for this device and runtime): "
    "the times are an optimistic bound on what a real runtime achieves"
)


_UNCALIBRATED_EFF = json.dumps(
    {"eta_compute": 1.0, "eta_mem": 1.0, "t_launch_s": 0.0, "t_layer_s": 0.0, "t_step_s": 0.0, "t_request_s": 0.0}
)


_whole, _flag, _number, _text = _checks.whole, _checks.flag, _checks.number, _checks.text


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
    model: str | Model, hardware: str | Device, *, plan: Optional[Plan] = None,
    batch: int = 1, prompt: int = 1024, output: int = 256, prefix: int = 0, identical_sequences: bool = False,
    routing_skew: Optional[float] = None, flash_attention: bool = True, swa_cache_extra: Optional[int] = None,
    kv_pad: Optional[int] = None, kv_skip_masked_tail: Optional[bool] = None, decode_graphs: Optional[bool] = None,
    tp: int = 1, ep: int = 1, attention_dp: int = 1, pp: int = 1, dp: int = 1, microbatches: Optional[int] = None,
    devices_per_node: Optional[int] = None, scaleout_gbs: Optional[float] = None,
    scaleout_latency_us: Optional[float] = None, dtype: str = "bf16", weight_dtype: Optional[str] = None,
    kv_dtype: Optional[str] = None, chunk: Optional[int] = None, runtime: Optional[str] = None,
    speculative: Optional[str] = None, draft_tokens: Optional[int] = None, acceptance: Optional[str] = None,
    offload: Optional[str] = None, host: Optional[str | Mapping[str, Any]] = None, allow_no_fit: bool = False,
    calibrated: bool = True, breakdown: bool = True, catalog: Optional[Catalog] = None,
    price_per_hour: Optional[float] = None, amortise_years: Optional[float] = None,
    price_tier: Optional[str] = None, step_overhead_us: Optional[float] = None,
    request_overhead_us: Optional[float] = None,
) -> Estimate:  # fmt: skip
    """Estimates TTFT, TPOT, throughput and memory of one plan.

    Args:
        model: a bundled Hugging Face id, a path to a config.json, or a ``Model``.
        hardware: a catalog name or alias, or a ``Device``.
        plan: the plan's settings as one ``Plan`` (``ridgeline.Plan(tp=2, batch=8)``), instead of
            the keywords or beside them: a keyword set to other than its default must agree with it.
        batch, prompt, output, prefix, identical_sequences, routing_skew, flash_attention,
        swa_cache_extra, kv_pad, kv_skip_masked_tail, decode_graphs, tp, ep, attention_dp, pp, dp,
        microbatches, devices_per_node, scaleout_gbs, scaleout_latency_us, dtype, weight_dtype,
        kv_dtype, chunk, runtime, speculative, draft_tokens, acceptance, offload, host, calibrated,
        price_per_hour, price_tier, amortise_years: the plan's settings,
            each a field of ``Plan`` whose help (``help(ridgeline.Plan)``, or ``ridgeline
            estimate --help``) says what it means, its unit and its default. Where swa_cache_extra,
            kv_pad, kv_skip_masked_tail, decode_graphs and chunk are left unset they are how
            ``runtime`` runs the plan (``runtime_execution``: llama.cpp's from its source; any
            other runtime, or none, reads exactly the cells used, prefills in one step and
            launches every kernel); ``plan["from_runtime"]`` names the ones taken from it that
            shape this model's numbers. The runtime left unset is the one ``ridgeline estimate``
            and ``ridgeline sweep`` pick for the device (``choose_runtime``); ``runtime_note``
            says which and why.
        allow_no_fit: return a result with ``fits = False`` instead of raising.
        breakdown: keep per-operator rows.
        catalog: a ``Catalog`` other than the default one.
        step_overhead_us, request_overhead_us: each step's host overhead and each request's front-end
            time in us, for the calibration's t_step and t_request (as simulate takes them; said).

    Raises:
        PlanError, ModelConfigError, UnknownNameError, DoesNotFitError.

    >>> e = estimate("meta-llama/Llama-3.1-8B", "H100_SXM")
    >>> e.calibration, e.basis, e.fits
    ('calibrated (H100_SXM, vllm 0.24.0, 107425 rows)', 'measured', True)
    """
    if offload.__class__ is str and offload.strip().lower() == "auto":
        kw = {k: v for k, v in locals().items() if k not in ("model", "hardware", "offload", "kw")}
        return _auto_offload(model, hardware, kw)
    if plan is not None:
        from .plan import NAMES, merged  # a Plan's module is read when a plan is given (the cold start)

        settings = merged(plan, {k: v for k, v in locals().items() if k in NAMES}, "estimate")
        over: dict[str, Any] = {"step_overhead_us": step_overhead_us, "request_overhead_us": request_overhead_us}
        return estimate(model, hardware, allow_no_fit=allow_no_fit, breakdown=breakdown, catalog=catalog, **over,
                        **settings)  # fmt: skip
    # What the plan's numbers do not change (model, device, precisions, runtime, calibration,
    # links) is resolved once and kept: a warm call checks the numbers and prices them. Each
    # value is keyed with its exact type (a True is not the 1 a cached chunk was given as), an
    # unhashable one is checked on the full path, which names it.
    key = (
        model if model.__class__ is str else id(model), hardware if hardware.__class__ is str else id(hardware),
        runtime, dtype, weight_dtype, kv_dtype, chunk, routing_skew, identical_sequences, flash_attention,
        swa_cache_extra, kv_pad, kv_skip_masked_tail, decode_graphs, devices_per_node, scaleout_gbs,
        scaleout_latency_us, calibrated, catalog, attention_dp, speculative, draft_tokens, acceptance, offload, host,
        step_overhead_us, request_overhead_us,
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
        and step_overhead_us.__class__ is not bool and request_overhead_us.__class__ is not bool
        # a file the plan reads (an acceptance curve, a head's config) is read again on every call
        and acceptance is None and (speculative is None or (speculative.__class__ is str and ":" not in speculative))
        # an automatic placement is searched per plan (it depends on the numbers); a host given as
        # a mapping is read again
        and offload != "auto" and (host is None or host.__class__ is str)
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
                     attention_dp=attention_dp, speculative=speculative, draft_tokens=draft_tokens,
                     acceptance=acceptance, offload=offload, host=host,
                     t_step_us=None if step_overhead_us is None else _number("step_overhead_us", step_overhead_us),
                     t_request_us=None if request_overhead_us is None
                     else _number("request_overhead_us", request_overhead_us))  # fmt: skip
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
    p, price = pricing(p, price_per_hour, amortise_years, catalog, price_tier)
    return Estimate(p, r, n, price)


def _auto_offload(model: Any, hardware: Any, kw: dict[str, Any]) -> Estimate:
    """``estimate`` with ``offload="auto"``: the plan as given where it fits, else the cheapest
    placement that fits as its runtime offloads (``offload.candidates``: llama.cpp the fewest MoE
    layers' experts on the host, or the most layers on the device; vLLM and SGLang the fewest GiB
    streamed); the result's ``plan["offload"]`` says what was chosen and why."""

    def fits(placement: Optional[str]) -> Estimate:
        return estimate(model, hardware, **{**kw, "offload": placement, "allow_no_fit": True, "breakdown": False})

    first = fits(None)
    if first.fits:
        e = estimate(model, hardware, **kw)
        none = {"kind": "none", "auto": True, "label": "auto: the plan fits on the device; nothing kept on the host"}
        object.__setattr__(e, "_p", e._p._replace(plan_labels={**e._p.plan_labels, "offload": none}))
        return e
    from .offload import candidates

    cands, why, whole = candidates(first._p.m, first._p.plan_labels["runtime"], first.memory["weights_bytes"])
    while len(cands) > 1 and cands[-1].startswith("stream-gb:"):
        try:  # vLLM streams layer weights only: the largest amount the layers hold
            fits(cands[-1])
            break
        except PlanError:
            cands.pop()
    if not fits(cands[-1]).fits:
        raise DoesNotFitError(
            f"{first._p.model} on {first._p.dev.name}: does not fit even with {whole} in host memory "
            f"({first.memory['total_bytes'] / GB:.1f} GB without offload, {first.memory['budget_bytes'] / GB:.1f} GB "
            "usable); use a smaller batch, a shorter context, a smaller weight format or a larger device"
        )
    lo, hi = -1, len(cands) - 1  # cands[lo] does not fit (or is none), cands[hi] fits
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(cands[mid]).fits:
            hi = mid
        else:
            lo = mid
    chosen = cands[hi]
    e = estimate(model, hardware, **{**kw, "offload": chosen})
    why = f"auto: {chosen}, {why}"
    summary = {**e._p.plan_labels["offload"], "auto": True}
    summary["label"] = f"{why}; {summary['label']}"
    object.__setattr__(e, "_p", e._p._replace(plan_labels={**e._p.plan_labels, "offload": summary}))
    return e


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
        h = mem.get("host")
        if h and h["weights_bytes"] + h["kv_bytes"] > h["capacity_bytes"] and not mem["shortfall_bytes"]:
            off = p.plan_labels["offload"]
            raise DoesNotFitError(
                f"{p.model} on {p.dev.name} with {off['kind']}:{off['amount']:g} keeps "
                f"{(h['weights_bytes'] + h['kv_bytes']) / GB:.1f} GB in host memory but {off['host']} holds "
                f"{h['capacity_bytes'] / GB:.0f} GB; keep less on the host, or name a larger host (--host)"
            )
        budget = p.plan_tail["gpu_memory_utilization"]
        raise DoesNotFitError(
            f"{p.model} on {p.dev.name} (batch {batch}, {prompt}+{output} tokens, TP {tp}) "
            f"needs {mem['total_bytes'] / GB:.1f} GB per device but {mem['budget_bytes'] / GB:.1f} GB is usable "
            f"({p.dev.memory_gb:g} GiB x gpu_memory_utilization {budget:g}): "
            f"short by {mem['shortfall_bytes'] / GB:.1f} GB; use more TP, a smaller batch or a shorter context, "
            + (
                "or keep weights in host memory (--offload auto: llama.cpp's --n-cpu-moe / -ngl, vLLM's "
                "--cpu-offload-gb) "
                if p.plan_labels.get("offload") is None
                else "or keep more on the host "
            )
            + "(or --allow-no-fit to see the numbers)"
        )
    return r, n


def prepare(
    model: Any, hardware: Any, catalog: Any = None, *, runtime: Any = None, dtype: Any = "bf16",
    weight_dtype: Any = None, kv_dtype: Any = None, chunk: Any = None, routing_skew: Any = None,
    identical_sequences: Any = False, flash_attention: Any = True, swa_cache_extra: Any = None, kv_pad: Any = None,
    kv_skip_masked_tail: Any = None, decode_graphs: Any = None, devices_per_node: Any = None,
    scaleout_gbs: Any = None, scaleout_latency_us: Any = None, calibrated: Any = True, attention_dp: Any = 1,
    t_step_us: Optional[float] = None, t_request_us: Optional[float] = None,
    attention_row: Optional[Mapping[str, Any]] = None, speculative: Any = None, draft_tokens: Any = None,
    acceptance: Any = None, offload: Any = None, host: Any = None,
) -> _Prepared:  # fmt: skip
    """Resolves and checks everything of a plan but its numbers (``estimate`` keeps the result).
    ``t_step_us`` and ``t_request_us`` replace the calibration's step and front-end overheads (the
    simulator's step_overhead_us and request_overhead_us; the note says so); else the plan takes
    the calibration's, the same in every door. Uncalibrated with ``attention_row``, the plan is the
    bound but for its fused attention kernels, which that calibration row's fitted kernels price
    (``bound_with_attention``)."""
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
    weight_dtype, stored = _stored_weights(model, m, dtype, weight_dtype)
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

    label, fit_row = lookup(dev.chip, runtime, cat) if calibrated else (UNCALIBRATED, None)
    formats = weights.format_names()
    eff = _UNCALIBRATED_EFF if fit_row is None else efficiency_json(fit_row, formats)
    if fit_row is None and attention_row is not None:
        eff = json.dumps({**json.loads(_UNCALIBRATED_EFF), **attention_efficiency(attention_row)})
    given_over = {k: (us, f"{what} given") for k, us, what in (("t_step_s", t_step_us, "step overhead"),
                                                                ("t_request_s", t_request_us, "request overhead"))
                  if us is not None}  # fmt: skip
    if given_over:
        eff = json.dumps({**json.loads(eff), **{k: us * 1e-6 for k, (us, _) in given_over.items()}})
    step = given_over.get("t_step_s")
    if routing_skew is None:
        tail["routing_skew"] = float(fit_row.get("routing_skew") or 0.0) if fit_row else 0.0
    else:
        tail["routing_skew"] = _number("routing_skew", routing_skew)
    core_plan = {"batch": 1, "prompt": 1, "output": 1, **head, **tail, "weights": weights.core(),
                 "topology": topo.core()}  # fmt: skip
    spec = None
    if speculative is not None or draft_tokens is not None or acceptance is not None:
        from . import speculation  # read only by a plan that speculates (the cold start)

        def draft_weights(d: Model) -> Any:
            return quant.on_runtime(_stored_weights(d, d, dtype, None)[1], runtime).core()

        spec = speculation.resolve(speculative, draft_tokens, acceptance, m, weights.core(), draft_weights)
        if spec is not None:
            core_plan["speculation"] = spec.core
    off = _offload(offload, host, m, dev, runtime, cat, core_plan)
    core = _core.Prepared(m._core, dev.core_for(collective_library(runtime)), _plan_json(core_plan), eff,
                          _protocol_cached(cat))  # fmt: skip
    warnings = [overridden] if (overridden := cat.override_note(dev.name)) else []
    if not dev.verified:
        warnings.append(f"{dev.name} is not vendor-reconciled in the catalog (verified = false): results are estimated")
    if spec is not None and spec.borrowed:
        warnings.append(f"speculation: the acceptance length is {spec.acceptance}")
    warnings += off.warnings() if off is not None else []
    for tower, n in zip(m.towers, m.tower_params):
        size = "its structure is not known" if n is None else f"{n:,} parameters"
        warnings.append(f"the text decoder only is priced: the {tower} ({size}) is not, nor its memory")
    return _Prepared(
        model=m.name, m=m, dev=dev, core=core, plan_head=head, plan_tail=tail,
        label=label, note=(UNCALIBRATED_NOTE if fit_row is None else _calibrated_note(fit_row))
        + "".join(f"; {why}" for _, why in given_over.values()),
        fitted=_fitted(fit_row, step), offers=tuple(cat.prices(dev.name, "on-demand")),
        runtime_note=runtime_note, held_runtime=runtime if fit_row is not None else None,
        warnings=tuple(warnings), group_labels=_group_labels(m), formats=formats,
        plan_labels={"runtime": runtime, "from_runtime": from_runtime, "weights": weights.label,
                     "weights_source": weights.source, "topology": topo.source,
                     "speculation": None if spec is None else spec.summary(),
                     "offload": None if off is None else off.summary()},
        stamp=None if isinstance(model, Model) or m.source.startswith("bundled") else _stamp(model),
        basis_from=basis_from(label, fit_row), request_s=float(json.loads(eff)["t_request_s"]),
    )  # fmt: skip


def _offload(
    offload: Any, host: Any, m: Model, dev: Device, runtime: Optional[str], cat: Catalog, core_plan: dict[str, Any]
) -> Any:
    """The plan's offload resolved (``engine.offload.Offload``) and set in ``core_plan``: a placement,
    not ``auto`` (which ``estimate`` searches); None without one."""
    if offload is None and host is None:
        return None
    from . import offload as offloading  # read only by a plan that offloads (the cold start)

    if offload is None:
        raise PlanError("host: names the host an offloading plan keeps weights on; give --offload too")
    kind, amount = offloading.parse(offload)
    if kind == "auto":
        raise PlanError("offload: auto is searched by estimate (ridgeline estimate --offload auto), one plan at "
                        f"a time; here give the placement itself ({offloading.ACCEPTED})")  # fmt: skip
    off = offloading.resolve(kind, amount, m, host, dev.host_link_bw_gbs, runtime,
                             int(cat.constant("llamacpp_offload_min_batch")))  # fmt: skip
    core_plan["offload"] = off.core
    return off


def _stored_weights(model: Any, m: Model, dtype: str, weight_dtype: Optional[str]) -> tuple[Optional[str], Any]:
    """The weight format a plan names (a bundled name's quantisation suffix, "Meta-Llama-3.1-8B-FP8",
    states it; a weight_dtype that disagrees is refused) and the weights' formats as stored: a
    runtime that has no type for one of them cannot run the plan."""
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
    stored = quant.resolve(m, dtype, weight_dtype)
    if named is not None:
        stored = dataclasses.replace(stored, source=f"the model name '{model}'")
    return weight_dtype, stored


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
    p: _Prepared,
    price_per_hour: Optional[float],
    amortise_years: Optional[float],
    catalog: Optional[Catalog],
    price_tier: Optional[str] = None,
) -> tuple[_Prepared, Optional[float]]:
    """The price per device-hour given (checked), and the prepared plan with the offers its cost
    is reckoned from: the published on-demand rentals (of ``price_tier`` where given), or with
    ``amortise_years`` the published purchase prices spread over that many years (``Catalog.offers``)."""
    if price_per_hour is not None and (amortise_years is not None or price_tier is not None):
        raise PlanError("price_per_hour: give a price per device-hour, or amortise_years (the years a published "
                        "purchase price is spread over) or price_tier (a tier of published rentals), "
                        "not both")  # fmt: skip
    price = None if price_per_hour is None else _number("price_per_hour", price_per_hour, positive=True)
    if amortise_years is None and price_tier is None:
        return p, price
    years = None if amortise_years is None else _number("amortise_years", amortise_years, positive=True)
    offers = (catalog or default_catalog()).offers(p.dev.name, years, price_tier)
    return p._replace(offers=tuple(offers), amortise_years=years, price_tier=price_tier), price


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
    if float(f.get("t_request_us") or 0):
        out.append(("front end", f"{duration_us(float(f['t_request_us']))} per request, before its prefill"))
    if float(f.get("t_layer_us") or 0):
        out.append(("layer overhead", f"{duration_us(float(f['t_layer_us']))} per layer"))
    return out


def _plan_json(plan: Mapping[str, Any]) -> str:
    return json.dumps({k: v for k, v in plan.items() if v is not None and k != "weight_dtype"})


def _protocol_cached(cat: Catalog) -> str:
    return cat.memo("protocol_json", protocol_json)
