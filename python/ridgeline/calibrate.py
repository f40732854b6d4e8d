"""Calibration (spec 50): fit a few efficiencies per runtime (and per device where it
has rows of its own) to the measured rows, and validate in-sample and leave-one-device-out.

Each priced row is decomposed once, at efficiency 1, into its operators' compute and
memory times, communication, kernel launches and steps; a prediction under
efficiencies (eta_mem, eta_compute, t_launch_us, t_step_us, overlap) is then

    T = sum_ops [o max(c, m) + (1 - o)(c + m)] + comm + launches t_launch + steps t_step

with c = compute / eta_compute and m = memory / eta_mem per operator: the roofline's max at
overlap o = 1, the two in series at 0. The prediction runs in the core (``_core.CalibRows``,
rust/src/calib.rs): differential evolution hands it each generation's whole population in one
call, priced in parallel, without calling the engine. Routed-expert
GEMMs over more than one token per step take eta_moe and their own overlap (overlap_moe: a grouped
kernel streams each expert's weights for the few tokens routed to it, where a dense GEMM streams
its weights once for the whole step), quantized GEMMs their weight format's
efficiency (eta_compute_quant where the format has too few rows for its own). Expert GEMMs'
weight bytes follow the distinct experts a step touches, D(T, s) (`_core.distinct_experts`, spec
30): the decomposition keeps each expert GEMM's memory time as A + W D(T, s), solved from the
engine at two skews, so the routing skew s is fitted like an efficiency.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

import numpy as np

from ._fits import BOUND_PARAMS, PARAMS, fit_params, memory_technology

# What an estimate reads of the calibration lives in _fits (no numpy); its public names stay here.
from ._fits import CALIBRATION_FILE as CALIBRATION_FILE
from ._fits import HOLDOUT_FILE as HOLDOUT_FILE
from ._fits import efficiency_json as efficiency_json
from ._fits import formats_of as formats_of
from ._fits import shipped_fits as shipped_fits
from ._fits import shipped_holdout as shipped_holdout
from ._io import csv_text
from ._version import __version__
from .catalog import Catalog, default_catalog
from .errors import CatalogError, PlanError
from .runtimes import default_runtime as default_runtime

UNCALIBRATED = np.array(BOUND_PARAMS)
SKEW = PARAMS.index("routing_skew")
CQ = PARAMS.index("eta_compute_quant")
EXPERT_WEIGHT_OPS = ("expert_up", "expert_down")
MODEL_METRICS = ("decode_tok_s", "prefill_tok_s", "ttft_ms", "throughput_tok_s", "tpot_ms")
HOLDOUT_COLUMNS = ("runtime", "phase", "n_rows", "n_devices", "q10", "q50", "q90", "data_hash", "source")
FIT_COLUMNS = (
    "hardware", "runtime", "memory", "precision", "phase", *PARAMS, "t_layer_us", "n_rows", "rms_log", "pinned",
    "structure_version", "data_hash", "fitted_at", "source", "runtime_version",
)  # fmt: skip


def lookup(
    hardware: str,
    runtime: Optional[str],
    catalog: Optional[Catalog] = None,
    fits: Optional[Sequence[dict[str, Any]]] = None,
) -> tuple[str, Optional[dict[str, Any]]]:
    """``_fits.lookup``, with rows given as ``fits`` refused when they were fitted against another
    structure version than the engine's (the shipped rows are checked by a test instead)."""
    from . import _fits
    from .snapshot import structure_version

    structure = None if fits is None else structure_version(catalog)
    return _fits.lookup(hardware, runtime, catalog, fits, structure)


@dataclasses.dataclass
class Decomposed:
    """One measured row, decomposed at efficiency 1."""

    row: dict[str, Any]
    compute: np.ndarray
    memory: np.ndarray  # at uniform routing (skew 0)
    expert: np.ndarray  # True where the operator is a grouped routed-expert kernel (eta_moe)
    quant: np.ndarray  # True where the operator is a GEMM on quantized weights
    fmt: np.ndarray  # a quantized GEMM's weight format ("" elsewhere)
    fixed: float  # communication time (s)
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
    from .runtimes import runtime_execution

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


def decompose(r: dict[str, Any], cat: Catalog) -> Decomposed:
    """Splits a priced row's prediction at efficiency 1 into its parts."""
    from .estimate import estimate

    if r["metric"] == "gemm_tflops":
        return _decompose_gemm(r, cat)
    from .models import Model

    model = Model.from_config(r["model"])
    kw, phase = _estimate_kwargs(r, model.max_model_len, cat)
    scale = 1.0
    if phase == "prefill" and has_flag(r, "layer-split") and kw["pp"] > 1:
        # llama.cpp pipelines the prompt's ubatches across a layer split: GPipe fill and drain of
        # m ubatch chunks over p stages, each stage ceil(L/p) of the L layers
        m = -(-int(kw["prompt"]) // int(kw["chunk"]))
        p = int(kw["pp"])
        scale = (m + p - 1) / m * (-(-model.num_layers // p)) / model.num_layers
    e = estimate(model, r["hardware"], catalog=cat, calibrated=False, **kw)
    df = e.breakdown
    if phase != "e2e":
        df = df.filter(df["phase"] == phase)
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
        row=r, compute=df["compute_s"].to_numpy() * scale, memory=df["memory_s"].to_numpy() * scale,
        expert=df["grouped"].to_numpy(), quant=df["quantized"].to_numpy(), fmt=df["format"].fill_null("").to_numpy(),
        fixed=float(df["comm_s"].sum()) * scale, steps=steps * scale,
        launches=float(df["launches"].sum()) * scale,
        work=work,
        kind="time_ms" if r["metric"] in ("ttft_ms", "tpot_ms") else "rate", **moe,
    )  # fmt: skip


def _expert_weights(model: Any, r: dict[str, Any], cat: Catalog, kw: dict[str, Any], phase: str, df: Any,
                    scale: float) -> dict[str, Any]:  # fmt: skip
    """Each expert GEMM's memory time as A + W D(T, s): the engine at two skews gives W."""
    from . import _core
    from .estimate import estimate

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


class Batch:
    """Many decomposed rows as padded arrays, predicted in the core (``_core.CalibRows``): one call
    prices every row under a whole population of candidate parameters, in parallel."""

    def __init__(self, rows: Sequence[Decomposed]) -> None:
        self.rows = list(rows)
        width = max(len(d.compute) for d in rows)
        n = len(rows)
        self.c = np.zeros((n, width))
        self.m = np.zeros((n, width))
        self.e = np.zeros((n, width), dtype=bool)
        self.q = np.zeros((n, width), dtype=bool)
        for i, d in enumerate(rows):
            self.c[i, : len(d.compute)] = d.compute
            self.m[i, : len(d.memory)] = d.memory
            self.e[i, : len(d.expert)] = d.expert
            self.q[i, : len(d.quant)] = d.quant
        self.has_experts = bool(self.e.any())
        self.has_quant = bool(self.q.any())
        # each quantized GEMM's weight format, as an index into `formats` (-1: none)
        self.formats = sorted({str(f) for d in rows for f in d.fmt if f})
        self.f = np.full((n, width), -1, dtype=int)
        for i, d in enumerate(rows):
            self.f[i, : len(d.fmt)] = [self.formats.index(str(x)) if x else -1 for x in d.fmt]
        # expert weight reads, whose distinct-expert count depends on the routing skew: memory per
        # distinct expert, tokens routed per step, distinct experts at skew 0; rows grouped by (E, k)
        self.mw, self.mt, self.md0 = np.zeros((n, width)), np.zeros((n, width)), np.zeros((n, width))
        self.moe: dict[tuple[int, int], np.ndarray] = {}
        for i, d in enumerate(rows):
            if d.moe_ek is None or d.moe_w is None or d.moe_t is None or d.moe_d0 is None:
                continue
            k = len(d.moe_w)
            self.mw[i, :k], self.mt[i, :k], self.md0[i, :k] = d.moe_w, d.moe_t, d.moe_d0
            self.moe.setdefault(d.moe_ek, np.zeros((n, width), dtype=bool))[i, :k] = d.moe_w > 0
        # the skew is identifiable where decode steps route more than one token
        decode = np.array([d.row["metric"] == "decode_tok_s" for d in rows])
        self.has_skew = bool(((self.mw > 0) & (self.mt > 1) & decode[:, None]).any())
        self.fixed = np.array([d.fixed for d in rows])
        self.launches = np.array([d.launches for d in rows])
        self.steps = np.array([d.steps for d in rows])
        self.work = np.array([d.work for d in rows])
        self.time_ms = np.array([d.kind == "time_ms" for d in rows])
        self.observed = np.array([float(d.row["value"]) for d in rows])
        self.lengths = np.array([len(d.compute) for d in rows], dtype=np.int64)

    @classmethod
    def ops(
        cls, compute: np.ndarray, memory: np.ndarray, quant: np.ndarray, fmt: str, observed_ms: np.ndarray
    ) -> Batch:
        """Measured kernels as time rows (ms), built as arrays: row i is the operators of columns
        ``compute[i]``, ``memory[i]`` (seconds at efficiency 1; n x width, or n for one operator
        each), ``quant`` marks the quantised GEMMs (of format ``fmt``), each operator one kernel.
        The same rows ``Decomposed`` would give, without one object per row (tables hold 10^5)."""
        b = cls.__new__(cls)
        c = np.asarray(compute, dtype=float)
        c = c.reshape(len(c), -1)
        n, width = c.shape
        b.rows = []
        b.c, b.m = c, np.asarray(memory, dtype=float).reshape(n, width)
        b.e = np.zeros((n, width), dtype=bool)
        b.q = np.asarray(quant, dtype=bool).reshape(n, width)
        b.has_experts, b.has_skew = False, False
        b.has_quant = bool(b.q.any())
        b.formats = [fmt] if b.has_quant else []
        b.f = np.where(b.q, 0, -1)
        b.mw, b.mt, b.md0 = np.zeros((n, width)), np.zeros((n, width)), np.zeros((n, width))
        b.moe = {}
        b.fixed, b.launches, b.steps = np.zeros(n), np.full(n, float(width)), np.zeros(n)
        b.work, b.time_ms = np.ones(n), np.ones(n, dtype=bool)
        b.observed = np.asarray(observed_ms, dtype=float)
        b.lengths = np.full(n, width, dtype=np.int64)
        return b

    @functools.cached_property
    def core(self) -> Any:
        """The rows in the core (built on first use: many Batches only answer ``free``)."""
        from . import _core

        groups = list(self.moe)
        g = np.full(self.c.shape, -1, dtype=np.int64)
        for i, ek in enumerate(groups):
            g[self.moe[ek]] = i
        c = np.ascontiguousarray
        return _core.CalibRows(
            self.lengths, c(self.c), c(self.m), c(self.e), c(self.q), c(self.f, dtype=np.int64), c(self.mw),
            c(self.mt), c(self.md0), g, [(int(e), int(k)) for e, k in groups], c(self.fixed), c(self.launches),
            c(self.steps), c(self.work), c(self.time_ms), c(self.observed, dtype=float), len(self.formats),
        )  # fmt: skip

    def free(self) -> list[bool]:
        """Which of PARAMS these rows can fix: eta_moe and overlap_moe only where they hold grouped
        expert kernels (else eta_mem and overlap); eta_compute_quant only where they hold quantized
        GEMMs (else eta_compute); the routing skew only where MoE decode steps route several tokens
        (else 0: uniform routing)."""
        return [True] * 4 + [self.has_experts, self.has_quant, self.has_skew, True, self.has_experts]

    def main_formats(self) -> list[str]:
        """Per row, the format that carries most of its quantized GEMM time ("" without any)."""
        out = []
        for i in range(len(self.rows)):
            share = [float(self.c[i][(self.f[i] == k) & self.q[i]].sum()) for k in range(len(self.formats))]
            out.append(self.formats[int(np.argmax(share))] if share and max(share) > 0 else "")
        return out

    def _candidates(self, p: np.ndarray, formats: Optional[Mapping[str, float]]) -> tuple[np.ndarray, np.ndarray]:
        """Candidates x PARAMS, and candidates x formats: each weight format's own efficiency
        where ``formats`` gives one, else the candidate's eta_compute_quant."""
        params = np.ascontiguousarray(np.asarray(p, dtype=float).reshape(-1, len(PARAMS)))
        fe = np.repeat(params[:, [CQ]], len(self.formats), axis=1)
        for j, k in enumerate(self.formats):
            if formats and k in formats:
                fe[:, j] = float(formats[k])
        return params, np.ascontiguousarray(fe)

    def predict(self, p: np.ndarray, formats: Optional[Mapping[str, float]] = None) -> np.ndarray:
        """Predicted rates (times in ms for time rows) under parameters `p`; a quantized GEMM
        takes its format's efficiency from `formats` where it has one, else eta_compute_quant."""
        out: np.ndarray = self.core.predict(*self._candidates(p, formats))[0]
        return out

    def speed_ratio(self, p: np.ndarray, formats: Optional[Mapping[str, float]] = None) -> np.ndarray:
        """Observed over predicted speed (for times: predicted over observed), so > 1 is faster."""
        out: np.ndarray = self.core.predict(*self._candidates(p, formats), ratio=True)[0]
        return out

    def rms(self, population: np.ndarray) -> np.ndarray:
        """The fit's objective for each candidate (rows of ``population``, PARAMS wide): the rms
        of log(observed / predicted speed), every format at the candidate's eta_compute_quant."""
        out: np.ndarray = self.core.rms(*self._candidates(population, None))
        return out


def priced_rows(cat: Catalog) -> list[dict[str, Any]]:
    metrics = (*MODEL_METRICS, "gemm_tflops")
    marks = ", ".join("?" for _ in metrics)
    q = f"SELECT * FROM benchmarks WHERE not_priced IS NULL AND metric IN ({marks}) ORDER BY id"
    rows: list[dict[str, Any]] = cat.sql(q, list(metrics)).to_dicts()
    return rows


def decompose_all(cat: Catalog) -> tuple[list[Decomposed], list[dict[str, Any]]]:
    """Every priced row decomposed; rows the engine refuses come back with the reason."""
    out, refused = [], []
    for r in priced_rows(cat):
        try:
            out.append(decompose(r, cat))
        except (PlanError, CatalogError, ValueError) as e:
            refused.append({"id": r["id"], "reason": str(e).splitlines()[0]})
    return out, refused


def _bounds(cat: Catalog) -> list[tuple[float, float]]:
    lo = cat.constant("fit_eta_min")
    return [(lo, 1.0), (lo, 1.0), (0.0, cat.constant("fit_launch_us_max")), (0.0, cat.constant("fit_step_us_max")),
            (lo, 1.0), (lo, 1.0), (0.0, cat.constant("fit_routing_skew_max")), (0.0, 1.0), (0.0, 1.0)]  # fmt: skip


def fit(rows: Sequence[Decomposed], cat: Catalog) -> tuple[np.ndarray, dict[str, float], float]:
    """Differential evolution (seed 0) on the rms of log(predicted / observed), every weight format
    at one quantized-GEMM efficiency, polished by least_squares. Where two or more formats each
    carry most of the quantized GEMM time of enough rows, a second least_squares from there gives
    each its own efficiency and re-polishes the other parameters with them; eta_compute_quant keeps
    the all-formats value, which prices formats without their own. Returns the parameters, the
    per-format efficiencies and the rms."""
    from scipy.optimize import differential_evolution, least_squares  # type: ignore[import-untyped]

    batch = Batch(rows)
    free = batch.free()
    if len(rows) < sum(free):
        raise PlanError(f"calibration: {len(rows)} rows cannot fix {sum(free)} parameters")
    bounds = [b for b, f in zip(_bounds(cat), free) if f]

    at = [i for i, f in enumerate(free) if f]

    def full(p: np.ndarray) -> np.ndarray:
        # the free parameters (a vector, or candidates x free) as PARAMS; a tied one takes its base's
        p = np.asarray(p, dtype=float)
        v = np.zeros((*p.shape[:-1], len(PARAMS)))
        v[..., at] = p
        for tied, base in ((4, 0), (5, 1), (8, 7)):  # eta_moe, eta_compute_quant, overlap_moe
            if not free[tied]:
                v[..., tied] = v[..., base]
        return v  # a routing skew that is not free stays 0: uniform routing

    def residuals(p: np.ndarray) -> np.ndarray:
        return np.asarray(-np.log(batch.speed_ratio(full(p))))

    def rms(p: np.ndarray) -> float:
        return float(np.sqrt(np.mean(residuals(p) ** 2)))

    def population(x: np.ndarray) -> np.ndarray:
        # scipy hands the population as free x candidates; the core prices it in one call
        return batch.rms(full(x.T))

    # the whole population of a generation per call (deferred updating: each generation is
    # priced at once, in parallel in the core)
    de = differential_evolution(population, bounds, seed=0, tol=1e-10, maxiter=300, polish=False,
                                updating="deferred", vectorized=True)  # fmt: skip
    ls = least_squares(residuals, de.x, bounds=([b[0] for b in bounds], [b[1] for b in bounds]))
    best = ls.x if rms(ls.x) <= rms(de.x) else de.x
    p = full(best)
    own = _own_formats(batch, cat)
    if not own:
        return p, {}, rms(best)
    # the second stage: the free parameters but eta_compute_quant (held at best[slot]), then one
    # efficiency per format; quantized rows make eta_compute_quant free, so it has a slot in best
    slot = sum(free[:CQ])
    n = len(best) - 1

    def split(x: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
        return full(np.insert(x[:n], slot, best[slot])), dict(zip(own, x[n:]))

    def residuals2(x: np.ndarray) -> np.ndarray:
        return np.asarray(-np.log(batch.speed_ratio(*split(x))))

    b2 = [*bounds[:slot], *bounds[slot + 1 :]] + [_bounds(cat)[CQ]] * len(own)
    x0 = np.concatenate([np.delete(best, slot), np.full(len(own), p[CQ])])
    ls2 = least_squares(residuals2, x0, bounds=([b[0] for b in b2], [b[1] for b in b2]))
    q, formats = split(ls2.x)
    formats = {k: float(f"{v:.6g}") for k, v in formats.items()}
    return q, formats, float(np.sqrt(np.mean(np.log(batch.speed_ratio(q, formats)) ** 2)))


def fit_all(
    groups: Sequence[Sequence[Decomposed]], cat: Catalog
) -> list[Optional[tuple[np.ndarray, dict[str, float], float]]]:
    """``fit`` of each group (None where it has fewer rows than free parameters), in order. The
    fits run on threads: each one's Python bookkeeping overlaps another's objective, which the
    core computes with the GIL released. Every fit is deterministic on its own, so the results do
    not depend on the threads."""
    from concurrent.futures import ThreadPoolExecutor

    def one(g: Sequence[Decomposed]) -> Optional[tuple[np.ndarray, dict[str, float], float]]:
        return fit(g, cat) if g and len(g) >= sum(Batch(g).free()) else None

    with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
        return list(pool.map(one, groups))


def _own_formats(batch: Batch, cat: Catalog) -> list[str]:
    """The weight formats that get their own quantized-GEMM efficiency: llama.cpp's MMQ kernels
    unpack each ggml type differently before the int8 dot products, so the dequantisation cost is
    the format's, measured from the rows where that format carries most of the quantized GEMM time."""
    main = batch.main_formats()
    need = int(cat.constant("fit_format_min_rows"))
    devices: dict[str, set[str]] = {}
    for d, k in zip(batch.rows, main):
        devices.setdefault(k, set()).add(str(d.row["hardware"]))
    # a profile speaks for devices it never saw: there a format's own efficiency must rest on
    # several devices, or one device's kernel generation would stand for the whole runtime
    spread = int(cat.constant("fit_format_min_devices")) if len(set().union(*devices.values())) > 1 else 1
    own = [k for k in batch.formats if main.count(k) >= need and len(devices.get(k, ())) >= spread]
    return own if len(own) >= 2 else []  # one format: eta_compute_quant is already its efficiency


def _digest(rows: Iterable[tuple[Any, Any]]) -> str:
    """A short fingerprint of measured rows: their ids and values, in order."""
    h = hashlib.sha256()
    for rid, value in rows:
        h.update(f"{rid} {value!r}".encode())
    return h.hexdigest()[:16]


def data_hash(rows: Sequence[Decomposed]) -> str:
    return _digest((d.row["id"], d.row["value"]) for d in rows)


def _memtech(cat: Catalog, hardware: str) -> str:
    return memory_technology(cat.get(hardware).memory_type)


def _profile_rows(rows: Sequence[Decomposed], cat: Catalog, memtech: str, exclude: Optional[str] = None
                  ) -> list[Decomposed]:  # fmt: skip
    """The rows a profile for `memtech` is fitted on (spec 50): the runtime's other devices with
    that memory technology, else (none has it, or too few rows to fit) every other device."""
    others = [d for d in rows if d.row["hardware"] != exclude]
    same = [d for d in others if _memtech(cat, d.row["hardware"]) == memtech]
    return same if same and len(same) >= sum(Batch(same).free()) else others


def calibrate(catalog: Optional[Catalog] = None, min_device_rows: int = 8) -> list[dict[str, Any]]:
    """Fits a profile per runtime (over all its devices, and over each memory technology with two
    or more devices) and a row per (device, runtime) with enough rows of its own."""
    from .runtimes import KERNEL_RUNTIMES
    from .snapshot import structure_version

    cat = catalog or default_catalog()
    rows, _ = decompose_all(cat)
    # the production runtimes are fitted from their kernels and serving runs (kernel_fit)
    rows = [d for d in rows if d.row["metric"] in MODEL_METRICS and d.row["runtime"] not in KERNEL_RUNTIMES]
    sv = structure_version(cat)
    out = []
    groups: dict[tuple[str, str, str], list[Decomposed]] = {}
    for d in rows:
        rt, hw = d.row["runtime"], d.row["hardware"]
        mt = _memtech(cat, hw)
        groups.setdefault(("*", rt, "*"), []).append(d)
        groups.setdefault(("*", rt, mt), []).append(d)
        groups.setdefault((hw, rt, mt), []).append(d)
    chosen = []
    for (hw, runtime, mt), g in sorted(groups.items()):
        if hw != "*" and (len(g) < min_device_rows or len({x.row["metric"] for x in g}) < 2):
            continue
        b = Batch(g)
        if len(g) >= sum(b.free()):
            chosen.append((hw, runtime, mt, g, b))
    for (hw, runtime, mt, g, b), fitted in zip(chosen, fit_all([c[3] for c in chosen], cat)):
        assert fitted is not None  # every chosen group has rows enough to fit
        p, formats, err = fitted
        row = {
            "hardware": hw, "runtime": runtime, "memory": mt, "precision": "*", "phase": "*",
            **{k: float(f"{v:.6g}") for k, v in zip(PARAMS, p)}, "t_layer_us": 0.0, "n_rows": len(g),
            "rms_log": float(f"{err:.6g}"), "structure_version": sv, "data_hash": data_hash(g),
            "fitted_at": __version__,
            "pinned": _pinned(p, cat, moe=b.has_experts, quant=b.has_quant, skew=b.has_skew),
            "source": f"ridgeline calibrate: differential_evolution(seed=0) + least_squares on {len(g)} rows "
            "of data/benchmarks",
        }  # fmt: skip
        out.append(row)
        main = b.main_formats()
        cq_range = _bounds(cat)[PARAMS.index("eta_compute_quant")]
        for k, eta in formats.items():
            # the format's own quantized-GEMM efficiency; the other parameters are the group's
            out.append({
                **row, "precision": k, "eta_compute_quant": eta, "n_rows": main.count(k),
                "pinned": "eta_compute_quant" if _at_bound(eta, *cq_range) else "",
                "source": f"ridgeline calibrate: least_squares of {k}'s quantized-GEMM efficiency on the "
                f"{main.count(k)} rows where {k} carries most of the quantized GEMM time, fitted jointly with "
                "the group's other parameters (second stage)",
            })  # fmt: skip
    return out


def _pinned(p: np.ndarray, cat: Catalog, moe: bool, quant: bool, skew: bool) -> str:
    """Parameters a fit left at a bound of its search range (a sign of missing structure).
    A routing skew of 0 is uniform routing and an overlap of 1 the roofline: answers, not bounds."""
    out = []
    for k, v, (lo, hi) in zip(PARAMS, p, _bounds(cat)):
        if (k in ("eta_moe", "overlap_moe") and not moe) or (k == "eta_compute_quant" and not quant):
            continue
        if k == "routing_skew" and (not skew or v < hi / 2):
            continue
        if k.startswith("overlap"):  # full overlap is the roofline, an answer; kernels in series the bound
            if abs(v - lo) <= 1e-6:
                out.append(k)
            continue
        if _at_bound(v, lo, hi):
            out.append(k)
    return " ".join(out)


def _at_bound(v: float, lo: float, hi: float) -> bool:
    """Whether a fitted value sits on either end of its search range."""
    tol = 1e-6 * max(1.0, abs(hi))
    return abs(v - lo) <= tol or abs(v - hi) <= tol


def to_csv(fits: Sequence[dict[str, Any]]) -> str:
    return csv_text(fits, FIT_COLUMNS)


def params_of(fit_row: Optional[dict[str, Any]]) -> np.ndarray:
    """A calibration row's PARAMS as an array (the efficiency-1 bound without one)."""
    return np.array(fit_params(fit_row))


def predict_shipped(rows: Sequence[Decomposed], catalog: Optional[Catalog] = None,
                    fits: Optional[Sequence[dict[str, Any]]] = None) -> list[dict[str, Any]]:  # fmt: skip
    """Each row predicted with the calibration an estimate would use (its device's row or its runtime's profile)."""
    out = []
    for d in rows:
        r = d.row
        label, f = lookup(r["hardware"], r["runtime"], catalog, fits)
        pred = float(Batch([d]).predict(params_of(f), formats_of(f))[0])
        out.append({"id": r["id"], "hardware": r["hardware"], "runtime": r["runtime"], "metric": r["metric"],
                    "observed": float(r["value"]), "predicted": pred, "unit": r["unit"],
                    "calibration": label})  # fmt: skip
    return out


PHASE_OF = {"decode_tok_s": "decode", "prefill_tok_s": "prefill", "ttft_ms": "prefill", "throughput_tok_s": "e2e",
            "tpot_ms": "decode"}  # fmt: skip


# Spec 50: a row may not beat the efficiency-1 prediction by more than 5%.
BOUND_TOLERANCE = 1.05


def _bound_explanation(r: dict[str, Any]) -> Optional[str]:
    """Why a row may beat the efficiency-1 prediction, where the structure knows a reason."""
    if _is_moe(r["model"]) and PHASE_OF[r["metric"]] == "decode" and int(r["batch"] or 1) > 1:
        return (
            "MoE decode at batch > 1: the row's router is more skewed than the fitted routing skew, "
            "so it reads fewer distinct experts than the bound assumes"
        )
    return None


def validation(catalog: Optional[Catalog] = None, fits: Optional[Sequence[dict[str, Any]]] = None) -> dict[str, Any]:
    """In-sample (with ``fits``, default the shipped calibration) and leave-one-device-out
    predictions of every priced model row."""
    cat = catalog or default_catalog()
    rows, refused = decompose_all(cat)
    rows = [d for d in rows if d.row["metric"] in MODEL_METRICS]
    by_rt: dict[str, list[Decomposed]] = {}
    for d in rows:
        by_rt.setdefault(d.row["runtime"], []).append(d)
    fits = shipped_fits() if fits is None else fits
    records = []
    # each device held out in turn: its runtime's profile refitted without it (the production
    # runtimes' profiles come from kernels, not these rows: in sample only)
    from .runtimes import KERNEL_RUNTIMES

    held = [(rt, dev, rs) for rt, rs in sorted(by_rt.items()) for dev in sorted({d.row["hardware"] for d in rs})]
    refit = [h for h in held if h[0] not in KERNEL_RUNTIMES]
    rests = [_profile_rows(rs, cat, _memtech(cat, dev), exclude=dev) for _, dev, rs in refit]
    outs = dict(zip([(rt, dev) for rt, dev, _ in refit], fit_all(rests, cat)))
    for rt, dev, rs in held:
        out = outs.get((rt, dev))
        own = [d for d in rs if d.row["hardware"] == dev]
        label, f = lookup(dev, rt, cat, fits)
        p_in = params_of(f)
        b = Batch(own)
        r_in = b.speed_ratio(p_in, formats_of(f))
        r_out = b.speed_ratio(out[0], out[1]) if out is not None else np.full(len(own), np.nan)
        # the bound: efficiency 1 under the routing the calibration found (uniform without MoE rows)
        at_bound = UNCALIBRATED.copy()
        at_bound[SKEW] = p_in[SKEW]
        bound = b.speed_ratio(at_bound)
        for i, d in enumerate(own):
            r = d.row
            over = float(bound[i]) > BOUND_TOLERANCE
            records.append({
                "id": r["id"], "hardware": dev, "runtime": rt, "model": r["model"], "metric": r["metric"],
                "phase": PHASE_OF[r["metric"]], "moe": "moe" if _is_moe(r["model"]) else "dense",
                "context": _context_bucket(r), "observed": r["value"], "unit": r["unit"],
                "in_sample": float(r_in[i]), "lodo": float(r_out[i]), "vs_bound": float(bound[i]),
                "calibration": label, "beats_bound": over,
                "explanation": _bound_explanation(r) if over else None,
                "batch": int(r["batch"] or 1), "flags": r["flags"],
            })  # fmt: skip
    return {"rows": records, "refused": refused}


def holdout(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """How far devices a runtime's fit never saw land from its predictions: per (runtime, phase)
    with 5+ rows (spec 50's groups), the 10th, 50th and 90th percentiles of the leave-one-device-out
    observed/predicted speed. An estimate divides its times by them to give the range 80% of
    held-out rows fell in."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        if math.isfinite(r["lodo"]):
            groups.setdefault((str(r["runtime"]), str(r["phase"])), []).append(r)
    out = []
    for (rt, phase), g in sorted(groups.items()):
        if len(g) < GROUP_MIN_ROWS:
            continue
        q10, q50, q90 = np.quantile(np.array([r["lodo"] for r in g]), [0.1, 0.5, 0.9])
        devices = len({r["hardware"] for r in g})
        out.append({
            "runtime": rt, "phase": phase, "n_rows": len(g), "n_devices": devices,
            "q10": float(f"{q10:.6g}"), "q50": float(f"{q50:.6g}"), "q90": float(f"{q90:.6g}"),
            "data_hash": _digest((r["id"], r["observed"]) for r in g),
            "source": f"ridgeline calibrate: leave-one-device-out predictions of {len(g)} {phase} rows on {devices} "
                      f"devices, each device's rows predicted by the {rt} profile refitted without them",
        })  # fmt: skip
    return out


def holdout_csv(rows: Sequence[dict[str, Any]]) -> str:
    return csv_text(rows, HOLDOUT_COLUMNS)


def group_summaries(records: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """In-sample and leave-one-device-out summaries per phase, and per runtime, device, dense/MoE
    and context bucket within each phase (spec 50's groups)."""
    groups: dict[str, dict[str, Any]] = {}
    for key in ("phase", "runtime", "hardware", "moe", "context"):
        for value in sorted({str(r[key]) for r in records}):
            for phase in ("decode", "prefill", "e2e"):
                rs = [r for r in records if str(r[key]) == value and r["phase"] == phase]
                if rs and (key != "phase" or value == phase):
                    groups[f"{key}={value} {phase}" if key != "phase" else f"phase={phase}"] = {
                        "in_sample": summarise(rs, "in_sample"), "lodo": summarise(rs, "lodo")}  # fmt: skip
    return groups


# Spec 50's acceptance envelope.
# phase: (median low, median high, share within 1.5x, share within 2x), leave-one-device-out
ENVELOPE: dict[str, tuple[float, float, float, float]] = {
    "decode": (0.9, 1.1, 0.90, 0.97),
    "prefill": (0.9, 1.1, 0.80, 0.92),
}
GROUP_MEDIAN = (0.8, 1.25)
GROUP_MIN_ROWS = 5
KEYSTONE_FILE = "llamacpp_dgx_spark_official"
KEYSTONE_DEPTH_SWEEP = 1.10  # llama-bench decode across the KV-depth sweep, in-sample
KEYSTONE_BATCHED = 1.15  # llama-batched-bench throughput, in-sample


def envelope(records: Sequence[dict[str, Any]], groups: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each line of spec 50's acceptance envelope: what it asks, the figure, and whether it holds."""
    out: list[dict[str, Any]] = []

    def line(what: str, figure: str, ok: bool) -> None:
        out.append({"check": what, "figure": figure, "ok": bool(ok)})

    over = [r for r in records if r["beats_bound"]]
    line("no row beats the efficiency-1 prediction by > 5%", f"{len(over)} rows", not over)
    for phase, (lo, hi, w15, w2) in ENVELOPE.items():
        s = summarise([r for r in records if r["phase"] == phase], "lodo")
        line(f"{phase} leave-one-device-out: median {lo}-{hi}, >= {w15:.0%} within 1.5x, >= {w2:.0%} within 2x",
             f"median {s['median']:.3f}, {s['within_1_5x']:.1%} within 1.5x, {s['within_2x']:.1%} within 2x",
             lo <= s["median"] <= hi and s["within_1_5x"] >= w15 and s["within_2x"] >= w2)  # fmt: skip
    lo, hi = GROUP_MEDIAN
    for how, said in (("in_sample", "in-sample"), ("lodo", "leave-one-device-out")):
        bad = [f"{name} {g[how]['median']:.3f}" for name, g in groups.items()
               if g[how].get("rows", 0) >= GROUP_MIN_ROWS and not lo <= g[how]["median"] <= hi]  # fmt: skip
        line(f"every group of {GROUP_MIN_ROWS}+ rows keeps its median within {lo}-{hi} ({said})",
             "; ".join(bad) or "all groups", not bad)  # fmt: skip
    keystone: tuple[tuple[str, float, str, bool], ...] = (
        ("llama-bench decode across the KV-depth sweep within 10%", KEYSTONE_DEPTH_SWEEP, "decode_tok_s", False),
        ("llama-batched-bench decode throughput within 15%", KEYSTONE_BATCHED, "decode_tok_s", True),
        ("llama-batched-bench prefill throughput within 15%", KEYSTONE_BATCHED, "prefill_tok_s", True),
    )
    for desc, tol, metric, batched in keystone:
        what = f"GB10 keystone: {desc} (in-sample), every model"
        rs = [r for r in records if r["id"].startswith(KEYSTONE_FILE + ":") and r["metric"] == metric
              and has_flag(r, "batched-bench") == batched]  # fmt: skip
        per_model = {}
        for m in sorted({r["model"] for r in rs}):
            ratios = [r["in_sample"] for r in rs if r["model"] == m]
            per_model[m] = sum(1 / tol <= x <= tol for x in ratios) / len(ratios)
        figure = ", ".join(f"{m.split('/')[-1]} {v:.0%}" for m, v in per_model.items())
        line(what, figure, bool(per_model) and all(v == 1.0 for v in per_model.values()))
    return out


def _is_moe(model: str) -> bool:
    from .models import Model

    return bool(Model.from_config(model).is_moe)


def _context_bucket(r: dict[str, Any]) -> str:
    ctx = int(r["depth"] or 0) + int(r["prompt_tokens"] or 0) + int(r["output_tokens"] or 0)
    return "<=2k" if ctx <= 2048 else ("2k-8k" if ctx <= 8192 else ">8k")


#: The band the issue's figures count in: observed and predicted within 1.5x of each other.
WITHIN = 1.5


def within_share(ratio: Any) -> float:
    """The share of observed/predicted ratios inside WITHIN either way (strictly)."""
    r = np.asarray(ratio, dtype=float)
    return float(np.mean((r < WITHIN) & (r > 1 / WITHIN)))


def summarise(records: Sequence[dict[str, Any]], key: str) -> dict[str, float]:
    """median observed/predicted, share within 1.5x and 2x, rms log, of the ratios under `key`."""
    r = np.array([x[key] for x in records if not math.isnan(x[key])])
    if len(r) == 0:
        return {"rows": 0}
    lr = np.log(r)
    return {
        "rows": len(r),
        "median": float(np.median(r)),
        "within_1_5x": float(np.mean(np.abs(lr) <= math.log(1.5))),
        "within_2x": float(np.mean(np.abs(lr) <= math.log(2.0))),
        "rms_log": float(np.sqrt(np.mean(lr**2))),
        "beats_bound_5pct": sum(bool(x["beats_bound"]) for x in records),
    }


def plot(records: Sequence[dict[str, Any]], directory: str) -> list[str]:
    """A log-log scatter of observed against predicted speed and a residual plot per phase
    (needs the `plot` extra: matplotlib). Returns the PNG paths."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlanError("plots need matplotlib: pip install 'ridgeline[plot]'") from None
    from pathlib import Path

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    fig, ax = plt.subplots(figsize=(6, 6))
    lo, hi = math.inf, 0.0
    for phase, marker in (("decode", "o"), ("prefill", "s"), ("e2e", "^")):
        rs = [r for r in records if r["phase"] == phase and r["metric"] != "ttft_ms" and not math.isnan(r["lodo"])]
        if rs:
            obs = [float(r["observed"]) for r in rs]
            pred = [float(r["observed"]) / float(r["lodo"]) for r in rs]
            lo, hi = min(lo, *obs, *pred), max(hi, *obs, *pred)
            ax.scatter(pred, obs, s=10, marker=marker, label=f"{phase} ({len(rs)})", alpha=0.6)
    ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8)
    ax.plot([lo, hi], [lo * 1.5, hi * 1.5], color="grey", lw=0.6, ls="--")
    ax.plot([lo, hi], [lo / 1.5, hi / 1.5], color="grey", lw=0.6, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("predicted tokens/s (leave-one-device-out)")
    ax.set_ylabel("observed tokens/s")
    ax.legend()
    fig.tight_layout()
    p1 = out / "validation_scatter.png"
    fig.savefig(p1, dpi=120)
    plt.close(fig)
    paths.append(str(p1))
    fig, ax = plt.subplots(figsize=(8, 4))
    devices = sorted({r["hardware"] for r in records})
    for i, dev in enumerate(devices):
        ratios = [float(r["lodo"]) for r in records if r["hardware"] == dev and not math.isnan(r["lodo"])]
        ax.scatter([i] * len(ratios), ratios, s=8, alpha=0.6)
    ax.set_yscale("log")
    for y in (1 / 1.5, 1.0, 1.5):
        ax.axhline(y, color="grey", lw=0.8, ls="-" if y == 1.0 else "--")
    ax.set_xticks(range(len(devices)))
    ax.set_xticklabels(devices, rotation=70, fontsize=7)
    ax.set_ylabel("observed / predicted (LODO)")
    fig.tight_layout()
    p2 = out / "validation_residuals.png"
    fig.savefig(p2, dpi=120)
    plt.close(fig)
    paths.append(str(p2))
    return paths
