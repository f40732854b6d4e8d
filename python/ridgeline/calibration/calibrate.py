"""Calibration (spec 50): the fit of a few efficiencies per runtime (and per device where it
has rows of its own) to the measured rows. The rows are decomposed by ``decompose``; the
fitted rows are looked up by ``fitted``, validated by ``validate`` and held to the acceptance
envelope by ``acceptance``.

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

import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np

from .._io import csv_text
from .._version import __version__
from ..catalog.store import Catalog, default_catalog
from ..engine.fits import BOUND_PARAMS, PARAMS, fit_params, memory_technology
from ..errors import PlanError
from .decompose import MODEL_METRICS, Decomposed, _digest, decompose_all

UNCALIBRATED = np.array(BOUND_PARAMS)

SKEW = PARAMS.index("routing_skew")

CQ = PARAMS.index("eta_compute_quant")

FIT_COLUMNS = (
    "hardware", "runtime", "memory", "precision", "phase", *PARAMS, "t_layer_us", "n_rows", "rms_log", "pinned",
    "structure_version", "data_hash", "fitted_at", "source", "runtime_version",
)  # fmt: skip


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
        from .. import _core

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
    from ..engine.runtimes import KERNEL_RUNTIMES
    from ..engine.structure import structure_version

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
