"""Kernel tables in AIConfigurator's layout read as their files say (issue 42): the device from the
``device`` column or, without one, from the system folder; device names as NVIDIA writes them
("NVIDIA B300 SXM6 AC"); every row counted, priced or left out with why; a damaged table a
typed error naming it, never an internal one."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from cli_in_process import run_main
from conftest import REPO
from ridgeline.catalog.benchmarks import identify_device, trtllm_precision

REPO = REPO
H100 = REPO / "data" / "benchmarks" / "aic" / "h100_sxm"


def _put(root: Path, rel: str, df: pl.DataFrame) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    df.write_parquet(p)


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """A folder of tables cut from the measured H100 ones: a B300 as NVIDIA names it, tables
    without a device column, cells that are not numbers, and a family ridgeline does not price."""
    root = tmp_path_factory.mktemp("aic")
    nccl = pl.read_parquet(next(H100.glob("comm/nccl/*/nccl_perf.parquet")))
    gemm = pl.read_parquet(next(H100.glob("gemm/vllm/*/gemm_perf.parquet"))).head(300)
    _put(root, "b300_sxm/comm/nccl/2.29.2/nccl_perf.parquet", nccl.with_columns(device=pl.lit("NVIDIA B300 SXM6 AC")))
    _put(root, "h100_sxm/comm/nccl/2.29.2/nccl_perf.parquet", nccl.drop("device"))
    i = pl.int_range(pl.len())
    bad = pl.when(i == 0).then(pl.lit("abc")).when(i == 1).then(None).when(i == 2).then(pl.lit("0"))
    damaged = gemm.with_columns(latency=bad.otherwise(pl.col("latency").cast(pl.String))).drop("device")
    _put(root, "h100_sxm/gemm/vllm/0.24.0/gemm_perf.parquet", damaged)
    _put(root, "b300_sxm/gemm/vllm/0.24.0/gemm_perf.parquet", gemm.with_columns(device=pl.lit("NVIDIA B300 SXM6 AC")))
    _put(root, "h100_sxm/moe/vllm/0.24.0/moe_perf.parquet", pl.DataFrame({"latency": [1.0, 2.0, 3.0]}))
    return root


def _heights(root: Path) -> int:
    return sum(pl.read_parquet(p).height for p in root.glob("*/*/*/*/*.parquet"))


def test_names_and_labels_as_vendors_write_them():
    assert identify_device("NVIDIA B300 SXM6 AC")[0] == "B300"
    assert identify_device("NVIDIA B300 SXM6 LC")[0] == "B300"
    assert identify_device("b200_sxm")[0] == "B200"  # an AIConfigurator system folder
    # TensorRT-LLM's perf overview: 328 of 471 rows of one file were read as bf16
    assert trtllm_precision("FP4 (ModelOpt checkpoint)") == ("nvfp4", None)
    assert trtllm_precision("FP8 (ModelOpt checkpoint)") == ("fp8", None)
    fmt, why = trtllm_precision("INT4 AWQ")
    assert fmt is None and "not a weight format ridgeline reads" in why


def test_validate_rows_prices_kernel_tables_and_counts_every_row(tables):
    code, out, err = run_main("validate", "--rows", str(tables), "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["rows"] == _heights(tables)  # every row: priced, refused or left out with why
    left = {x["reason"]: x["rows"] for x in rep["left_out"]}
    assert left["m, n, k, latency: a cell that is not a finite positive number"] == 3
    assert left["moe tables are not priced by ridgeline yet"] == 3
    got = {(t["hardware"], t["kernel"]): t for t in rep["tables"]}
    # the device from NVIDIA's name, and from the folder where the table has no device column
    for key in (("B300", "GEMM bf16"), ("H100_SXM", "GEMM bf16"), ("H100_SXM", "all_reduce (busBW)")):
        assert key in got, key
    h100 = got[("H100_SXM", "GEMM bf16")]
    assert h100["calibration"].startswith("calibrated (H100_SXM, vllm") and 0.5 < h100["median_obs_over_pred"] < 2
    assert got[("B300", "GEMM bf16")]["calibration"].startswith("runtime-profile (vllm")  # said, not hidden
    code, out, _ = run_main("validate", "--rows", str(tables))
    assert code == 0 and out.startswith(f"{rep['rows']:,} rows: {rep['priced']:,} priced")
    # one table inside the layout reads the same
    one = tables / "h100_sxm/gemm/vllm/0.24.0/gemm_perf.parquet"
    code, out, _ = run_main("validate", "--rows", str(one), "--json")
    assert code == 0 and json.loads(out)["rows"] == pl.read_parquet(one).height


def test_validate_comm_reads_tables_without_a_device_column_and_says_why_rows_are_left_out(tables):
    code, out, err = run_main("validate", "--comm", "--kernels", str(tables), "--json", "--per-row")
    assert code in (0, 1), err  # 1: a bound violation, never an internal error (70)
    rep = json.loads(out)
    rows = [r for r in rep["per_row"] if r["id"].startswith(("b300_sxm", "h100_sxm"))]
    nccl = pl.read_parquet(next(H100.glob("comm/nccl/*/nccl_perf.parquet")))
    assert len(rows) + rep["kernel_rows_left_out"] == 2 * nccl.height
    assert all("eager" not in why for why in rep["kernel_rows_left_out_by_reason"])


@pytest.mark.parametrize("damage", ["no latency column", "not parquet"])
def test_a_damaged_table_is_a_typed_error_naming_it(tmp_path, damage):
    p = tmp_path / "h100_sxm/gemm/vllm/0.24.0/gemm_perf.parquet"
    p.parent.mkdir(parents=True)
    if damage == "not parquet":
        p.write_bytes(b"\x00\x01 not a table")
    else:
        pl.read_parquet(next(H100.glob("gemm/vllm/*/gemm_perf.parquet"))).head(5).drop("latency").write_parquet(p)
    for argv in (["validate", "--rows", str(tmp_path)], ["validate", "--rows", str(p)]):
        code, _, err = run_main(*argv)
        assert code == 2 and "gemm_perf.parquet" in err and err.count("\n") == 1, err
        assert ("latency" in err) if damage == "no latency column" else ("not a readable Parquet table" in err)
