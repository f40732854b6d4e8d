"""The plan: every setting of "model M on hardware H under plan P" written once, as the fields of
one frozen dataclass that carry their help, unit, default and check.

``estimate``, ``simulate`` and ``sweep`` take a ``Plan`` (``plan=``) as well as its fields as
keywords; the CLI's options for those settings are generated from the fields (``ridgeline.cli``),
so a new setting is one field here, not a copy in every door.

>>> from ridgeline import Plan
>>> Plan(tp=2, batch=8).tp
2
>>> Plan(tp=2, batch=8).changed()
{'batch': 8, 'tp': 2}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Callable, Optional

from .. import _checks, _core
from ..errors import PlanError

#: The dtypes a plan's activations take, as the CLI's help lists them.
DTYPES = "fp32, tf32, bf16, fp16 (weights and KV also fp8, int8)"


def _whole_from(floor: int) -> Callable[[str, Any], int]:
    return lambda name, v: _checks.whole(name, v, floor)


def _optional(check: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
    return lambda name, v: None if v is None else check(name, v)


def _dtype(name: str, v: Any) -> str:
    """A dtype as users write it (``bfloat16``, ``BF16``), through the core's one alias table."""
    if not isinstance(v, str):
        raise PlanError(f"{name}: expected a dtype name such as bf16, got {v!r}")
    return _core.parse_dtype(name, v)


def _positive(name: str, v: Any) -> float:
    return _checks.number(name, v, positive=True)


def _tier(name: str, v: Any) -> str:
    from ..catalog.store import PRICE_TIERS

    if v not in PRICE_TIERS:
        raise PlanError(f"{name}: one of {', '.join(PRICE_TIERS)}, got {v!r}")
    return str(v)


@dataclasses.dataclass(frozen=True)
class Setting:
    """What a plan's field says of itself: its help (the CLI's and the API's), its unit ('' for a
    name or a switch), the check its value passes, which CLI commands take it, and how the CLI
    spells it where that is not ``--field-name``."""

    help: str
    unit: str
    check: Callable[[str, Any], Any]
    #: the commands whose options include it (estimate, simulate, sweep)
    commands: frozenset[str]
    #: a switch on by default that the CLI turns off with one flag: the flag and its help
    off_flag: Optional[tuple[str, str]] = None
    #: the help of a sweep axis of it: a field with one is an axis of ``ridgeline sweep``
    axis_help: Optional[str] = None


ALL = frozenset({"estimate", "simulate", "sweep"})
ESTIMATE = frozenset({"estimate"})
ESTIMATE_SWEEP = frozenset({"estimate", "sweep"})


def _setting(default: Any, help: str, unit: str, check: Callable[[str, Any], Any], commands: frozenset[str],
             **more: Any) -> Any:  # fmt: skip
    return dataclasses.field(
        default=default, metadata={"setting": Setting(help=help, unit=unit, check=check, commands=commands, **more)}
    )


_WHOLE = _whole_from(1)
_COUNT = _whole_from(0)
_OPT_WHOLE = _optional(_WHOLE)
_OPT_FLAG = _optional(_checks.flag)
_OPT_TEXT = _optional(_checks.text)


@dataclasses.dataclass(frozen=True)
class Plan:
    """One plan's settings (the model and the hardware are given beside it). Each field is checked
    when the plan is made; a value that fails is a PlanError naming the field. ``None`` means the
    default the field's help names (the runtime's, the catalog's or the calibration's)."""

    batch: int = _setting(1, "Concurrent sequences.", "sequences", _WHOLE, ESTIMATE_SWEEP,
                          axis_help="Batch sizes: 1,8,64 or 1..256:x2.")  # fmt: skip
    prompt: int = _setting(1024, "Prompt tokens per sequence.", "tokens", _WHOLE, ESTIMATE_SWEEP,
                           axis_help="Prompt lengths: 128..32768:x2.")  # fmt: skip
    output: int = _setting(256, "Output tokens per sequence (the first comes from prefill).", "tokens", _WHOLE,
                           ESTIMATE_SWEEP, axis_help="Output lengths.")  # fmt: skip
    prefix: int = _setting(0, "Tokens already cached before the prompt (llama-bench -d, a prefix-cache hit).",
                           "tokens", _COUNT, ESTIMATE)  # fmt: skip
    tp: int = _setting(1, "Tensor-parallel degree.", "devices", _WHOLE, ALL, axis_help="TP degrees: 1,2,4,8.")
    ep: int = _setting(1, "Expert-parallel degree: it divides tp x attention_dp (E/ep whole experts a rank, each "
                       "sharded over the rest of the group).", "devices", _WHOLE, ALL,
                       axis_help="Expert-parallel degrees (1 or TP).")  # fmt: skip
    attention_dp: int = _setting(
        1, "Attention data-parallel groups of tp ranks sharing the routed experts: each runs attention and the dense "
        "layers on its own batch while the experts serve every group's tokens; throughput counts every group.",
        "groups", _WHOLE, frozenset({"estimate", "simulate"}),
    )  # fmt: skip
    pp: int = _setting(1, "Pipeline stages (ceil(layers / pp) layers each); latency is the full pass plus the sends.",
                       "stages", _WHOLE, ALL, axis_help="Pipeline stages.")  # fmt: skip
    dp: int = _setting(1, "Data-parallel replicas (throughput only).", "replicas", _WHOLE, ESTIMATE_SWEEP,
                       axis_help="Data-parallel replicas.")  # fmt: skip
    microbatches: Optional[int] = _setting(None, "Micro-batches per pipeline round; throughput follows GPipe. Default: "
                                           "pp.", "micro-batches",
                                           _OPT_WHOLE, ESTIMATE)  # fmt: skip
    devices_per_node: Optional[int] = _setting(None, "Devices per node. Default: the catalog's scale-up domain.",
                                               "devices", _OPT_WHOLE, ESTIMATE)  # fmt: skip
    scaleout_gbs: Optional[float] = _setting(None, "Scale-out bandwidth per device per direction. Default: catalog.",
                                             "GB/s", _optional(_positive), ESTIMATE)  # fmt: skip
    scaleout_latency_us: Optional[float] = _setting(
        None, "Scale-out per-hop latency. Default: catalog, else omitted and flagged.", "us",
        _optional(_checks.number), ESTIMATE,
    )  # fmt: skip
    dtype: str = _setting("bf16", f"Activation/compute dtype: {DTYPES}.", "", _dtype, ALL,
                          axis_help="Activation dtypes.")  # fmt: skip
    weight_dtype: Optional[str] = _setting(
        None, "Weight format: a dtype (bf16, fp8, int8), int4/w4a16, gptq, awq, mxfp4, nvfp4 or a GGUF type "
        "(q4_0, q4_k_m, q8_0, ...). Default: the checkpoint's quantization_config, else a hint in the model name, "
        "else dtype.", "", _OPT_TEXT, ALL, axis_help="Weight formats (see estimate --help).",
    )  # fmt: skip
    kv_dtype: Optional[str] = _setting(None, "KV-cache dtype. Default: dtype.", "", _optional(_dtype), ALL,
                                       axis_help="KV-cache dtypes.")  # fmt: skip
    chunk: Optional[int] = _setting(
        None, "Chunked-prefill token budget per step. Default: the runtime's (llama.cpp: n_ubatch 512; else one "
        "step).", "tokens", _OPT_WHOLE, ESTIMATE_SWEEP, axis_help="Chunked-prefill budgets (0: none).",
    )  # fmt: skip
    runtime: Optional[str] = _setting(
        None, "Runtime that runs the plan and whose calibration prices it (llamacpp-cuda, llamacpp-metal, sglang, "
        "trtllm, vllm, ...; 'none': the plan as written at the bound). Default: of the runtimes that run on the "
        "device, vllm where fitted, else the best-covered one; none where no calibrated runtime runs there. The "
        "output says which.", "", _OPT_TEXT, ALL,
        axis_help="Runtime(s) whose way of running and calibration price the plans, as estimate --runtime does "
        "('none': the plan as written at the bound). Default: the one estimate picks for each device (the runtime "
        "and calibration columns say which).",
    )  # fmt: skip
    routing_skew: Optional[float] = _setting(
        None, "Zipf exponent of MoE expert popularity (0: uniform routing; spec 30). Default: the calibration's "
        "fit, else 0.",
        "", _optional(_checks.number), ESTIMATE,
    )  # fmt: skip
    flash_attention: bool = _setting(
        True, "Fused attention. Off: the runtime materialises the attention scores (llama.cpp without -fa): full "
        "rectangle, each score through memory (unfused_attention_score_bytes in data/constants.csv).", "",
        _checks.flag, ESTIMATE,
        off_flag=("--no-flash-attention", "The runtime materialises the attention scores (llama.cpp without -fa): "
                  "full rectangle, scores via memory."),
    )  # fmt: skip
    swa_cache_extra: Optional[int] = _setting(
        None, "Cells a sliding-window layer's KV cache holds beyond the window, read by every decode step "
        "(llama.cpp: its -ub, the SWA cache being window + n_ubatch per sequence). Default: the runtime's (0 "
        "without one).", "cells", _optional(_COUNT), ESTIMATE,
    )  # fmt: skip
    kv_pad: Optional[int] = _setting(
        None, "Decode reads the KV cache in multiples of this many cells. Default: the runtime's (llama.cpp 256; 1, "
        "exactly the cells used, without one).", "cells", _OPT_WHOLE, ESTIMATE,
    )  # fmt: skip
    kv_skip_masked_tail: Optional[bool] = _setting(
        None, "With several sequences, decode skips trailing KV tiles with no attended cell (llama.cpp CUDA flash "
        "attention): a wrapped sliding-window ring is read up to its newest cell; one sequence reads its whole "
        "view. Default: the runtime's.", "",
        _OPT_FLAG, ESTIMATE,
    )  # fmt: skip
    decode_graphs: Optional[bool] = _setting(
        None, "One-token decode steps (batch 1) are replayed from a captured CUDA graph: no per-kernel launch "
        "overhead (llama.cpp CUDA); larger batches launch. Default: the runtime's.", "", _OPT_FLAG, ESTIMATE,
    )  # fmt: skip
    identical_sequences: bool = _setting(
        False, "Every sequence holds the same tokens (n copies of one request), so MoE routing picks the same "
        "experts for all of them.", "", _checks.flag, ESTIMATE,
    )  # fmt: skip
    speculative: Optional[str] = _setting(
        None, "Speculative decoding: eagle3 (the EAGLE-3 head bundled for the model), eagle3:CONFIG (a head's "
        "config.json), eagle (an EAGLE-1/2 head: one of a dense model's layers behind an fc), mtp (the model's own "
        "MTP module), ngram (drafts looked up on the host) or draft:MODEL (a draft model). Each step drafts "
        "draft_tokens tokens a sequence and the target verifies them in one pass. Default: none.", "", _OPT_TEXT, ALL,
        axis_help="Speculative decoding methods (none, eagle3, eagle, mtp, ngram, draft:MODEL); a plan that does not "
        "speculate takes the draft-tokens and acceptance axes' first values only.",
    )  # fmt: skip
    draft_tokens: Optional[int] = _setting(
        None, "Tokens drafted a sequence each speculative step (k: num_speculative_tokens, --spec-draft-n-max, MTP "
        "nextn); needed with speculative.", "tokens", _OPT_WHOLE, ALL,
        axis_help="Draft depths of the speculating plans: 1,2,3.",
    )  # fmt: skip
    acceptance: Optional[str] = _setting(
        None, "Acceptance curve CSV, columns as data/speculation/acceptance_curves.csv (depth and acceptance_length, "
        "or acceptance_rate_at_position): the tokens a step keeps at draft_tokens. Default: the bundled curve "
        "measured on the model, else on its family (labelled borrowed).", "", _OPT_TEXT, ALL,
        axis_help="Acceptance curve files of the speculating plans (default: the bundled curves, as estimate).",
    )  # fmt: skip
    offload: Optional[str] = _setting(
        None, "Keep weights in host memory: experts:N (the routed experts of the first N MoE layers, computed by "
        "the host: llama.cpp --n-cpu-moe N), gpu-layers:N (N layers on the device, the first ones and the LM head "
        "held and run by the host: llama.cpp -ngl N), stream-gb:G (G GiB a device kept on the host and read over "
        "the host link every pass: vLLM --cpu-offload-gb G) or auto (the plan as given where it fits, else the "
        "least on the host that fits; the result says what it chose). Default: none.", "", _OPT_TEXT, ESTIMATE,
    )  # fmt: skip
    host: Optional[str] = _setting(
        None, "The host an offloading plan keeps weights on: a row of data/hardware/hosts.csv (its memory "
        "bandwidth and compute). Default: the row marked assumed_default, labelled in the result.", "", _OPT_TEXT,
        ESTIMATE,
    )  # fmt: skip
    calibrated: bool = _setting(
        True, "Apply the runtime's calibration. Off: the efficiency-1 bound of the same plan, run the same way (so "
        "the memory fit does not change).", "",
        _checks.flag, ALL,
        off_flag=("--uncalibrated", "Ignore the runtime's calibration: the efficiency-1 bound of the same plan, run "
                  "the same way."),
    )  # fmt: skip
    price_per_hour: Optional[float] = _setting(
        None, "Price per device-hour for the cost. Default: the cheapest published on-demand offer for the "
        "device.", "USD", _optional(_positive), frozenset({"estimate", "simulate"}),
    )  # fmt: skip
    price_tier: Optional[str] = _setting(
        None, "Reckon the cost from the cheapest on-demand offer of one price tier: hyperscaler (AWS, Azure, "
        "Google Cloud list prices), neocloud (GPU clouds) or marketplace (independent hosts' asks), as "
        "data/hardware/providers.csv classes each provider. Default: the cheapest offer of any.", "",
        _optional(_tier), ALL,
    )  # fmt: skip
    amortise_years: Optional[float] = _setting(
        None, "Reckon the cost from the device's cheapest published purchase price spread over these years "
        "(data/hardware/hardware_purchase.csv), instead of a rental.", "years", _optional(_positive), ALL,
    )  # fmt: skip

    def __post_init__(self) -> None:
        for f in FIELDS:
            v = getattr(self, f.name)
            checked = f.metadata["setting"].check(f.name, v)
            if checked is not v:
                object.__setattr__(self, f.name, checked)

    def changed(self) -> dict[str, Any]:
        """The fields that differ from their defaults, by name (what a user set)."""
        return {f.name: getattr(self, f.name) for f in FIELDS if getattr(self, f.name) != f.default}

    def as_kwargs(self) -> dict[str, Any]:
        """Every field by name, as ``estimate``'s keywords."""
        return {f.name: getattr(self, f.name) for f in FIELDS}


FIELDS: tuple[dataclasses.Field[Any], ...] = dataclasses.fields(Plan)
# help(ridgeline.Plan) lists every field with its help and unit: the one place they are written
Plan.__doc__ = (
    (Plan.__doc__ or "")
    + "\n\n    Fields:\n"
    + "\n".join(
        f"        {f.name} ({f.metadata['setting'].unit or 'name or switch'}; default {f.default!r}): "
        f"{f.metadata['setting'].help}"
        for f in FIELDS
    )
)
NAMES = frozenset(f.name for f in FIELDS)
DEFAULTS: Mapping[str, Any] = {f.name: f.default for f in FIELDS}


def setting(name: str) -> Setting:
    """The ``Setting`` of a plan field."""
    s: Setting = next(f for f in FIELDS if f.name == name).metadata["setting"]
    return s


def check_plan(plan: Any) -> Plan:
    """``plan`` as a Plan, or a PlanError saying what is accepted."""
    if not isinstance(plan, Plan):
        raise PlanError(f"plan: expected a ridgeline.Plan, got {type(plan).__name__}")
    return plan


#: The plan fields ``simulate`` takes (the simulator batches, chunks and parallelises by its
#: scheduler's settings and its instances, not by a static plan's).
SIMULATE = frozenset(
    {"prompt", "output", "tp", "ep", "attention_dp", "pp", "runtime", "dtype", "weight_dtype", "kv_dtype", "calibrated",
     "price_per_hour", "price_tier", "amortise_years", "speculative", "draft_tokens", "acceptance"}
)  # fmt: skip


def merged(
    plan: Optional[Plan], given: Mapping[str, Any], door: str, accepted: frozenset[str] = NAMES
) -> dict[str, Any]:
    """The settings ``door`` (estimate, simulate or sweep) runs with when ``plan`` is given beside
    keyword settings ``given``: the plan's fields, except that a keyword given with a value other
    than its default must not also be set, differently, in the plan (one plan, one answer). A
    field the door does not take (outside ``accepted``) is refused where the plan sets it."""
    if plan is None:
        return dict(given)
    plan = check_plan(plan)
    refused = sorted(k for k in plan.changed() if k not in accepted)
    if refused:
        raise PlanError(
            f"plan: {door} does not take {', '.join(refused)}; it takes {', '.join(sorted(accepted))} from a Plan"
        )
    out = dict(given)
    for k, v in plan.as_kwargs().items():
        if k not in accepted:
            continue
        g = given.get(k, DEFAULTS[k])
        if g is DEFAULTS[k] or g == v or (g == DEFAULTS[k] and type(g) is type(DEFAULTS[k])):
            out[k] = v
        elif v != DEFAULTS[k]:
            raise PlanError(
                f"{k}: given as {g!r} beside plan= whose {k} is {v!r}; give each setting once, in the Plan or as a "
                f"keyword of {door}"
            )
    return out
