"""What an estimate reads of the calibration: the fitted rows and held-out ranges compiled into
the package, the row a device and runtime take, the runtime a device defaults to, and the core's
efficiencies for a row.

Pure Python and the standard library: every calibrated estimate comes through here, and none
needs numpy, which ``calibrate`` (the fit and its validation, which re-exports these names)
imports.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from .. import _data
from ..catalog.store import Catalog, default_catalog
from ..errors import CatalogError

PARAMS = ("eta_mem", "eta_compute", "t_launch_us", "t_step_us", "eta_moe", "eta_compute_quant", "routing_skew",
          "overlap", "overlap_moe")  # fmt: skip
#: PARAMS at the efficiency-1 bound: efficiencies 1, no launch or step time, uniform routing
#: (skew 0), compute and memory fully overlapped (the roofline).
BOUND_PARAMS = (1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0)
CALIBRATION_FILE = "data/calibration/fits.csv"
HOLDOUT_FILE = "data/calibration/holdout.csv"
#: The serving simulator's per-step overhead fitted by replaying the measured serving runs
#: (``ridgeline calibrate --serving``): a step's host time beside its kernels, once prefill
#: interruptions are simulated.
SERVING_FITS = "data/calibration/serving_fits.csv"
#: vLLM, SGLang and TensorRT-LLM fitted from their kernels and serving runs (kernel_fit).
KERNEL_FITS_FILE = "data/calibration/kernel_fits.csv"
#: The production runtimes: calibrated from their own measured kernels and serving runs
#: (``kernel_fit``, KERNEL_FITS_FILE), not by the benchmark-row fit.
KERNEL_RUNTIMES = ("vllm", "sglang", "trtllm")
KERNEL_HOLDOUT_FILE = "data/calibration/kernel_holdout.csv"


def shipped_fits() -> list[dict[str, Any]]:
    """The calibration rows compiled into the package (parsed once: every calibrated estimate reads them)."""
    return list(_shipped_fits())


@functools.lru_cache(maxsize=1)
def _shipped_fits() -> tuple[dict[str, Any], ...]:
    """The benchmark-row fits (llama.cpp) and the production runtimes' kernel fits, one table."""
    shipped = _data.list_files("data/calibration/")
    return tuple(r for f in (CALIBRATION_FILE, KERNEL_FITS_FILE) if f in shipped
                 for r in csv.DictReader(io.StringIO(_data.read_text(f))))  # fmt: skip


def lookup(
    hardware: str,
    runtime: Optional[str],
    catalog: Optional[Catalog] = None,
    fits: Optional[Sequence[dict[str, Any]]] = None,
    structure: Optional[str] = None,
) -> tuple[str, Optional[dict[str, Any]]]:
    """The calibration an estimate uses: the device's own row, else its runtime's profile,
    else none.

    Rows fitted against a structure version other than ``structure`` are refused (principle 2):
    ``fitted.lookup`` passes the engine's for rows given as ``fits``. The shipped rows are not
    checked here: the check prices ~175 probe plans
    (about 60 ms), which every process would pay on its first calibrated estimate, and what it
    guards is fixed when the package is built. ``ridgeline calibrate`` stamps each row it
    writes with the structure version it fitted against, and
    tests/test_calibration.py::test_shipped_fits_match_the_engine_structure fails when the
    physics changed without a refit, so stale shipped rows do not pass CI. Rows passed in
    went through neither, so ``fitted.lookup`` checks them (this module sits below the engine
    whose structure it would have to price)."""
    if not runtime:
        return "uncalibrated", None
    rows = [f for f in (shipped_fits() if fits is None else fits) if f["runtime"] == runtime]
    if not rows:
        return "uncalibrated", None
    stale = [f for f in rows if structure is not None and f["structure_version"] != structure]
    if stale:
        raise CatalogError(
            f"calibration for {runtime} was fitted against structure version {stale[0]['structure_version']}, "
            f"the engine is {structure}: run `ridgeline calibrate` to refit"
        )

    def with_formats(f: dict[str, Any]) -> dict[str, Any]:
        # the group's per-format quantized-GEMM efficiencies ride along with its row
        own = {g["precision"]: float(g["eta_compute_quant"]) for g in rows
               if (g["hardware"], g["memory"]) == (f["hardware"], f["memory"]) and g["precision"] != "*"}  # fmt: skip
        return {**f, "quant_formats": own}

    whole = [f for f in rows if f["precision"] == "*"]
    own = next((f for f in whole if f["hardware"] == hardware), None)
    if own:
        return f"calibrated ({hardware}, {_named(runtime, own)}, {own['n_rows']} rows)", with_formats(own)
    cat = catalog or default_catalog()
    dev = cat.get(hardware)
    if runtime in KERNEL_RUNTIMES:
        # a production runtime on a device without kernel tables: its architecture's fit (the
        # same tensor cores and kernels), priced through this device's own catalog peaks
        def arch(f: Mapping[str, Any]) -> Optional[str]:
            return cat.get(f["hardware"]).arch if f["hardware"] != "*" and cat.find(f["hardware"]) else None

        kin = [f for f in whole if arch(f) == dev.arch]
        if kin:
            f = min(kin, key=lambda f: f["hardware"])
            label = f"{dev.arch}: {f['hardware']}'s {_named(runtime, f)} fit, {f['n_rows']} rows"
            return f"architecture-profile ({label})", with_formats(f)
    mt = memory_technology(dev.memory_type)
    for memory in (mt, "*"):
        prof = next((f for f in whole if f["hardware"] == "*" and f["memory"] == memory), None)
        if prof:
            what = f"{_named(runtime, prof)}, {memory} memory" if memory != "*" else _named(runtime, prof)
            return f"runtime-profile ({what}, {prof['n_rows']} rows)", with_formats(prof)
    return "uncalibrated", None


#: What a result's numbers rest on (every estimate, sweep row, simulation and recommended plan
#: says it, and rankings keep bound ones apart): the device's own fit (measured), a fit of other
#: devices (borrowed: its architecture's, or the runtime's profile), or none (the efficiency-1
#: bound, an optimistic upper bound on speed).
MEASURED, BORROWED, BOUND = "measured", "borrowed", "bound"
BASES = (MEASURED, BORROWED, BOUND)


def basis(label: str) -> str:
    """What a calibration label (``lookup``'s) rests on: MEASURED, BORROWED or BOUND.

    >>> basis("calibrated (H100_SXM, vllm 0.24.0, 107425 rows)"), basis("runtime-profile (vllm, 474206 rows)")
    ('measured', 'borrowed')
    >>> basis("uncalibrated")
    'bound'
    """
    if label.startswith("calibrated"):
        return MEASURED
    if label.startswith(("architecture-profile", "runtime-profile")):
        return BORROWED
    return BOUND


def basis_from(label: str, row: Optional[Mapping[str, Any]]) -> str:
    """Whose fit a result took, in words: the device's own, another device's of its architecture,
    the runtime's profile over the devices it names (its source), or none.

    >>> basis_from("uncalibrated", None)
    'no calibration: the efficiency-1 bound'
    """
    kind = basis(label)
    if kind == BOUND or row is None:
        return "no calibration: the efficiency-1 bound"
    runtime = _named(str(row["runtime"]), row)
    if kind == MEASURED:
        return f"{row['hardware']}'s own {runtime} fit ({row['n_rows']} rows)"
    if row["hardware"] != "*":
        return f"{row['hardware']}'s {runtime} fit, borrowed (same architecture)"
    over = re.search(r"median over (.+?) of ", str(row.get("source") or ""))
    if over:
        return f"{row['runtime']}'s profile, borrowed: the median over {over.group(1)}"
    memory = "" if row["memory"] == "*" else f" on {row['memory']} memory"
    return f"{row['runtime']}'s profile, borrowed: fitted on {row['n_rows']} measured rows of other devices{memory}"


def _named(runtime: str, row: Mapping[str, Any]) -> str:
    """The runtime and the version its fit measured, where the row names one."""
    version = row.get("runtime_version")
    return f"{runtime} {version}" if version else runtime


def fit_params(fit_row: Optional[dict[str, Any]]) -> tuple[float, ...]:
    """A calibration row's PARAMS as floats (the efficiency-1 bound without one).

    >>> fit_params(None) == BOUND_PARAMS
    True
    """
    if fit_row is None:
        return BOUND_PARAMS
    return tuple(float(fit_row[k]) for k in PARAMS)


def formats_of(fit_row: Optional[dict[str, Any]]) -> dict[str, float]:
    """The per-format quantized-GEMM efficiencies `lookup` attached to a calibration row."""
    return dict(fit_row.get("quant_formats") or {}) if fit_row else {}


#: The production runtimes' fused attention kernels, each fitted on its own measured table
#: (``kernel_fit``): a prefill step's and a decode step's, ``t_floor + max(F / (P eta_compute) +
#: items t_item, B / (BW eta_mem))`` per call, items the kernel's sequences x KV heads.
ATTENTION_PHASES = ("prefill", "decode")
ATTENTION_PARAMS = ("eta_compute", "eta_mem", "t_floor_us", "t_item_us")
ATTENTION_COLUMNS = tuple(f"attn_{ph}_{p}" for ph in ATTENTION_PHASES for p in ATTENTION_PARAMS)


def attention_of(fit_row: Optional[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """The attention kernels a calibration row fits, by phase ({} for a row without them: its
    attention is priced as any kernel).

    >>> attention_of({"attn_decode_eta_compute": "0.2", "attn_decode_eta_mem": "0.8",
    ...               "attn_decode_t_floor_us": "12", "attn_decode_t_item_us": "0.03"})
    {'decode': {'eta_compute': 0.2, 'eta_mem': 0.8, 't_floor_us': 12.0, 't_item_us': 0.03}}
    """
    out = {}
    for ph in ATTENTION_PHASES:
        vals = [(fit_row or {}).get(f"attn_{ph}_{p}") for p in ATTENTION_PARAMS]
        if all(v not in (None, "") for v in vals):
            out[ph] = {p: float(v) for p, v in zip(ATTENTION_PARAMS, vals)}  # type: ignore[arg-type]
    return out


def attention_efficiency(fit_row: Optional[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """The core's Efficiency fields for a row's attention kernels (seconds)."""
    return {f"attention_{ph}": {"eta_compute": a["eta_compute"], "eta_mem": a["eta_mem"],
                                "t_floor_s": a["t_floor_us"] * 1e-6, "t_item_s": a["t_item_us"] * 1e-6}
            for ph, a in attention_of(fit_row).items()}  # fmt: skip


def efficiency_json(fit_row: Optional[dict[str, Any]], roles: Optional[Mapping[str, str]] = None) -> str:
    """The core's Efficiency for a calibration row (1, 1, 0, 0, 0 without one); `roles` names each
    weight role's format, so that a role stored in a format with its own fit takes that efficiency."""
    from ..models.quant import ROLES

    eta_m, eta_c, tl, ts, eta_moe, eta_cq, _skew, overlap, overlap_moe = fit_params(fit_row)
    tlayer = float(fit_row["t_layer_us"]) if fit_row else 0.0
    formats = formats_of(fit_row)
    by_role = [formats.get((roles or {}).get(r, "")) for r in ROLES]
    return json.dumps({"eta_mem": eta_m, "eta_compute": eta_c, "eta_moe": eta_moe, "eta_compute_quant": eta_cq,
                       "eta_compute_quant_roles": by_role, "overlap": overlap, "overlap_moe": overlap_moe,
                       "t_launch_s": tl * 1e-6, "t_layer_s": tlayer * 1e-6, "t_step_s": ts * 1e-6,
                       "t_request_s": float((fit_row or {}).get("t_request_us") or 0.0) * 1e-6,
                       **attention_efficiency(fit_row)})  # fmt: skip


@functools.lru_cache(maxsize=1)
def shipped_holdout() -> dict[tuple[str, str], dict[str, Any]]:
    """(runtime, phase) -> the shipped held-out percentiles (data/calibration/holdout.csv, and
    kernel_holdout.csv for the production runtimes)."""
    shipped = _data.list_files("data/calibration/")
    return {(r["runtime"], r["phase"]): r for f in (HOLDOUT_FILE, KERNEL_HOLDOUT_FILE) if f in shipped
            for r in csv.DictReader(io.StringIO(_data.read_text(f)))}  # fmt: skip


def memory_technology(memory_type: Optional[str]) -> str:
    """hbm, gddr or lpddr (unified memory included): the class a runtime profile is fitted over."""
    t = (memory_type or "").lower()
    if t.startswith("hbm"):
        return "hbm"
    if t.startswith("gddr"):
        return "gddr"
    if "lpddr" in t or "unified" in t:
        return "lpddr"
    return "other"


@functools.lru_cache(maxsize=1)
def serving_fits() -> dict[tuple[str, str], dict[str, str]]:
    """(runtime, hardware or "*" for the runtime's profile) -> its serving fit row (none shipped: {})."""
    if SERVING_FITS not in _data.list_files("data/calibration/"):
        return {}
    return {(r["runtime"], r["hardware"]): r for r in csv.DictReader(_data.read_text(SERVING_FITS).splitlines())}


def serving_row(runtime: Optional[str], hardware: str, column: str) -> Optional[tuple[dict[str, str], str]]:
    """The serving fit row holding ``column`` for ``runtime`` on ``hardware`` (the device's own,
    else the runtime's profile) and whose fit it is, in words; None where neither holds it."""
    if not runtime:
        return None
    fits = serving_fits()
    rows = (fits.get((runtime, hardware)), fits.get((runtime, "*")))
    row = next((r for r in rows if r and r.get(column)), None)
    if row is None:
        return None
    return row, f"{hardware}'s" if row["hardware"] == hardware else f"{runtime}'s profile over"
