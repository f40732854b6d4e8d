"""The memory-bound power share ``rho`` (spec 60) fitted to measured GPU power during serving.

A device draws ``P = P_idle + u (TDP - P_idle)`` over a phase, ``u = max(u_c, rho u_m)`` from the
engine's own compute- and memory-roof times (rust/src/power.rs). Each measured run of
data/benchmarks/power_mlenergy.csv (ML.ENERGY v3.0: vLLM serving on H100 and B200, the GPUs'
steady-state power summed) is priced as the static plan of its mean running batch, prompt and
output under vLLM's calibration; its predicted power is the request round's average over prefill
and decode, and ``rho`` minimises the rms log error over all runs (one parameter, bounded to
[0, 1]: a memory-bound phase cannot draw more than the dynamic range). ``validation`` also holds
each device out: ``rho`` fitted on the other's runs predicts it.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np

from .. import _core, _data
from ..catalog.store import Catalog, default_catalog
from ..errors import PlanError
from .decompose import _digest

POWER_FILE = "data/benchmarks/power_mlenergy.csv"
CONSTANT = "power_memory_rho"
#: How close to a bound of [0, 1] a fitted rho counts as pinned there.
_PINNED = 1e-3


def rows() -> list[dict[str, str]]:
    """The measured runs, as shipped."""
    return list(csv.DictReader(io.StringIO(_data.read_text(POWER_FILE))))


def priced(runs: Sequence[Mapping[str, str]], catalog: Optional[Catalog] = None) -> dict[str, Any]:
    """Each run as the static plan of its mean running batch, prompt and output (vLLM, calibrated):
    per phase its compute-roof, memory-roof and total times, with its GPUs' idle and TDP power
    and the measured power. A run the engine refuses, or on a device without sourced powers,
    is left out and listed in ``refused``."""
    from ..engine.estimate import estimate

    cat = catalog or default_catalog()
    cols: dict[str, list[Any]] = {k: [] for k in ("pre_c", "pre_m", "pre_t", "dec_c", "dec_m", "dec_t", "idle",
                                                  "tdp", "gpus", "observed", "hardware", "batch", "id")}  # fmt: skip
    refused = []
    for i, r in enumerate(runs):
        dev = cat.get(r["hardware"])
        if dev.idle_w is None or dev.tdp_w is None:
            refused.append({"row": i, "reason": f"{dev.name} has no sourced idle_w or tdp_w"})
            continue
        kw: dict[str, Any] = {"tp": int(r["tp"]), "batch": max(1, round(float(r["avg_batch"]))),
                              "prompt": int(r["prompt_tokens"]), "output": max(2, round(float(r["avg_output_tokens"]))),
                              "runtime": "vllm", "allow_no_fit": True, "catalog": cat}  # fmt: skip
        if r["weight_precision"].lower() == "fp8":
            kw["weight_dtype"] = "fp8"
        try:
            e = estimate(r["config"], r["hardware"], **kw)
        except PlanError as err:
            refused.append({"row": i, "reason": str(err).splitlines()[0]})
            continue
        for key, phase in (("pre", e.prefill), ("dec", e.decode)):
            cols[f"{key}_c"].append(phase["compute_s"])
            cols[f"{key}_m"].append(phase["memory_s"])
            cols[f"{key}_t"].append(phase["time_s"])
        cols["idle"].append(dev.idle_w)
        cols["tdp"].append(dev.tdp_w)
        cols["gpus"].append(int(r["gpus"]))
        cols["observed"].append(float(r["avg_power_w"]))
        cols["hardware"].append(dev.name)
        cols["batch"].append(int(r["max_num_seqs"]))
        cols["id"].append(f"{r['source'].rsplit('/', 1)[-1]}:{r['hardware']}:tp{r['tp']}:{r['max_num_seqs']}")
    out: dict[str, Any] = {k: np.array(v) if k not in ("hardware", "id") else v for k, v in cols.items()}
    out["refused"] = refused
    return out


def predict(p: Mapping[str, Any], rho: float) -> Any:
    """Each run's predicted power, summed over its GPUs: the request round's average of the
    prefill's and the decode's (``_core.phase_power``, the engine's power model)."""
    f = np.asarray
    pre = _core.phase_power(f(p["pre_c"], float), f(p["pre_m"], float), f(p["pre_t"], float), f(p["idle"], float),
                            f(p["tdp"], float), rho)  # fmt: skip
    dec = _core.phase_power(f(p["dec_c"], float), f(p["dec_m"], float), f(p["dec_t"], float), f(p["idle"], float),
                            f(p["tdp"], float), rho)  # fmt: skip
    t_pre, t_dec = f(p["pre_t"], float), f(p["dec_t"], float)
    return f(p["gpus"], float) * (pre * t_pre + dec * t_dec) / (t_pre + t_dec)


def _rms(p: Mapping[str, Any], rho: float, mask: Any) -> float:
    return float(np.sqrt(np.mean(np.log(predict(p, rho)[mask] / np.asarray(p["observed"])[mask]) ** 2)))


def fit(p: Mapping[str, Any], mask: Any = None) -> tuple[float, float]:
    """``rho`` minimising the rms log error of the runs under ``mask`` (all by default), bounded
    to [0, 1]; returns it (6 significant digits) and the rms."""
    from scipy.optimize import minimize_scalar  # type: ignore[import-untyped]

    m = np.ones(len(p["observed"]), bool) if mask is None else mask
    if not m.any():
        raise PlanError("power fit: no measured run to fit")
    r = minimize_scalar(lambda x: _rms(p, float(x), m), bounds=(0.0, 1.0), method="bounded",
                        options={"xatol": 1e-6})  # fmt: skip
    # the bounded search stops short of a bound by its tolerance: a bound it approaches is the answer
    rho = min((float(r.x), 0.0, 1.0), key=lambda x: _rms(p, x, m))
    rho = float(f"{rho:.6g}")
    return rho, _rms(p, rho, m)


def validation(p: Mapping[str, Any]) -> dict[str, Any]:
    """The fit in sample and with each device held out (``rho`` fitted on the other devices'
    runs), as median absolute error, share within 10% and median observed/predicted, overall,
    per device and per batch (max_num_seqs)."""
    obs = np.asarray(p["observed"], float)
    rho, rms = fit(p)
    pred_in = predict(p, rho)
    hw = np.array(p["hardware"])
    pred_out = np.full(len(obs), np.nan)
    held = {}
    for d in sorted(set(p["hardware"])):
        m = hw == d
        r_other, _ = fit(p, ~m)
        pred_out[m] = predict(p, r_other)[m]
        held[d] = r_other

    def summary(pred: Any, mask: Any) -> dict[str, float]:
        ratio = obs[mask] / pred[mask]
        return {"runs": int(mask.sum()), "medape": float(np.median(np.abs(1 / ratio - 1))),
                "within_10pct": float(np.mean(np.abs(1 / ratio - 1) <= 0.10)),
                "median_obs_over_pred": float(np.median(ratio))}  # fmt: skip

    every = np.ones(len(obs), bool)
    groups = {"all": every, **{f"hardware={d}": hw == d for d in sorted(set(hw))},
              **{f"max_num_seqs={b}": np.asarray(p["batch"]) == b for b in sorted(set(p["batch"]))}}  # fmt: skip
    return {
        "rho": rho, "rms_log": rms, "pinned": _pinned(rho), "runs": len(obs), "refused": p["refused"],
        "held_out_rho": held,
        "in_sample": {k: summary(pred_in, m) for k, m in groups.items()},
        "held_out": {k: summary(pred_out, m) for k, m in groups.items() if not k.startswith("max_num_seqs")},
    }  # fmt: skip


def _pinned(rho: float) -> Optional[str]:
    if rho <= _PINNED:
        return "lower"
    if rho >= 1 - _PINNED:
        return "upper"
    return None


def constant_row(p: Mapping[str, Any], rho: float, rms: float) -> dict[str, str]:
    """The constants row ``ridgeline calibrate --power`` writes, its source saying how it was fitted."""
    pinned = _pinned(rho)
    digest = _digest(zip(p["id"], p["observed"]))
    return {
        "name": CONSTANT,
        "value": f"{rho:.6g}",
        "unit": "fraction",
        "source": (f"ridgeline calibrate --power: bounded least squares of the rms log error of {len(p['observed'])} "
                   f"measured vLLM serving runs ({POWER_FILE}, ML.ENERGY v3.0, H100 SXM and B200, data {digest}): "
                   f"rms log {rms:.3f}" + (f"; at the {pinned} bound of [0, 1]" if pinned else "")),
        "note": ("share of the dynamic power range (TDP - idle) a memory-bound phase draws at full memory "
                 "occupancy (spec 60: u = max(u_c, rho u_m))"),
    }  # fmt: skip


def constants_text(row: Mapping[str, str], current: str) -> str:
    """data/constants.csv with ``row`` in place of the constant's (appended when new)."""
    lines = current.rstrip("\n").split("\n")
    s = io.StringIO()
    csv.writer(s, lineterminator="").writerow([row[k] for k in ("name", "value", "unit", "source", "note")])
    new = s.getvalue()
    kept = [ln for ln in lines if not ln.startswith(f"{CONSTANT},")]
    at = next((i for i, ln in enumerate(lines) if ln.startswith(f"{CONSTANT},")), len(lines))
    return "\n".join([*kept[:at], new, *kept[at:]]) + "\n"


def report(v: Mapping[str, Any]) -> str:
    """``ridgeline validate --power``: the fit and its errors, in sample and held out."""
    pin = f", at the {v['pinned']} bound of [0, 1]" if v["pinned"] else ""
    lines = [f"power: rho {v['rho']:.4g}{pin}, rms log {v['rms_log']:.3f} over {v['runs']} measured runs "
             f"({len(v['refused'])} refused); {POWER_FILE}"]  # fmt: skip
    lines.append(f"  {'group':<22}{'runs':>6}  {'in-sample MedAPE':>17} {'<10%':>6} {'obs/pred':>9}"
                 f"  {'held-out MedAPE':>16} {'<10%':>6} {'obs/pred':>9}")  # fmt: skip
    for k, s in v["in_sample"].items():
        h = v["held_out"].get(k)
        tail = f"  {h['medape']:>16.1%} {h['within_10pct']:>6.0%} {h['median_obs_over_pred']:>9.3f}" if h else ""
        lines.append(f"  {k:<22}{s['runs']:>6}  {s['medape']:>17.1%} {s['within_10pct']:>6.0%} "
                     f"{s['median_obs_over_pred']:>9.3f}{tail}")  # fmt: skip
    held = ", ".join(f"{d} {r:.4g}" for d, r in v["held_out_rho"].items())
    lines.append(f"  held out: each device predicted with rho fitted on the others' runs ({held})")
    return "\n".join(lines)
