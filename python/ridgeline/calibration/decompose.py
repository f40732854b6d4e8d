"""Row decomposition (spec 50): each measured row a static plan can price is decomposed once, at
efficiency 1, into its operators' compute and memory times, communication, kernel launches and
steps (``Decomposed``), priced the way its runtime ran it (``_estimate_kwargs``). The fit
(``calibrate``) and the validation (``validate``) price these under efficiencies without calling
the engine again."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import Any, Optional

import numpy as np

from ..catalog.store import Catalog
from ..engine.fits import attention_of
from ..errors import CatalogError, PlanError

EXPERT_WEIGHT_OPS = ("expert_up", "expert_down")

MODEL_METRICS = ("decode_tok_s", "prefill_tok_s", "ttft_ms", "throughput_tok_s", "tpot_ms")


@dataclasses.dataclass
class Decomposed:
    """One measured row, decomposed at efficiency 1."""

    row: dict[str, Any]
    compute: np.ndarray
    memory: np.ndarray  # at uniform routing (skew 0)
    expert: np.ndarray  # True where the operator is a grouped routed-expert kernel (eta_moe)
    quant: np.ndarray  # True where the operator is a GEMM on quantized weights
    fmt: np.ndarray  # a quantized GEMM's weight format ("" elsewhere)
    fixed: float  # communication time and fitted attention kernels' time (s)
    launches: float
    steps: float
    work: float  # what the metric divides (tokens or FLOPs), or the time scale for ttft
    kind: str  # "rate" (work / time) or "time_ms"
    # Routed-expert weight reads: memory time per distinct expert (0 elsewhere), the tokens
    # per step routed, and the distinct experts at skew 0; (E, k) of the model.
    moe_w: Optional[np.ndarray] = None
    moe_t: Optional[np.ndarray] = None
    moe_d0: Optional[np.ndarray] = None
    moe_ek: Optional[tuple[int, int]] = None
    fixed_attention: float = 0.0  # the part of `fixed` that is fitted attention kernels (s)


def has_flag(r: dict[str, Any], flag: str) -> bool:
    """Whether a benchmark row's comma-separated `flags` hold `flag`."""
    return flag in (r["flags"] or "").split(",")


def _flag_value(r: dict[str, Any], name: str) -> Optional[int]:
    """An integer a row's flags state as ``name=N`` (None when they do not)."""
    for f in (r["flags"] or "").split(","):
        k, _, v = f.partition("=")
        if k == name and v.isdigit():
            return int(v)
    return None


def n_ubatch(r: dict[str, Any]) -> Optional[int]:
    """llama.cpp's physical batch as the row's run states it (None: the run used the default)."""
    m = re.search(r"n_ubatch=(\d+)", r["notes"] or "")
    return int(m.group(1)) if m else None


def _estimate_kwargs(r: dict[str, Any], max_len: int, cat: Catalog) -> tuple[dict[str, Any], str]:
    """The plan a row measured, and the phase whose time its metric reads."""
    from ..engine.runtimes import runtime_execution

    b = int(r["batch"] or 1)
    wq = r["weight_quant"]
    llamacpp = r["runtime"].startswith("llamacpp")
    kw: dict[str, Any] = {
        "batch": b, "tp": int(r["tp"] or 1), "pp": int(r["pp"] or 1), "ep": int(r["ep"] or 1), "microbatches": 1,
        "attention_dp": _flag_value(r, "attention_dp") or 1,
        "weight_dtype": wq if wq and wq not in ("fp16", "bf16") else None,
        "dtype": "fp16" if wq == "fp16" else "bf16", "runtime": r["runtime"], "kv_dtype": r["kv_dtype"],
        "allow_no_fit": True,
        # Not identical_sequences, although llama-batched-bench feeds token 0 to every sequence:
        # its MoE rows say the experts read grow with B, which shared routing cannot produce.
        # Priced with the fitted routing skew; data/benchmarks/SOURCES.md has the numbers.
        "identical_sequences": False,
        # llama.cpp fuses attention only when run with flash attention (-fa 1, the row's flag);
        # TensorRT-LLM and vLLM always use fused attention kernels
        "flash_attention": not llamacpp or has_flag(r, "flash_attn"),
    }  # fmt: skip
    # the runtime's execution (prompt ubatches, KV reads, decode graphs), with the run's own
    # n_ubatch where it states one: the same derivation a plain estimate for the runtime uses
    kw.update(runtime_execution(r["runtime"], cat, flash_attention=kw["flash_attention"], ubatch=n_ubatch(r)))
    m = r["metric"]
    limit = max_len
    if m == "decode_tok_s":
        # N decode steps from the stated depth (an empty context starts at the BOS token);
        # a run that fills the model's whole context decodes N-1 steps in the plan
        prompt = max(int(r["depth"] or 0), 1)
        kw.update(prompt=prompt, output=min(int(r["output_tokens"]) + 1, limit - prompt))
        return kw, "decode"
    if m == "prefill_tok_s":
        # a prefill of N tokens on the stated prefix; at the full context the plan's sampled
        # token does not fit, so the prefill is priced as N-1 tokens plus it
        depth = int(r["depth"] or 0)
        kw.update(prompt=min(int(r["prompt_tokens"]), limit - depth - 1), prefix=depth, output=1)
        return kw, "prefill"
    if m == "ttft_ms":
        kw.update(prompt=int(r["prompt_tokens"]), output=1)
        return kw, "prefill"
    if m == "tpot_ms":
        # steady-state decode at the run's concurrency, the contexts spread over isl .. isl+osl:
        # the plan's decode steps from the prompt, averaged (the KV read is linear in context)
        kw.update(prompt=int(r["prompt_tokens"]), output=int(r["output_tokens"]))
        return kw, "decode"
    kw.update(prompt=int(r["prompt_tokens"]), output=int(r["output_tokens"]))
    return kw, "e2e"


def decompose(r: dict[str, Any], cat: Catalog, fits: Optional[Sequence[dict[str, Any]]] = None,
              fitted_attention: bool = True) -> Decomposed:  # fmt: skip
    """Splits a priced row's prediction at efficiency 1 into its parts.

    A production runtime's fused attention kernels, where its calibration (``fits``, default the
    shipped one) fits them from their own measured tables, are priced by those fits and held as
    fixed time (``_attention_fit``): the row's other parameters do not price them. With
    ``fitted_attention=False`` every op stays at efficiency 1 (the physical bound)."""
    from ..engine.estimate import bound_with_attention, estimate

    if r["metric"] == "gemm_tflops":
        return _decompose_gemm(r, cat)
    from ..models.config import Model

    model = Model.from_config(r["model"])
    kw, phase = _estimate_kwargs(r, model.max_model_len, cat)
    scale = 1.0
    if phase == "prefill" and has_flag(r, "layer-split") and kw["pp"] > 1:
        # llama.cpp pipelines the prompt's ubatches across a layer split: GPipe fill and drain of
        # m ubatch chunks over p stages, each stage ceil(L/p) of the L layers
        m = -(-int(kw["prompt"]) // int(kw["chunk"]))
        p = int(kw["pp"])
        scale = (m + p - 1) / m * (-(-model.num_layers // p)) / model.num_layers
    attn = _attention_fit(r, cat, fits) if fitted_attention else None
    if attn is None:
        e = estimate(model, r["hardware"], catalog=cat, calibrated=False, **kw)
    else:
        e = bound_with_attention(model, r["hardware"], attn, catalog=cat, **kw)
    df = e.breakdown
    if phase != "e2e":
        df = df.filter(df["phase"] == phase)
    # the fitted attention kernels' time is fixed; their compute and memory leave the fit's arrays
    held = (df["attention_kernel"].is_in(list(attention_of(attn))).fill_null(False).to_numpy() if attn
            else np.zeros(len(df), dtype=bool))  # fmt: skip
    attention_s = float(df["time_s"].to_numpy()[held].sum()) * scale
    attention_launches = float(df["launches"].to_numpy()[held].sum()) * scale
    moe = _expert_weights(model, r, cat, kw, phase, df, scale) if model.is_moe else {}
    b = int(r["batch"] or 1)
    steps = float(e.prefill["steps"] if phase == "prefill" else e.decode["steps"])
    if phase == "e2e":
        steps = float(e.prefill["steps"] + e.decode["steps"])
    work = {
        "decode_tok_s": b * float(kw["output"] - 1),
        "prefill_tok_s": b * float(kw["prompt"]),
        "throughput_tok_s": b * float(r["output_tokens"] or 0) / (e.parallel["devices"] if has_flag(r, "per_gpu")
                                                                  else 1),
        "tpot_ms": float(kw["output"] - 1),
    }.get(r["metric"], 1.0)  # fmt: skip
    return Decomposed(
        row=r, compute=np.where(held, 0.0, df["compute_s"].to_numpy()) * scale,
        memory=np.where(held, 0.0, df["memory_s"].to_numpy()) * scale,
        expert=df["grouped"].to_numpy(), quant=df["quantized"].to_numpy(), fmt=df["format"].fill_null("").to_numpy(),
        fixed=float(df["comm_s"].sum()) * scale + attention_s, steps=steps * scale,
        launches=float(df["launches"].sum()) * scale - attention_launches,
        work=work,
        kind="time_ms" if r["metric"] in ("ttft_ms", "tpot_ms") else "rate", fixed_attention=attention_s, **moe,
    )  # fmt: skip


def _attention_fit(
    r: dict[str, Any], cat: Catalog, fits: Optional[Sequence[dict[str, Any]]]
) -> Optional[dict[str, Any]]:
    """The calibration row whose fitted attention kernels price a production runtime's row (its
    device's, else its architecture's or runtime's profile, as an estimate takes), or None."""
    from ..engine.fits import KERNEL_RUNTIMES, lookup

    if r["runtime"] not in KERNEL_RUNTIMES:
        return None
    f = lookup(r["hardware"], r["runtime"], cat, fits)[1]
    return f if attention_of(f) else None


def _expert_weights(model: Any, r: dict[str, Any], cat: Catalog, kw: dict[str, Any], phase: str, df: Any,
                    scale: float) -> dict[str, Any]:  # fmt: skip
    """Each expert GEMM's memory time as A + W D(T, s): the engine at two skews gives W."""
    from .. import _core
    from ..engine.estimate import estimate

    eks = {(g["ffn"]["num_experts"], g["ffn"]["top_k"]) for g in model.layer_groups if g["ffn"]["kind"] == "moe"}
    b = int(kw["batch"])
    prompt_tokens = b * int(kw["prompt"])
    chunk = int(kw.get("chunk") or prompt_tokens)
    if len(eks) != 1 or (prompt_tokens > chunk and prompt_tokens % chunk):
        raise PlanError(f"calibration: {r['id']}: MoE rows need one (experts, top-k) and equal prefill steps")
    (n_exp, top_k) = eks.pop()
    # the second skew far from 0, so that D(T, s) differs enough to solve W at every T
    s1 = cat.constant("fit_routing_skew_max")
    e1 = estimate(model, r["hardware"], catalog=cat, calibrated=False, routing_skew=s1, **kw).breakdown
    if phase != "e2e":
        e1 = e1.filter(e1["phase"] == phase)
    # tokens routed per step: the batch in decode, a chunk (or the whole prompt) in prefill
    t = np.where(df["phase"].to_numpy() == "decode", float(b), float(min(chunk, prompt_tokens)))
    d0 = _core.distinct_experts(n_exp, top_k, t, 0.0)
    d1 = _core.distinct_experts(n_exp, top_k, t, s1)
    m0, m1 = df["memory_s"].to_numpy() * scale, e1["memory_s"].to_numpy() * scale
    weights = df["op"].is_in(list(EXPERT_WEIGHT_OPS)).to_numpy() & (d0 - d1 > 1e-12 * d0)
    w = np.where(weights, (m0 - m1) / np.where(weights, d0 - d1, 1.0), 0.0)
    return {"moe_w": w, "moe_t": t, "moe_d0": d0, "moe_ek": (n_exp, top_k)}


def _decompose_gemm(r: dict[str, Any], cat: Catalog) -> Decomposed:
    dev = cat.get(r["hardware"])
    m, n, k = float(r["gemm_m"]), float(r["gemm_n"]), float(r["gemm_k"])
    dtype = r["dtype"] or "bf16"
    peak = {"fp8": dev.tflops_fp8, "fp16": dev.tflops_fp16 or dev.tflops_bf16}.get(dtype, dev.tflops_bf16)
    if not peak:
        raise PlanError(f"{r['hardware']} has no {dtype} peak")
    elem = 1.0 if dtype == "fp8" else 2.0
    flops = 2 * m * n * k
    compute = flops / (peak * 1e12)
    memory = (m * k + k * n + m * n) * elem / (dev.memory_bw_gbs * 1e9)
    return Decomposed(row=r, compute=np.array([compute]), memory=np.array([memory]), expert=np.array([False]),
                      quant=np.array([False]), fmt=np.array([""]),
                      fixed=0.0, launches=1.0,
                      steps=0.0, work=flops / 1e12, kind="rate")  # fmt: skip


def priced_rows(cat: Catalog) -> list[dict[str, Any]]:
    metrics = (*MODEL_METRICS, "gemm_tflops")
    marks = ", ".join("?" for _ in metrics)
    q = f"SELECT * FROM benchmarks WHERE not_priced IS NULL AND metric IN ({marks}) ORDER BY id"
    rows: list[dict[str, Any]] = cat.sql(q, list(metrics)).to_dicts()
    return rows


def decompose_all(cat: Catalog, fitted_attention: bool = True) -> tuple[list[Decomposed], list[dict[str, Any]]]:
    """Every priced row decomposed (``decompose``); rows the engine refuses come back with the reason."""
    out, refused = [], []
    for r in priced_rows(cat):
        try:
            out.append(decompose(r, cat, fitted_attention=fitted_attention))
        except (PlanError, CatalogError, ValueError) as e:
            refused.append({"id": r["id"], "reason": str(e).splitlines()[0]})
    return out, refused


def _digest(rows: Iterable[tuple[Any, Any]]) -> str:
    """A short fingerprint of measured rows: their ids and values, in order."""
    h = hashlib.sha256()
    for rid, value in rows:
        h.update(f"{rid} {value!r}".encode())
    return h.hexdigest()[:16]
