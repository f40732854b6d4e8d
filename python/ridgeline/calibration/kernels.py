"""Importers for the production runtimes' own measured kernel tables (AIConfigurator's
layout, ``data/benchmarks/aic/<system>/<op family>/<framework>/<version>/*.parquet``).

The tables are read as they are (AIC's columns and units); each row gets the catalog
device its ``device`` column names (``benchmarks.identify_device``: hardware_map.csv, else
the catalog's names) and the
framework and version its path names. They are calibration inputs: the wheel does not
carry them, so the functions here take the folder to read.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Optional

from ..catalog.benchmarks import identify_device
from ..errors import PlanError

# Where a source checkout keeps the tables (relative to the repository root).
KERNEL_DIR = "data/benchmarks/aic"
# Collective names as AIC writes them -> the engine's (rust/src/collectives.rs).
COMM_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
            "alltoall": "all_to_all"}  # fmt: skip
# Bytes per element of the dtypes the comm tables use (message_size is an element count).
_DTYPE_BYTES = {"half": 2, "float16": 2, "bfloat16": 2, "int8": 1, "fp8": 1}


def _tables(root: Path, family: str, pattern: str) -> list[Path]:
    """The ``family`` tables named ``pattern`` under ``root``: a folder in AIConfigurator's layout
    (``<system>/<family>/<framework>/<version>/<table>``), or one table inside such a folder."""
    if root.is_file():
        return [root.resolve()] if root.name == pattern and layout_of(root)[1] == family else []
    if not root.is_dir():
        raise PlanError(
            f"kernel tables: {str(root)!r} is not a folder; pass the folder that holds "
            f"<system>/{family}/<framework>/<version>/{pattern} (a source checkout has {KERNEL_DIR})"
        )
    return sorted(root.glob(f"*/{family}/*/*/{pattern}"))


def layout_of(table: Path) -> tuple[str, str, str, str]:
    """A table's (system, family, framework, version) from its path, AIConfigurator's layout
    ``<system>/<family>/<framework>/<version>/<table>.parquet``: the framework names the runtime
    whose calibration prices it, the system the device where the table has no device column."""
    parts = table.resolve().parts
    if len(parts) < 5:
        raise PlanError(
            f"kernel tables: {str(table)!r} is not inside AIConfigurator's layout "
            "<system>/<family>/<framework>/<version>/<table>.parquet (the framework names the runtime that prices it)"
        )
    system, family, framework, version = parts[-5:-1]
    return system, family, framework, version


def table_base(root: Path) -> Path:
    """The folder table paths are relative to: ``root``, or for one table the folder above its system."""
    return root.resolve().parents[4] if root.is_file() else root


def table_files(root: Path) -> list[Path]:
    """Every Parquet table under ``root`` in AIConfigurator's layout, of any family (or ``root``
    itself, one table), resolved."""
    if root.is_file():
        return [root.resolve()]
    return sorted(p.resolve() for p in root.glob("*/*/*/*/*.parquet"))


def comm_rows(root: str | os.PathLike[str] = KERNEL_DIR) -> list[dict[str, Any]]:
    """Every measured collective in the NCCL and custom all-reduce tables under ``root``.

    Each row: ``hardware`` (catalog name), ``file_hardware`` (AIC's device string),
    ``library`` (nccl, or the framework whose custom all-reduce it is), ``version``, ``op``
    (the engine's name), ``ranks``, ``size_bytes``, ``time_s``, ``file`` and ``excluded``
    (None, or why a fit leaves the row out: eager custom all-reduce rows, since the runtimes
    replay CUDA graphs; rows of a device the catalog does not map).
    """
    files = _tables(Path(root), "comm", "nccl_perf.parquet") + _tables(
        Path(root), "comm", "custom_allreduce_perf.parquet"
    )
    base = table_base(Path(root))
    if not files:
        raise PlanError(f"kernel tables: no comm tables under {str(base)!r}")
    mapped: dict[str, tuple[Any, ...]] = {}
    out: list[dict[str, Any]] = []
    for f in files:
        rel = f.relative_to(base).as_posix()
        framework, version = f.parent.parent.name, f.parent.name
        d = read_table(f, rel)
        dtype_col = "nccl_dtype" if "nccl_dtype" in d.columns else "allreduce_dtype"
        _require(d, rel, ("op_name", "num_gpus", "message_size", "latency", dtype_col))
        variant = next((c for c in ("backend", "implementation") if c in d.columns), None)
        for i, r in enumerate(d.iter_rows(named=True)):
            device = table_device(r, f, base)
            op = COMM_OPS.get(r["op_name"])
            width = _DTYPE_BYTES.get(r[dtype_col])
            if device not in mapped:
                mapped[device] = identify_device(device)
            hw, _, unnamed = mapped[device]
            ranks, elements, latency_ms = (_positive(r[c]) for c in ("num_gpus", "message_size", "latency"))
            why = None
            if op is None or width is None:
                why = f"op {r['op_name']!r} / dtype {r[dtype_col]!r} not read"
            elif hw is None:
                why = f"device {device!r}: {unnamed}"
            elif ranks is None or elements is None or latency_ms is None:
                bad = next(c for c, v in (("num_gpus", ranks), ("message_size", elements), ("latency", latency_ms))
                           if v is None)  # fmt: skip
                why = f"{bad} {r[bad]!r} is not a positive number"
            elif variant and "eager" in str(r[variant]):
                why = "eager launch (the runtimes replay CUDA graphs; the graph row of this size is fitted)"
            out.append({
                "id": f"{rel}:{i}", "file": rel, "hardware": hw, "file_hardware": device,
                "library": framework, "version": version, "op": op, "ranks": int(ranks or 0),
                "size_bytes": int(elements or 0) * (width or 0), "time_s": (latency_ms or 0.0) * 1e-3,
                "dtype": r[dtype_col], "excluded": why,
            })  # fmt: skip
    return out


def read_table(f: Path, rel: str) -> Any:
    """A kernel table as a Polars frame, or a PlanError naming it where it is not Parquet."""
    import polars as pl

    try:
        return pl.read_parquet(f)
    except (OSError, pl.exceptions.PolarsError) as e:
        raise _unreadable(rel, e) from None


def table_height(f: Path, rel: str) -> int:
    """A kernel table's row count, read from its metadata (the table is not loaded)."""
    import polars as pl

    try:
        return int(pl.scan_parquet(f).select(pl.len()).collect().item())
    except (OSError, pl.exceptions.PolarsError) as e:
        raise _unreadable(rel, e) from None


def _unreadable(rel: str, e: Exception) -> PlanError:
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return PlanError(f"kernel tables: {rel}: not a readable Parquet table ({first})")


def _require(d: Any, rel: str, columns: tuple[str, ...]) -> None:
    missing = [c for c in columns if c not in d.columns]
    if missing:
        raise PlanError(
            f"kernel tables: {rel} has no {', '.join(missing)} column(s) (AIConfigurator's layout; it has "
            f"{', '.join(d.columns)})"
        )


def _numbers(d: Any, rel: str, numeric: tuple[str, ...], text: tuple[str, ...],
             skipped: Optional[list[dict[str, Any]]]) -> Any:  # fmt: skip
    """A kernel table's rows whose ``numeric`` columns are finite positive numbers (a size, a count,
    a latency; ``step``, a KV length, may be 0); the others are left out, counted in ``skipped``
    with why. A table lacking a column is a PlanError naming it."""
    import polars as pl

    _require(d, rel, (*numeric, *text))
    d = d.with_columns(pl.col(c).cast(pl.Float64, strict=False) for c in numeric)
    ok = pl.all_horizontal(
        pl.col(c).is_not_null() & pl.col(c).is_finite() & (pl.col(c) >= 0 if c == "step" else pl.col(c) > 0)
        for c in numeric
    )
    bad = d.filter(~ok)
    if bad.height and skipped is not None:
        skipped.append({"file": rel, "rows": bad.height,
                        "reason": f"{', '.join(numeric)}: a cell that is not a finite positive number"})  # fmt: skip
    return d.filter(ok)


def _positive(v: Any) -> Optional[float]:
    """A finite number > 0 (a table's count, size or latency), else None: text, null, NaN, 0."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) and x > 0 else None


def _table_hardware(d: Any, f: Path, base: Path) -> tuple[Optional[str], str]:
    """The catalog device a whole table was measured on (its ``device`` column, else its system
    folder), and why not where it names none or several."""
    devices = d["device"].unique().to_list() if "device" in d.columns else [f.relative_to(base).parts[0]]
    hw, _, unnamed = identify_device(devices[0]) if len(devices) == 1 else (None, None, "several devices")
    return hw, f"device {', '.join(map(str, devices))} does not name one catalog device ({unnamed})"


def table_device(row: dict[str, Any], f: Path, base: Path) -> str:
    """The device a kernel table's row was measured on: its ``device`` column, else the system
    folder the table sits under (``<system>/<family>/<framework>/<version>/``; AIConfigurator
    names the folder for the system, data/benchmarks/hardware_map.csv maps the ones a catalog
    name does not)."""
    dev = row.get("device")
    return str(dev) if dev not in (None, "") else f.relative_to(base).parts[0]


# AIC GEMM dtypes -> ridgeline weight formats (None: the activation dtype, bf16)
GEMM_FORMATS = {"bfloat16": None, "fp8": "fp8", "fp8_block": "fp8_block128", "nvfp4": "nvfp4"}


def gemm_tables(
    root: str | os.PathLike[str] = KERNEL_DIR, skipped: Optional[list[dict[str, Any]]] = None
) -> list[dict[str, Any]]:
    """The GEMM tables under ``root``, one entry per (table, dtype): ``hardware``, ``runtime``
    (the framework), ``version``, ``format`` (None for bf16), ``file``, and the arrays ``m``,
    ``n``, ``k`` and ``latency_ms`` (AIC's unit: ms per call under CUDA-graph replay). Dtypes
    ridgeline has no format for (A100's int8_wo, int4_wo, sq) are left out."""
    import numpy as np
    import polars as pl

    base = table_base(Path(root))
    out = []
    for f in _tables(Path(root), "gemm", "gemm_perf.parquet"):
        rel = f.relative_to(base).as_posix()
        d = _numbers(read_table(f, rel), rel, ("m", "n", "k", "latency"), ("gemm_dtype",), skipped)
        hw, why = _table_hardware(d, f, base)
        if hw is None:
            if skipped is None:
                raise PlanError(f"kernel tables: {f}: {why}")
            skipped.append({"file": rel, "rows": d.height, "reason": why})
            continue
        for dtype in sorted(d["gemm_dtype"].unique().to_list()):
            if dtype not in GEMM_FORMATS:
                if skipped is not None:
                    n = d.filter(pl.col("gemm_dtype") == dtype).height
                    skipped.append({"file": rel, "rows": n, "reason": f"gemm_dtype {dtype!r}: no weight format"})
                continue
            g = d.filter(pl.col("gemm_dtype") == dtype).sort("m", "n", "k", "latency")
            out.append({
                "hardware": hw, "runtime": f.parent.parent.name, "version": f.parent.name,
                "format": GEMM_FORMATS[dtype], "file": f.relative_to(base).as_posix(),
                **{c: g[c].to_numpy().astype(np.float64) for c in ("m", "n", "k")},
                "latency_ms": g["latency"].to_numpy().astype(np.float64),
            })  # fmt: skip
    return out


# AIC's KV-cache dtypes -> bytes per element
_KV_BYTES = {"bfloat16": 2.0, "float16": 2.0, "fp8": 1.0}
# AIC attention table -> the engine's attention kernel it measures (graph::AttnPhase)
ATTENTION_TABLES = {"context_attention_perf.parquet": "prefill", "generation_attention_perf.parquet": "decode"}


def attention_tables(
    root: str | os.PathLike[str] = KERNEL_DIR, every_kernel: bool = False,
    skipped: Optional[list[dict[str, Any]]] = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """The context (prefill) and generation (decode) attention tables under ``root``, one entry per
    table: ``hardware``, ``runtime``, ``version``, ``phase`` (prefill or decode), ``kernel`` (the
    kernel_source the table measures most: the runtime's default kernel on the device; AIC times
    its alternatives on fewer shapes, and those rows are left out), ``file``, ``rows`` and
    ``kernels`` (rows per kernel_source), and the arrays ``batch``, ``isl`` (new tokens per
    sequence), ``step`` (cached tokens: the KV length a decode reads), ``heads``, ``kv_heads``,
    ``head_dim``, ``window`` (0: none), ``kv_bytes`` (per element) and ``latency_ms`` (AIC's unit:
    ms per call under CUDA-graph replay). Rows with a KV dtype ridgeline does not read are left out.
    With ``every_kernel``, one entry per (table, kernel_source) instead."""
    import numpy as np
    import polars as pl

    base = table_base(Path(root))
    out = []
    for name, phase in ATTENTION_TABLES.items():
        for f in _tables(Path(root), "attention", name):
            rel = f.relative_to(base).as_posix()
            cols = ("batch_size", "isl", "step", "num_heads", "num_key_value_heads", "head_dim", "latency")
            d = _numbers(read_table(f, rel), rel, cols, ("kernel_source", "kv_cache_dtype"), skipped)
            hw, why = _table_hardware(d, f, base)
            if hw is None:  # a device the catalog does not hold (Intel B60 under vLLM XPU): said when asked
                if skipped is not None:
                    skipped.append({"file": rel, "rows": d.height, "reason": why})
                continue
            unread = d.filter(~pl.col("kv_cache_dtype").is_in(list(_KV_BYTES)))
            if skipped is not None and unread.height:
                kinds = ", ".join(sorted(map(str, unread["kv_cache_dtype"].unique().to_list())))
                skipped.append({"file": rel, "rows": unread.height, "reason": f"kv_cache_dtype {kinds} not read"})
            counts = dict(d.group_by("kernel_source").len().iter_rows())
            chosen = sorted(counts) if every_kernel else [max(sorted(counts), key=lambda k: counts[k])]
            if skipped is not None and not every_kernel:
                others = d.filter(
                    ~pl.col("kernel_source").is_in(chosen) & pl.col("kv_cache_dtype").is_in(list(_KV_BYTES))
                )
                if others.height:
                    skipped.append({"file": rel, "rows": others.height,
                                    "reason": f"kernels other than the runtime's default {chosen[0]}"})  # fmt: skip
            for kernel in chosen:
                g = d.filter(pl.col("kernel_source") == kernel)
                g = g.filter(pl.col("kv_cache_dtype").is_in(list(_KV_BYTES)))
                window = g["window_size"] if "window_size" in g.columns else pl.Series([0] * len(g))
                out.append({
                    "hardware": hw, "runtime": f.parent.parent.name, "version": f.parent.name, "phase": phase,
                    "kernel": kernel, "kernels": counts, "file": f.relative_to(base).as_posix(), "rows": len(g),
                    **{k: g[c].to_numpy().astype(np.float64) for k, c in (
                        ("batch", "batch_size"), ("isl", "isl"), ("step", "step"), ("heads", "num_heads"),
                        ("kv_heads", "num_key_value_heads"), ("head_dim", "head_dim"))},
                    "window": window.to_numpy().astype(np.float64),
                    "kv_bytes": np.array([_KV_BYTES[x] for x in g["kv_cache_dtype"].to_list()]),
                    "latency_ms": g["latency"].to_numpy().astype(np.float64),
                })  # fmt: skip
    return out
