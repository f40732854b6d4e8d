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
   The attention tables (``kernels.attention_tables``: context attention for the prefill
   kernel, generation attention for the decode kernel, the runtime's default kernel on the
   device) fix each fused attention kernel's own ATTENTION_PARAMS (``fit_attention``): its
   compute and memory efficiencies, its fixed time per call and its time per work item
   (sequence x KV head), priced by the engine's attention structure (``attention_batch``).
2. The per-step overhead (``t_step_us``: scheduling, sampling, detokenisation) and a request's
   front-end time (``t_request_us``) are the ones fitted by replaying the agg serving runs
   (``silicon_calibration.csv``) through the serving simulator (``ridgeline calibrate
   --serving``, ``data/calibration/serving_fits.csv``): the simulator schedules each new prompt
   among the running decodes as the runtime does, so the overhead is what a step costs beyond
   its operators, and a lone request gets the same answer from ``estimate`` and ``simulate``.
   (Fitted instead to the runs' TPOT priced as a static batch's decode step, it also absorbed
   the prefills that interrupt a closed loop's decodes: 2.5 ms a step for vLLM on H100 where the
   replay gives 0.94 ms, so a lone request's TPOT read 9.4 ms in estimate and 7.7 in simulate.)

A device with kernels but no serving runs takes its runtime's profile of the serving fits (the
median over the devices with runs); a device with neither takes the runtime's profile (the
median of the devices' rows), and says so. The TPOT runs priced as a static decode step at that
overhead give each row's ``rms_log`` and the held-out check (``transfer``). ``ridgeline calibrate
--serving`` runs first, then ``ridgeline calibrate --production`` writes
``data/calibration/kernel_fits.csv``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np

from .._io import csv_text
from .._version import __version__
from ..catalog.device import Device
from ..catalog.store import Catalog, default_catalog
from ..engine.fits import ATTENTION_COLUMNS, ATTENTION_PARAMS, ATTENTION_PHASES, PARAMS, memory_technology
from ..engine.runtimes import KERNEL_RUNTIMES
from ..errors import PlanError
from ..models.quant import formats_table
from .acceptance import within_share
from .calibrate import FIT_COLUMNS, UNCALIBRATED, Batch, _at_bound, _bounds
from .decompose import Decomposed, _digest, decompose
from .kernels import KERNEL_DIR, attention_tables, gemm_tables

SERVING_FILE = "silicon_calibration.csv"
#: kernel_fits.csv's columns: a calibration row's, and its fused attention kernels'.
KERNEL_FIT_COLUMNS = (*FIT_COLUMNS, *ATTENTION_COLUMNS, "t_request_us")
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


def attention_batch(table: dict[str, Any], dev: Device) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One attention table's rows as the engine prices its fused attention kernel at efficiency 1
    (rust/src/graph.rs mha_kernel, keys and values of one head width): compute seconds of 2 h (hd +
    hd) FLOPs per attended pair at the device's bf16 peak, memory seconds of the queries and
    outputs (bf16) and the keys and values read (in the KV dtype), and the kernel's work items
    (sequences x KV heads). Prefill: ``isl`` new tokens on no prefix, causal pairs within the
    window; decode: one query per sequence over ``step`` cached keys (``min(step, window)``)."""
    b, s, h, kvh, hd, w = (table[k] for k in ("batch", "isl", "heads", "kv_heads", "head_dim", "window"))
    if table["phase"] == "prefill":
        # query i (1-based) of a causal prompt attends min(i, w) keys
        full = s * (s + 1) / 2
        pairs = b * np.where((w > 0) & (s > w), w * (w + 1) / 2 + (s - w) * w, full)
        keys, tokens = b * s, b * s
    else:
        step = table["step"]
        keys = b * np.where(w > 0, np.minimum(step, w), step)
        pairs, tokens = keys, b
    flops = 2 * h * (hd + hd) * pairs
    memory = tokens * h * (hd + hd) * 2.0 + keys * kvh * (hd + hd) * table["kv_bytes"]
    return flops / (_peak(dev, None) * 1e12), memory / (dev.memory_bw_gbs * 1e9), b * kvh


def attention_time(x: Sequence[float], compute: np.ndarray, memory: np.ndarray, items: np.ndarray) -> np.ndarray:
    """Seconds per call of a fitted attention kernel (ATTENTION_PARAMS ``x``; rust/src/roofline.rs
    rates: floor + max(compute / eta_compute + items t_item, memory / eta_mem))."""
    eta_c, eta_m, floor_us, item_us = x
    out: np.ndarray = floor_us * 1e-6 + np.maximum(compute / eta_c + items * item_us * 1e-6, memory / eta_m)
    return out


def fit_attention(table: dict[str, Any], dev: Device, cat: Catalog) -> dict[str, Any]:
    """One attention kernel's ATTENTION_PARAMS by log least squares on its table."""
    from scipy.optimize import least_squares

    c, m, items = attention_batch(table, dev)
    obs = table["latency_ms"] * 1e-3
    b = _bounds(cat)
    lo = [b[_I["eta_compute"]][0], b[_I["eta_mem"]][0], 0.0, 0.0]
    hi = [1.0, 1.0, cat.constant("fit_launch_us_max"), cat.constant("fit_attention_item_us_max")]
    fit = least_squares(lambda x: np.log(attention_time(x, c, m, items) / obs), [0.5, 0.7, 10.0, 0.02],
                        bounds=(lo, hi), x_scale=[0.1, 0.1, 1.0, 0.01])  # fmt: skip
    x = [float(f"{v:.6g}") for v in fit.x]
    ratio = obs / attention_time(x, c, m, items)
    pinned = [p for p, v, low, high in zip(ATTENTION_PARAMS, x, lo, hi) if _at_bound(v, low, high)]
    return {**dict(zip(ATTENTION_PARAMS, x)), "within": within_share(ratio), "rows": len(obs), "pinned": pinned,
            "kernel": table["kernel"], "file": table["file"],
            "rms": float(f"{np.sqrt(np.mean(np.log(ratio) ** 2)):.6g}")}  # fmt: skip


def serving_rows(root: str | os.PathLike[str], cat: Catalog,
                 fits: Optional[Sequence[dict[str, Any]]] = None) -> list[Decomposed]:  # fmt: skip
    """The priced TPOT rows of the production runtimes' agg serving runs, decomposed (their
    attention kernels priced by ``fits``, default the shipped calibration)."""
    from ..catalog.benchmarks import import_file

    path = Path(root) / SERVING_FILE
    if not path.is_file():
        raise PlanError(f"kernel tables: no {SERVING_FILE} under {str(root)!r} (the serving runs the step overhead "
                        f"is fitted on; a source checkout has {KERNEL_DIR}/{SERVING_FILE})")  # fmt: skip
    rows = import_file(str(path), path.read_text())
    return [decompose(r, cat, fits) for r in rows
            if r["metric"] == "tpot_ms" and not r["not_priced"] and r["runtime"] in KERNEL_RUNTIMES]  # fmt: skip


def overheads(runtime: str, hardware: str) -> tuple[float, float, str]:
    """Stage 2: the step overhead and a request's front-end time (us) fitted by replaying the
    serving runs (``serving_fits.csv``: the device's own, else the runtime's profile), and whose
    fit they are, in words. A runtime with no serving fit is refused: calibrate --serving first."""
    from ..engine.fits import SERVING_FITS, serving_row

    step = serving_row(runtime, hardware, "t_step_us")
    if step is None:
        raise PlanError(f"{SERVING_FITS}: no step overhead for {runtime} on {hardware} nor a profile of it; "
                        "run ridgeline calibrate --serving first (it replays the serving runs through the "
                        "simulator)")  # fmt: skip
    row, where = step
    where = f"{runtime}'s profile over its" if hardware == "*" else where
    req = serving_row(runtime, hardware, "request_us")
    request = float(req[0]["request_us"]) if req else 0.0
    text = (f"t_step_us from {where} {row['n_runs']} serving runs replayed through the simulator "
            f"({SERVING_FITS}); t_request_us "
            + (f"from {where if hardware == '*' else req[1]} {req[0]['request_runs']} lightly loaded ones" if req
               else "none: no lightly loaded run"))  # fmt: skip
    return float(row["t_step_us"]), request, text


def step_rms(rows: Sequence[Decomposed], kernel: dict[str, Any], step_us: float) -> float:
    """The rms of log(observed / predicted) of these TPOT runs priced as a static decode step with
    the kernels' parameters and this step overhead."""
    batch = Batch(rows)
    p = params(kernel["eta_mem"], kernel["eta_compute"], kernel["t_launch_us"], step_us)
    return float(f"{np.sqrt(np.mean(np.log(batch.observed / batch.predict(p, kernel['formats'])) ** 2)):.6g}")


@dataclasses.dataclass(frozen=True)
class Measured:
    """What one folder of kernel tables and serving runs gives, read and stage 1 fitted once, per
    (runtime, device): its GEMM tables and their kernel fit, its attention tables and their fits
    by phase, its priced TPOT runs (their attention priced by those fits)."""

    tables: dict[tuple[str, str], list[dict[str, Any]]]
    kernel: dict[tuple[str, str], dict[str, Any]]
    serving: dict[tuple[str, str], list[Decomposed]]
    attention_tables: dict[tuple[str, str], dict[str, dict[str, Any]]] = dataclasses.field(default_factory=dict)
    attention: dict[tuple[str, str], dict[str, dict[str, Any]]] = dataclasses.field(default_factory=dict)
    #: Tables and rows read but not fitted, each with why (a device the catalog does not name, a
    #: dtype or KV dtype not read, cells that are not numbers): counted, never skipped silently.
    skipped: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def measure(root: str | os.PathLike[str] = KERNEL_DIR, catalog: Optional[Catalog] = None) -> Measured:
    cat = catalog or default_catalog()
    tables: dict[tuple[str, str], list[dict[str, Any]]] = {}
    skipped: list[dict[str, Any]] = []
    for t in gemm_tables(root, skipped=skipped):
        if t["runtime"] in KERNEL_RUNTIMES:
            tables.setdefault((t["runtime"], t["hardware"]), []).append(t)
    if not tables:
        raise PlanError(f"kernel tables: no {', '.join(KERNEL_RUNTIMES)} GEMM tables under {str(root)!r}")
    kernel = {key: fit_gemm(ts, cat.get(key[1]), cat) for key, ts in sorted(tables.items())}
    att_tables: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for t in attention_tables(root, skipped=skipped):
        if (t["runtime"], t["hardware"]) in kernel:
            att_tables.setdefault((t["runtime"], t["hardware"]), {})[t["phase"]] = t
    attention = {key: {ph: fit_attention(t, cat.get(key[1]), cat) for ph, t in sorted(ts.items())}
                 for key, ts in sorted(att_tables.items())}  # fmt: skip
    provisional = Measured(tables, kernel, {}, att_tables, attention)
    serving: dict[tuple[str, str], list[Decomposed]] = {}
    for d in serving_rows(root, cat, fit_production(root, cat, provisional)):
        serving.setdefault((d.row["runtime"], d.row["hardware"]), []).append(d)
    return Measured(tables, kernel, serving, att_tables, attention, skipped)


def attention_columns(fits: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A kernel_fits.csv row's ATTENTION_COLUMNS from its attention fits by phase (empty where a
    phase has none: its kernel is priced as any kernel)."""
    out = {c: "" for c in ATTENTION_COLUMNS}
    for ph, f in fits.items():
        out.update({f"attn_{ph}_{p}": f[p] for p in ATTENTION_PARAMS})
    return out


def _attention_profile(fits: Sequence[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per phase, the median of the devices' attention fits (a runtime's profile)."""
    out = {}
    for ph in ATTENTION_PHASES:
        mine = [f[ph] for f in fits if ph in f]
        if mine:
            out[ph] = {p: float(f"{np.median([f[p] for f in mine]):.6g}") for p in ATTENTION_PARAMS}
    return out


def fit_production(
    root: str | os.PathLike[str] = KERNEL_DIR, catalog: Optional[Catalog] = None, measured: Optional[Measured] = None
) -> list[dict[str, Any]]:
    """The rows of data/calibration/kernel_fits.csv (FIT_COLUMNS): per (runtime, device) with
    kernel tables, and per runtime a profile (the devices' medians)."""
    from ..engine.structure import structure_version

    cat = catalog or default_catalog()
    sv = structure_version(cat)
    m = measured or measure(root, cat)
    kernel, serving = m.kernel, m.serving
    out = []
    for rt in KERNEL_RUNTIMES:
        mine = sorted(k for k in kernel if k[0] == rt)
        if not mine:
            continue
        rms_of = {}
        for key in mine:
            rt, hw = key
            k = kernel[key]
            s = serving.get(key, [])
            step, request, stage2 = overheads(rt, hw)
            rms = rms_of[key] = step_rms(s, k, step) if s else k["rms"]
            row = _row(cat, hw, rt, memory_technology(cat.get(hw).memory_type), k, step, k["rows"] + len(s), rms, sv,
                       _digest([(f, "") for f in k["files"]] + [(d.row["id"], d.row["value"]) for d in s]),
                       f"ridgeline calibrate --production: eta_mem, eta_compute and the per-kernel floor "
                       f"(t_launch_us, CUDA-graph replay) by log least squares on {len(k['files'])} GEMM table(s) "
                       f"data/benchmarks/aic/{k['files'][0]} (bf16 rows within 1.5x: {k['within']['bf16']:.1%}); "
                       f"{stage2}")  # fmt: skip
            row["t_request_us"] = request
            row["runtime_version"] = k["version"]
            att = m.attention.get(key, {})
            row.update(attention_columns(att))
            row["pinned"] = " ".join(
                [row["pinned"], *(f"attn_{ph}_{p}" for ph, f in att.items() for p in f["pinned"])]
            ).strip()
            if att:
                row["source"] += "; fused attention kernels by log least squares on " + ", ".join(
                    f"{f['file']} ({f['kernel']}, {f['rows']} rows, within 1.5x {f['within']:.1%})"
                    for f in att.values()
                )
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
        rms_all = float(f"{np.median([rms_of[k] for k in mine]):.6g}")
        step, request, stage2 = overheads(rt, "*")
        row = _row(cat, "*", rt, "*", prof, step, sum(kernel[key]["rows"] for key in mine), rms_all, sv,
                   _digest([(f"{key}", "") for key in mine]),
                   f"ridgeline calibrate --production: the median over {', '.join(hw for _, hw in mine)} of "
                   f"their kernel-fitted rows (a device without kernel tables: through its catalog peaks); "
                   f"{stage2}")  # fmt: skip
        row["t_request_us"] = request
        row["runtime_version"] = ", ".join(sorted({kernel[key]["version"] for key in mine}))
        row.update(attention_columns(_attention_profile([m.attention[key] for key in mine if key in m.attention])))
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
    return csv_text(rows, KERNEL_FIT_COLUMNS)


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


def attention_holdout(
    root: str | os.PathLike[str] = KERNEL_DIR, catalog: Optional[Catalog] = None, measured: Optional[Measured] = None
) -> list[dict[str, Any]]:
    """Each device's attention tables priced with its own fit (in sample) and with the median of
    the other devices' fits of the same runtime and kernel phase (held out: what a device without
    tables of its architecture gets, through its catalog peaks): per (runtime, device, phase) the
    share within 1.5x and the median observed/predicted held out."""
    cat = catalog or default_catalog()
    m = measured or measure(root, cat)
    out = []
    for (rt, hw), by_phase in sorted(m.attention_tables.items()):
        dev = cat.get(hw)
        for ph, t in sorted(by_phase.items()):
            c, mem, items = attention_batch(t, dev)
            obs = t["latency_ms"] * 1e-3
            own = m.attention[(rt, hw)][ph]
            others = [f[ph] for (r2, h2), f in m.attention.items() if r2 == rt and h2 != hw and ph in f]
            held = [float(np.median([f[p] for f in others])) for p in ATTENTION_PARAMS]
            r_out = obs / attention_time(held, c, mem, items)
            out.append({"runtime": rt, "hardware": hw, "phase": ph, "kernel": t["kernel"], "rows": len(obs),
                        "in_sample_within_1_5x": own["within"], "held_out_within_1_5x": within_share(r_out),
                        "held_out_median": float(np.median(r_out)), "pinned": own["pinned"]})  # fmt: skip
    return out


#: Kernels timed on a device here (benches/device/*.py): devices with no runtime tables, to check
#: the architecture profile they are priced by (not fitted; not shipped).
MEASURED_DIR = "data/benchmarks/measured"
#: The production runtime whose kernel a measured torch kernel is: vLLM's unquantized linear
#: layer calls torch.nn.functional.linear (cuBLAS), the bf16 GEMM the measured tables time.
MEASURED_AS = "vllm"


def measured_holdout(
    root: str | os.PathLike[str] = MEASURED_DIR,
    catalog: Optional[Catalog] = None,
    fits: Optional[Sequence[dict[str, Any]]] = None,
) -> list[dict[str, Any]]:
    """Kernels measured on devices without runtime tables, priced by the calibration an estimate
    of that device takes under vLLM (``fits``, default the shipped ones: its architecture's
    profile): the bf16 GEMMs (the kernel vLLM calls) and the attention tables (torch's SDPA kernels,
    not vLLM's: a comparison, not a check of its kernel). Per table: rows, the calibration label,
    share within 1.5x and the median observed/predicted."""
    from ..engine.fits import attention_of, lookup

    cat = catalog or default_catalog()
    out = []
    for t in gemm_tables(root):
        if t["format"] is not None:
            continue  # torch._scaled_mm is not vLLM's fp8 path (its CUTLASS kernel and input quantisation)
        dev = cat.get(t["hardware"])
        label, f = lookup(dev.name, MEASURED_AS, cat, fits)
        if f is None:
            continue
        ratio = t["latency_ms"] / gemm_batch(t, dev).predict(params(float(f["eta_mem"]), float(f["eta_compute"]),
                                                                    float(f["t_launch_us"])))  # fmt: skip
        out.append({"hardware": dev.name, "table": t["file"], "kernel": "bf16 GEMM (cuBLAS)", "rows": len(ratio),
                    "calibration": label, "within_1_5x": within_share(ratio),
                    "median": float(np.median(ratio))})  # fmt: skip
    for t in attention_tables(root, every_kernel=True):
        dev = cat.get(t["hardware"])
        label, f = lookup(dev.name, MEASURED_AS, cat, fits)
        a = attention_of(f).get(t["phase"])
        if a is None:
            continue
        ratio = t["latency_ms"] * 1e-3 / attention_time([a[p] for p in ATTENTION_PARAMS], *attention_batch(t, dev))
        out.append({"hardware": dev.name, "table": t["file"], "kernel": f"{t['phase']} attention ({t['kernel']})",
                    "rows": len(ratio), "calibration": label, "within_1_5x": within_share(ratio),
                    "median": float(np.median(ratio))})  # fmt: skip
    return out
