"""Production runtimes (vLLM, SGLang, TensorRT-LLM) calibrated from their own measured kernels
and checked end to end on their serving runs (issue 18, items 3 and 6).

Per (runtime, device) with kernel tables, in two stages:

1. The GEMM tables (``kernels.gemm_tables``), priced by the engine's own GEMM structure (2mnk
   FLOPs at the format's compute path, weights in their format plus bf16 input and output,
   roofline max, one kernel each, and for a W8A8 / W4A4 format the kernel that quantises the
   input) fix ``eta_compute``, ``eta_mem`` and a per-kernel floor (``t_launch_us``: the kernels
   are replayed from CUDA graphs, so it is the device's fixed cost per kernel, not a host
   launch), from the bf16 rows; then each quantised format's ``eta_compute_quant`` with the
   others held (fp8, fp8_block128, nvfp4).
2. The agg serving runs' TPOT (``silicon_calibration.csv``, priced as the steady-state decode
   step) fix ``t_step_us``, the per-step overhead (scheduling, sampling, detokenisation), with
   everything else what the kernels gave.

A device with kernels but no serving runs takes its runtime's median step overhead; a device
with neither takes the runtime's profile (the median of the devices' rows), and says so.
``ridgeline calibrate --production`` writes ``data/calibration/kernel_fits.csv``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ._fits import PARAMS, memory_technology
from ._io import csv_text
from ._version import __version__
from .acceptance import within_share
from .calibrate import FIT_COLUMNS, UNCALIBRATED, Batch, _at_bound, _bounds
from .catalog import Catalog, Device, default_catalog
from .decompose import Decomposed, _digest, decompose
from .errors import PlanError
from .kernels import KERNEL_DIR, gemm_tables
from .quant import formats_table
from .runtimes import KERNEL_RUNTIMES

SERVING_FILE = "silicon_calibration.csv"
_I = {k: PARAMS.index(k) for k in PARAMS}


def params(eta_mem: float, eta_compute: float, t_kernel_us: float, t_step_us: float = 0.0) -> np.ndarray:
    """PARAMS for a production runtime: the kernels' efficiencies and floor, the serving runs'
    step overhead; routed experts at eta_mem, quantised GEMMs at eta_compute unless a format has
    its own, uniform routing, the roofline max (overlap 1)."""
    p = UNCALIBRATED.copy()
    p[_I["eta_mem"]], p[_I["eta_compute"]], p[_I["t_launch_us"]] = eta_mem, eta_compute, t_kernel_us
    p[_I["t_step_us"]], p[_I["eta_moe"]], p[_I["eta_compute_quant"]] = t_step_us, eta_mem, eta_compute
    return p


def _peak(dev: Device, fmt: Optional[str]) -> float:
    """The engine's GEMM peak (TFLOPS): the format's compute path where the device has one faster
    than bf16, else bf16 (rust/src/engine.rs, resolve)."""
    base = dev.tflops_bf16 or dev.tflops_fp16 or dev.tflops_fp32
    if base is None:
        raise ValueError(f"{dev.name} has no bf16 peak")
    path = formats_table()[fmt]["compute"] if fmt else None
    own = {"fp8": dev.tflops_fp8, "fp4": dev.tflops_fp4, "int8": dev.tflops_int8}.get(path or "")
    return float(own) if own and own > base else float(base)


def gemm_batch(table: dict[str, Any], dev: Device) -> Batch:
    """One GEMM table's rows as the engine prices them at efficiency 1 (rust/src/graph.rs
    gemm_parts: weights in their format, input and output in bf16)."""
    m, n, k = table["m"], table["n"], table["k"]
    fmt = table["format"]
    if fmt:
        f = formats_table()[fmt]

        def blocks(d: np.ndarray, b: int) -> np.ndarray:
            return np.ones_like(d) if b == 0 else np.ceil(d / b)

        scales = blocks(k, f["block_k"]) * blocks(n, f["block_n"]) * f["scale_bits"] / 8 if f["scale_bits"] else 0.0
        weights = k * n * f["bits"] / 8 + scales
    else:
        weights = k * n * 2.0
    peak = _peak(dev, fmt)
    bw = dev.memory_bw_gbs * 1e9
    compute = 2 * m * n * k / (peak * 1e12)
    memory = (weights + (m * k + m * n) * 2.0) / bw
    act_bits = formats_table()[fmt]["act_bits"] if fmt else None
    if act_bits and peak > _peak(dev, None):
        # the input's quantisation kernel (rust/src/graph.rs gemm_parts, OpKind::ActQuant)
        quant = m * k * (2.0 + act_bits / 8.0) / bw
        return Batch.ops(np.stack([compute, np.zeros_like(m)], axis=1), np.stack([memory, quant], axis=1),
                         np.stack([np.ones_like(m, dtype=bool), np.zeros_like(m, dtype=bool)], axis=1),
                         str(fmt), table["latency_ms"])  # fmt: skip
    return Batch.ops(compute, memory, np.full(len(m), fmt is not None), fmt or "", table["latency_ms"])


def fit_gemm(tables: Sequence[dict[str, Any]], dev: Device, cat: Catalog) -> dict[str, Any]:
    """Stage 1 for one (runtime, device): the bf16 table fixes eta_mem, eta_compute and the
    per-kernel floor (log least squares); each quantised format then its eta_compute_quant."""
    from scipy.optimize import least_squares  # type: ignore[import-untyped]

    b = _bounds(cat)
    lo = [b[_I["eta_mem"]][0], b[_I["eta_compute"]][0], b[_I["t_launch_us"]][0]]
    hi = [b[_I["eta_mem"]][1], b[_I["eta_compute"]][1], b[_I["t_launch_us"]][1]]
    (bf16,) = [t for t in tables if t["format"] is None]
    batch = gemm_batch(bf16, dev)
    fit = least_squares(lambda x: np.log(batch.predict(params(*x)) / bf16["latency_ms"]), [0.8, 0.7, 3.0],
                        bounds=(lo, hi))  # fmt: skip
    eta_mem, eta_c, floor = (float(f"{v:.6g}") for v in fit.x)
    base = params(eta_mem, eta_c, floor)
    ratio = bf16["latency_ms"] / batch.predict(base)
    out: dict[str, Any] = {
        "eta_mem": eta_mem, "eta_compute": eta_c, "t_launch_us": floor, "formats": {},
        "within": {"bf16": within_share(ratio)}, "rows": len(bf16["m"]), "files": [bf16["file"]],
        "version": bf16["version"],
        "rms": float(f"{np.sqrt(np.mean(np.log(ratio) ** 2)):.6g}"),
    }  # fmt: skip
    cq = b[_I["eta_compute_quant"]]
    for t in tables:
        if t["format"] is None or (t["format"] == "nvfp4" and not dev.tflops_fp4):
            continue  # nvfp4 off Blackwell is dequantised: its table measures another kernel
        qb = gemm_batch(t, dev)
        fmt = t["format"]
        # the format's compute efficiency with the bf16 stage held, over every row: the input's
        # quantisation kernel is priced as the engine prices it (memory time and one floor)
        eta = _fit_format(qb, base, fmt, cq)
        out["formats"][fmt] = eta
        out["within"][fmt] = within_share(t["latency_ms"] / qb.predict(base, {fmt: eta}))
        out["rows"] += len(t["m"])
    return out


def _fit_format(batch: Batch, base: np.ndarray, fmt: str, bounds: tuple[float, float]) -> float:
    """One format's eta_compute_quant on its rows with the other parameters held."""
    from scipy.optimize import least_squares

    q = least_squares(lambda x: np.log(batch.predict(base, {fmt: x[0]}) / batch.observed), [0.5],
                      bounds=([bounds[0]], [bounds[1]]))  # fmt: skip
    return float(f"{q.x[0]:.6g}")


def serving_rows(root: str | os.PathLike[str], cat: Catalog) -> list[Decomposed]:
    """The priced TPOT rows of the production runtimes' agg serving runs, decomposed."""
    from .benchmarks import import_file

    path = Path(root) / SERVING_FILE
    if not path.is_file():
        raise PlanError(f"kernel tables: no {SERVING_FILE} under {str(root)!r} (the serving runs the step overhead "
                        f"is fitted on; a source checkout has {KERNEL_DIR}/{SERVING_FILE})")  # fmt: skip
    rows = import_file(str(path), path.read_text())
    return [decompose(r, cat) for r in rows
            if r["metric"] == "tpot_ms" and not r["not_priced"] and r["runtime"] in KERNEL_RUNTIMES]  # fmt: skip


def fit_step(rows: Sequence[Decomposed], kernel: dict[str, Any], cat: Catalog) -> tuple[float, float]:
    """Stage 2: the per-step overhead (us) that best fits these TPOT rows with the kernels'
    parameters held, and the rms of log(observed / predicted)."""
    from scipy.optimize import least_squares

    batch = Batch(rows)
    obs = batch.observed
    p0 = params(kernel["eta_mem"], kernel["eta_compute"], kernel["t_launch_us"])
    lo, hi = _bounds(cat)[_I["t_step_us"]]

    def resid(x: np.ndarray) -> np.ndarray:
        p = p0.copy()
        p[_I["t_step_us"]] = x[0]
        return np.asarray(np.log(obs / batch.predict(p, kernel["formats"])))

    fit = least_squares(resid, [100.0], bounds=([lo], [hi]))
    return float(f"{fit.x[0]:.6g}"), float(f"{np.sqrt(np.mean(resid(fit.x) ** 2)):.6g}")


@dataclasses.dataclass(frozen=True)
class Measured:
    """What one folder of kernel tables and serving runs gives, read and stage 1 fitted once, per
    (runtime, device): its GEMM tables, their kernel fit, its priced TPOT runs."""

    tables: dict[tuple[str, str], list[dict[str, Any]]]
    kernel: dict[tuple[str, str], dict[str, Any]]
    serving: dict[tuple[str, str], list[Decomposed]]


def measure(root: str | os.PathLike[str] = KERNEL_DIR, catalog: Optional[Catalog] = None) -> Measured:
    cat = catalog or default_catalog()
    tables: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for t in gemm_tables(root):
        if t["runtime"] in KERNEL_RUNTIMES:
            tables.setdefault((t["runtime"], t["hardware"]), []).append(t)
    if not tables:
        raise PlanError(f"kernel tables: no {', '.join(KERNEL_RUNTIMES)} GEMM tables under {str(root)!r}")
    serving: dict[tuple[str, str], list[Decomposed]] = {}
    for d in serving_rows(root, cat):
        serving.setdefault((d.row["runtime"], d.row["hardware"]), []).append(d)
    kernel = {key: fit_gemm(ts, cat.get(key[1]), cat) for key, ts in sorted(tables.items())}
    return Measured(tables, kernel, serving)


def fit_production(
    root: str | os.PathLike[str] = KERNEL_DIR, catalog: Optional[Catalog] = None, measured: Optional[Measured] = None
) -> list[dict[str, Any]]:
    """The rows of data/calibration/kernel_fits.csv (FIT_COLUMNS): per (runtime, device) with
    kernel tables, and per runtime a profile (the devices' medians)."""
    from .snapshot import structure_version

    cat = catalog or default_catalog()
    sv = structure_version(cat)
    m = measured or measure(root, cat)
    kernel, serving = m.kernel, m.serving
    steps = {key: fit_step(serving[key], kernel[key], cat) for key in sorted(serving) if key in kernel}
    out = []
    for rt in KERNEL_RUNTIMES:
        mine = sorted(k for k in kernel if k[0] == rt)
        if not mine:
            continue
        fitted_steps = [steps[k][0] for k in mine if k in steps]
        median_step = float(f"{np.median(fitted_steps):.6g}") if fitted_steps else 0.0
        for key in mine:
            rt, hw = key
            k = kernel[key]
            s = serving.get(key, [])
            step, rms = steps.get(key, (median_step, k["rms"]))
            stage2 = (f"t_step_us from {len(s)} agg TPOT runs of {SERVING_FILE}" if s
                      else f"no serving run on {hw}: t_step_us is {rt}'s median over devices with them")  # fmt: skip
            row = _row(cat, hw, rt, memory_technology(cat.get(hw).memory_type), k, step, k["rows"] + len(s), rms, sv,
                       _digest([(f, "") for f in k["files"]] + [(d.row["id"], d.row["value"]) for d in s]),
                       f"ridgeline calibrate --production: eta_mem, eta_compute and the per-kernel floor "
                       f"(t_launch_us, CUDA-graph replay) by log least squares on {len(k['files'])} GEMM table(s) "
                       f"data/benchmarks/aic/{k['files'][0]} (bf16 rows within 1.5x: {k['within']['bf16']:.1%}); "
                       f"{stage2}")  # fmt: skip
            row["runtime_version"] = k["version"]
            out.append(row)
            for fmt, eta in sorted(k["formats"].items()):
                out.append({**row, "precision": fmt, "eta_compute_quant": eta, "pinned": _cq_pinned(eta, cat),
                            "source": f"ridgeline calibrate --production: {fmt}'s quantized-GEMM efficiency by log "
                                      f"least squares on its GEMM table with the bf16 stage held (within 1.5x: "
                                      f"{k['within'][fmt]:.1%})"})  # fmt: skip
        # the runtime's profile for devices without kernel tables: the devices' medians
        med = {p: float(f"{np.median([kernel[key][p] for key in mine]):.6g}")
               for p in ("eta_mem", "eta_compute", "t_launch_us")}  # fmt: skip
        fmts = sorted({f for key in mine for f in kernel[key]["formats"]})
        per_format = {f: [kernel[key]["formats"][f] for key in mine if f in kernel[key]["formats"]] for f in fmts}
        prof_formats: dict[str, float] = {f: float(f"{np.median(v):.6g}") for f, v in per_format.items()}
        prof: dict[str, Any] = {**med, "formats": prof_formats}
        rms_all = float(f"{np.median([steps[k][1] if k in steps else kernel[k]['rms'] for k in mine]):.6g}")
        row = _row(cat, "*", rt, "*", prof, median_step, sum(kernel[key]["rows"] for key in mine), rms_all, sv,
                   _digest([(f"{key}", "") for key in mine]),
                   f"ridgeline calibrate --production: the median over {', '.join(hw for _, hw in mine)} of "
                   f"their kernel-fitted rows (a device without kernel tables: through its catalog peaks)")  # fmt: skip
        row["runtime_version"] = ", ".join(sorted({kernel[key]["version"] for key in mine}))
        out.append(row)
        for fmt, eta in prof_formats.items():
            out.append({**row, "precision": fmt, "eta_compute_quant": eta, "pinned": _cq_pinned(eta, cat)})
    return out


def _row(cat: Catalog, hw: str, rt: str, memory: str, k: dict[str, Any], step: float, n_rows: int, rms: float,
         sv: str, data: str, source: str) -> dict[str, Any]:  # fmt: skip
    """A whole (precision "*") row of kernel_fits.csv: the kernels' parameters, the step overhead."""
    p = params(k["eta_mem"], k["eta_compute"], k["t_launch_us"], step)
    bounds = _bounds(cat)
    pinned = " ".join(n for n in ("eta_mem", "eta_compute", "t_launch_us", "t_step_us")
                      if _at_bound(float(p[_I[n]]), *bounds[_I[n]]))  # fmt: skip
    return {
        "hardware": hw, "runtime": rt, "memory": memory, "precision": "*", "phase": "*",
        **{name: float(f"{v:.6g}") for name, v in zip(PARAMS, p)}, "t_layer_us": 0.0, "n_rows": n_rows,
        "rms_log": rms, "pinned": pinned, "structure_version": sv, "data_hash": data,
        "fitted_at": __version__, "source": source,
    }  # fmt: skip


def _cq_pinned(eta: float, cat: Catalog) -> str:
    return "eta_compute_quant" if _at_bound(eta, *_bounds(cat)[_I["eta_compute_quant"]]) else ""


def kernel_fits_csv(rows: Sequence[dict[str, Any]]) -> str:
    return csv_text(rows, FIT_COLUMNS)


def transfer(
    root: str | os.PathLike[str] = KERNEL_DIR,
    fits: Optional[Sequence[dict[str, Any]]] = None,
    catalog: Optional[Catalog] = None,
    measured: Optional[Measured] = None,
) -> list[dict[str, Any]]:
    """The issue's end-to-end check: each device's TPOT runs priced with its own kernel rows and
    the step overhead fitted on the other device's runs (fit on H100, predict B200, and the
    reverse), per runtime: MedAPE, share within 1.5x, median observed/predicted, and in sample."""
    cat = catalog or default_catalog()
    m = measured or measure(root, cat)
    rows = fits if fits is not None else fit_production(root, cat, m)
    own = {(r["runtime"], r["hardware"]): r for r in rows if r["precision"] == "*"}
    fmts: dict[tuple[str, str], dict[str, float]] = {}
    for r in rows:
        if r["precision"] != "*":
            fmts.setdefault((r["runtime"], r["hardware"]), {})[r["precision"]] = float(r["eta_compute_quant"])
    serving = m.serving
    out = []
    for (rt, hw), g in sorted(serving.items()):
        mine = own.get((rt, hw))
        others = [r for (r2, h2), r in own.items() if r2 == rt and h2 not in (hw, "*") and (r2, h2) in serving]
        if mine is None:
            continue
        batch = Batch(g)
        p_in = np.array([float(mine[k]) for k in PARAMS])
        rec: dict[str, Any] = {"runtime": rt, "hardware": hw, "rows": len(g)}
        for label, step in [("in_sample", float(mine["t_step_us"]))] + [
            (f"from {o['hardware']}", float(o["t_step_us"])) for o in others
        ]:
            p = p_in.copy()
            p[_I["t_step_us"]] = step
            ratio = batch.observed / batch.predict(p, fmts.get((rt, hw)))
            rec[label] = {"medape": float(np.median(np.abs(1 / ratio - 1))), "within_1_5x": within_share(ratio),
                          "median_obs_over_pred": float(np.median(ratio))}  # fmt: skip
            if label != "in_sample":
                rec.setdefault("held_out_ratios", []).extend(ratio.tolist())
                rec.setdefault("held_out_ids", []).extend(d.row["id"] for d in g)
        out.append(rec)
    return out


def holdout_rows(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per production runtime, the range an estimate quotes beside its TPOT: the 10th, 50th and
    90th percentiles of observed/predicted speed on each device's serving runs priced with the
    step overhead of the other device (data/calibration/kernel_holdout.csv, HOLDOUT_COLUMNS)."""
    out = []
    for rt in KERNEL_RUNTIMES:
        mine = [r for r in records if r["runtime"] == rt and r.get("held_out_ratios")]
        if not mine:
            continue
        # a time row's ratio is observed / predicted time; the file holds speed ratios
        speed = 1 / np.array([x for r in mine for x in r["held_out_ratios"]])
        q10, q50, q90 = np.quantile(speed, [0.1, 0.5, 0.9])
        out.append({
            "runtime": rt, "phase": "decode", "n_rows": len(speed), "n_devices": len(mine),
            "q10": float(f"{q10:.6g}"), "q50": float(f"{q50:.6g}"), "q90": float(f"{q90:.6g}"),
            "data_hash": _digest((i, "") for r in mine for i in r["held_out_ids"]),
            "source": f"ridgeline calibrate --production: TPOT of {len(speed)} agg serving runs on "
                      f"{', '.join(r['hardware'] for r in mine)}, each device priced with the step overhead "
                      f"fitted on the other's runs",
        })  # fmt: skip
    return out


def gemm_holdout(
    root: str | os.PathLike[str] = KERNEL_DIR, catalog: Optional[Catalog] = None, measured: Optional[Measured] = None
) -> list[dict[str, Any]]:
    """Each device's GEMM tables priced with the median of the other devices' kernel fits of the
    same runtime (what a device without tables gets, through its catalog peaks): per (runtime,
    device, format) the share within 1.5x, held out and in sample."""
    cat = catalog or default_catalog()
    m = measured or measure(root, cat)
    kernel = m.kernel
    out = []
    for (rt, hw), ts in sorted(m.tables.items()):
        others = [k for (r2, h2), k in kernel.items() if r2 == rt and h2 != hw]
        med = {p: float(np.median([k[p] for k in others])) for p in ("eta_mem", "eta_compute", "t_launch_us")}
        dev = cat.get(hw)
        for t in ts:
            fmt = t["format"]
            if fmt == "nvfp4" and not dev.tflops_fp4:
                continue
            b = gemm_batch(t, dev)
            held_f = [k["formats"][fmt] for k in others if fmt in k["formats"]] if fmt else []
            if fmt and not held_f:
                continue
            held = {fmt: float(np.median(held_f))} if fmt else None
            own = kernel[(rt, hw)]
            r_out = t["latency_ms"] / b.predict(params(med["eta_mem"], med["eta_compute"], med["t_launch_us"]), held)
            r_in = t["latency_ms"] / b.predict(params(own["eta_mem"], own["eta_compute"], own["t_launch_us"]),
                                               {fmt: own["formats"][fmt]} if fmt else None)  # fmt: skip
            out.append({"runtime": rt, "hardware": hw, "format": fmt or "bf16", "rows": len(t["m"]),
                        "held_out_within_1_5x": within_share(r_out), "in_sample_within_1_5x": within_share(r_in),
                        "held_out_median": float(np.median(r_out))})  # fmt: skip
    return out
