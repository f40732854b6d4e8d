"""Spec 50's acceptance: how far held-out devices land (``holdout``: the ranges an estimate
prints), the groups' summaries and the acceptance envelope, line by line (``envelope``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._io import csv_text
from .decompose import _digest, has_flag

# Spec 50: a row may not beat the efficiency-1 prediction by more than 5%.
BOUND_TOLERANCE = 1.05

HOLDOUT_COLUMNS = ("runtime", "phase", "n_rows", "n_devices", "q10", "q50", "q90", "data_hash", "source")


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
