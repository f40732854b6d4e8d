"""Importers for the production runtimes' own measured kernel tables (AIConfigurator's
layout, ``data/benchmarks/aic/<system>/<op family>/<framework>/<version>/*.parquet``).

The tables are read as they are (AIC's columns and units); each row gets the catalog
device its ``device`` column names (``benchmarks.identify_device``: hardware_map.csv, else
the catalog's names) and the
framework and version its path names. They are calibration inputs: the wheel does not
carry them, so the functions here take the folder to read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .benchmarks import identify_device
from .errors import PlanError

# Where a source checkout keeps the tables (relative to the repository root).
KERNEL_DIR = "data/benchmarks/aic"
# Collective names as AIC writes them -> the engine's (rust/src/collectives.rs).
COMM_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
            "alltoall": "all_to_all"}  # fmt: skip
# Bytes per element of the dtypes the comm tables use (message_size is an element count).
_DTYPE_BYTES = {"half": 2, "float16": 2, "bfloat16": 2, "int8": 1, "fp8": 1}


def _tables(root: Path, family: str, pattern: str) -> list[Path]:
    if not root.is_dir():
        raise PlanError(
            f"kernel tables: {str(root)!r} is not a folder; pass the folder that holds "
            f"<system>/{family}/<framework>/<version>/{pattern} (a source checkout has {KERNEL_DIR})"
        )
    return sorted(root.glob(f"*/{family}/*/*/{pattern}"))


def comm_rows(root: str | os.PathLike[str] = KERNEL_DIR) -> list[dict[str, Any]]:
    """Every measured collective in the NCCL and custom all-reduce tables under ``root``.

    Each row: ``hardware`` (catalog name), ``file_hardware`` (AIC's device string),
    ``library`` (nccl, or the framework whose custom all-reduce it is), ``version``, ``op``
    (the engine's name), ``ranks``, ``size_bytes``, ``time_s``, ``file`` and ``excluded``
    (None, or why a fit leaves the row out: eager custom all-reduce rows, since the runtimes
    replay CUDA graphs; rows of a device the catalog does not map).
    """
    import polars as pl

    base = Path(root)
    files = _tables(base, "comm", "nccl_perf.parquet") + _tables(base, "comm", "custom_allreduce_perf.parquet")
    if not files:
        raise PlanError(f"kernel tables: no comm tables under {str(base)!r}")
    mapped: dict[str, tuple[Any, ...]] = {}
    out: list[dict[str, Any]] = []
    for f in files:
        rel = f.relative_to(base).as_posix()
        framework, version = f.parent.parent.name, f.parent.name
        d = pl.read_parquet(f)
        dtype_col = "nccl_dtype" if "nccl_dtype" in d.columns else "allreduce_dtype"
        variant = next((c for c in ("backend", "implementation") if c in d.columns), None)
        for i, r in enumerate(d.iter_rows(named=True)):
            op = COMM_OPS.get(r["op_name"])
            width = _DTYPE_BYTES.get(r[dtype_col])
            if r["device"] not in mapped:
                mapped[r["device"]] = identify_device(r["device"])
            hw, _, unnamed = mapped[r["device"]]
            why = None
            if op is None or width is None:
                why = f"op {r['op_name']!r} / dtype {r[dtype_col]!r} not read"
            elif hw is None:
                why = f"device {r['device']!r}: {unnamed}"
            elif variant and "eager" in str(r[variant]):
                why = "eager launch (the runtimes replay CUDA graphs; the graph row of this size is fitted)"
            out.append({
                "id": f"{rel}:{i}", "file": rel, "hardware": hw, "file_hardware": r["device"],
                "library": framework, "version": version, "op": op, "ranks": int(r["num_gpus"]),
                "size_bytes": int(r["message_size"]) * (width or 0), "time_s": float(r["latency"]) * 1e-3,
                "dtype": r[dtype_col], "excluded": why,
            })  # fmt: skip
    return out


# AIC GEMM dtypes -> ridgeline weight formats (None: the activation dtype, bf16)
GEMM_FORMATS = {"bfloat16": None, "fp8": "fp8", "fp8_block": "fp8_block128", "nvfp4": "nvfp4"}


def gemm_tables(root: str | os.PathLike[str] = KERNEL_DIR) -> list[dict[str, Any]]:
    """The GEMM tables under ``root``, one entry per (table, dtype): ``hardware``, ``runtime``
    (the framework), ``version``, ``format`` (None for bf16), ``file``, and the arrays ``m``,
    ``n``, ``k`` and ``latency_ms`` (AIC's unit: ms per call under CUDA-graph replay). Dtypes
    ridgeline has no format for (A100's int8_wo, int4_wo, sq) are left out."""
    import numpy as np
    import polars as pl

    base = Path(root)
    out = []
    for f in _tables(base, "gemm", "gemm_perf.parquet"):
        d = pl.read_parquet(f)
        devices = d["device"].unique().to_list()
        hw, _, unnamed = identify_device(devices[0]) if len(devices) == 1 else (None, None, "several devices")
        if hw is None:
            raise PlanError(f"kernel tables: {f}: device {devices} does not name one catalog device ({unnamed})")
        for dtype in sorted(d["gemm_dtype"].unique().to_list()):
            if dtype not in GEMM_FORMATS:
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


def attention_tables(root: str | os.PathLike[str] = KERNEL_DIR, every_kernel: bool = False) -> list[dict[str, Any]]:
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

    base = Path(root)
    out = []
    for name, phase in ATTENTION_TABLES.items():
        for f in _tables(base, "attention", name):
            d = pl.read_parquet(f)
            devices = d["device"].unique().to_list()
            hw = identify_device(devices[0])[0] if len(devices) == 1 else None
            if hw is None:
                continue  # a device the catalog does not hold (Intel B60 under vLLM XPU)
            counts = dict(d.group_by("kernel_source").len().iter_rows())
            chosen = sorted(counts) if every_kernel else [max(sorted(counts), key=lambda k: counts[k])]
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
