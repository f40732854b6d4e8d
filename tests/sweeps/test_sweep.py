"""Sweeps: grid parsing, kept invalid rows, outputs, determinism across thread counts."""

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest
import ridgeline
from ridgeline import PlanError
from ridgeline.sweeps.sweep import SWEEP_COLUMNS, grid_size, iter_sweep, parse_axis, sweep, write

GRID = {
    "model": ["meta-llama/Llama-3.1-8B", "mistralai/Mixtral-8x7B-v0.1"],
    "hardware": ["H100_SXM", "RTX_4090"],
    "batch": "1..64:x2",
    "prompt": [128, 8192],
    "tp": "1,2,3,8",
}


def test_axes_parse_lists_and_ranges():
    assert parse_axis("batch", "1..64:x2") == [1, 2, 4, 8, 16, 32, 64]
    assert parse_axis("prompt", ["128..512:+128", 4096]) == [128, 256, 384, 512, 4096]
    assert parse_axis("tp", "1,2,4,8") == [1, 2, 4, 8]
    assert parse_axis("model", ["a,b", "c"]) == ["a", "b", "c"]
    for bad in ("0..4", "8..2", "1..64:x1", "many"):
        with pytest.raises(PlanError):
            parse_axis("batch", bad)


def test_sweep_keeps_invalid_rows_with_reasons_and_no_nan():
    df = sweep(GRID)
    assert df.height == 2 * 2 * 7 * 2 * 4
    assert df.columns == list(SWEEP_COLUMNS)
    errs = df.filter(pl.col("error").is_not_null())
    assert errs.filter(pl.col("tp") == 3).height == errs.filter(pl.col("tp") == 3).height > 0
    assert all("TP 3 does not divide" in e for e in errs.filter(pl.col("tp") == 3)["error"])
    ok = df.filter(pl.col("error").is_null())
    assert ok.height > 0 and ok.filter(~pl.col("fits")).height > 0  # not fitting is a result, not an error
    for c in ("ttft_s", "e2e_s", "throughput_tok_s", "memory_gb"):
        assert df[c].is_nan().sum() == 0 and ok[c].null_count() == 0
    # the sweep agrees with single estimates
    row = ok.filter((pl.col("hardware") == "H100_SXM") & (pl.col("tp") == 2) & (pl.col("batch") == 8)).row(
        0, named=True
    )
    e = ridgeline.estimate(row["model"], "H100_SXM", batch=8, prompt=row["prompt"], tp=2, allow_no_fit=True)
    assert row["e2e_s"] == e.e2e_s and row["memory_gb"] == e.memory["total_bytes"] / 1e9


def test_a_runtime_axis_prices_each_plan_as_estimate_does():
    # calibration, routing skew and the runtime's way of running (llama.cpp: ubatches, padded KV,
    # a sliding-window ring of window + n_ubatch, graphs at batch 1) agree with single estimates
    grid = {"model": ["google/gemma-3-4b-it", "openai/gpt-oss-20b"], "hardware": ["GB10", "RTX_4090"],
            "batch": [1, 4], "prompt": [4096], "output": [64],
            "runtime": ["llamacpp-cuda", "trtllm", "none"]}  # fmt: skip
    df = sweep(grid)
    assert df.height == 2 * 2 * 2 * 3 and df.columns == list(SWEEP_COLUMNS)
    for chunked in (False, True):
        # a chunk axis is llama.cpp's n_ubatch (-ub): the prompt step and the ring's extra cells
        rows = sweep({**grid, "chunk": [512, 1024]} if chunked else grid).filter(pl.col("error").is_null())
        assert rows.height >= 2 * 2 * 3
        for row in rows.iter_rows(named=True):
            kw = {"chunk": row["chunk"]} if chunked else {}
            e = ridgeline.estimate(row["model"], row["hardware"], batch=row["batch"], prompt=4096, output=64,
                                   runtime=row["runtime"] or "none", allow_no_fit=True,
                                   **kw)  # fmt: skip
            assert (row["ttft_s"], row["tpot_s"], row["calibration"]) == (e.ttft_s, e.tpot_s, e.calibration), row
            if not chunked:
                assert row["chunk"] == (512 if row["runtime"] == "llamacpp-cuda" else 0)
    labels = set(df["calibration"])
    assert "uncalibrated" in labels and any(x.startswith("calibrated (GB10, llamacpp-cuda") for x in labels)
    with pytest.raises(PlanError, match="runtime"):
        sweep({**grid, "runtime": "vlm"})
    with pytest.raises(PlanError, match="llamacpp-cuda does not run on M2_ULTRA"):
        sweep({**grid, "hardware": ["RTX_4090", "M2_ULTRA"]})


def test_same_bytes_whatever_the_thread_count(tmp_path):
    outs = []
    for threads in (1, 2):
        p = tmp_path / f"t{threads}.parquet"
        write(iter_sweep(GRID, threads=threads, chunk_size=37), str(p))
        c = tmp_path / f"t{threads}.csv"
        write(iter_sweep(GRID, threads=threads, chunk_size=37), str(c))
        outs.append((p.read_bytes(), c.read_bytes()))
    assert outs[0] == outs[1]


def test_streamed_and_lazy_sweeps_hold_the_eager_rows_in_grid_order(tmp_path):
    # the file is written in one pass from parts of 37 plans: same rows, same order, same values
    eager = sweep(GRID)
    p = tmp_path / "parts.parquet"
    assert write(iter_sweep(GRID, chunk_size=37), str(p)) == eager.height
    assert pl.read_parquet(p).equals(eager)
    lazy = sweep(GRID, lazy=True)
    assert isinstance(lazy, pl.LazyFrame) and lazy.collect().equals(eager)
    assert lazy.select("tp", "ttft_s").head(3).collect().equals(eager.select("tp", "ttft_s").head(3))
    lazy.sink_parquet(tmp_path / "lazy.parquet")
    assert pl.read_parquet(tmp_path / "lazy.parquet").equals(eager)
    with pytest.raises(ridgeline.UnknownNameError, match="unknown model"):
        sweep({**GRID, "model": "no/such-model"}, lazy=True)
    with pytest.raises(PlanError, match="lazy: must be True or False"):
        sweep(GRID, lazy="yes")


def test_parquet_and_duckdb_outputs_are_queryable(tmp_path):
    p = tmp_path / "results.parquet"
    n = write(iter_sweep({**GRID, "output": "16..256:x2"}, chunk_size=1000), str(p))
    con = duckdb.connect()
    got = con.execute(f"SELECT count(*), count(error), min(tpot_s) FROM '{p}'").fetchall()[0]
    assert got[0] == n == 2 * 2 * 7 * 2 * 4 * 5 and got[1] > 0 and got[2] > 0
    db = tmp_path / "r.duckdb"
    write(iter_sweep(GRID), f"{db}:plans")
    rows = duckdb.connect(str(db)).execute("SELECT count(*) FROM plans WHERE fits").fetchall()[0][0]
    assert rows > 0


def _cli(*args, cwd=None):
    exe = Path(sys.executable).with_name("ridgeline")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "ridgeline.cli"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, cwd=cwd, env=os.environ.copy())


def test_cli_sweep_with_a_grid_file(tmp_path):
    (tmp_path / "grid.yaml").write_text("model: meta-llama/Llama-3.2-1B\nhardware: [L4, GB10]\nbatch: 1..8:x2\n")
    r = _cli("sweep", "--grid", "grid.yaml", "--tp", "1,2", "--out", "out.csv", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "plans/s" in r.stderr and "peak RSS" in r.stderr
    assert pl.read_csv(tmp_path / "out.csv").height == 2 * 4 * 2
    (tmp_path / "g.json").write_text(json.dumps({"model": "x", "hardware": "H100"}))
    r = _cli("sweep", "--grid", "g.json", cwd=tmp_path)
    assert r.returncode == 3 and "unknown model" in r.stderr
    r = _cli("sweep", "-m", "meta-llama/Llama-3.2-1B", "-H", "L4", "--batch", "0", cwd=tmp_path)
    assert r.returncode == 2 and "batch" in r.stderr
    # --runtime none is the bound; without --runtime the device's default; with it the runtime's calibration
    args = ("sweep", "-m", "meta-llama/Llama-3.2-1B", "-H", "L4", "--out")
    assert _cli(*args, "u.csv", "--runtime", "none", cwd=tmp_path).returncode == 0
    assert _cli(*args, "r.csv", "--runtime", "llamacpp-cuda", "--runtime", "trtllm", cwd=tmp_path).returncode == 0
    u, r = (pl.read_csv(tmp_path / f) for f in ("u.csv", "r.csv"))
    assert u["calibration"].to_list() == ["uncalibrated"] and u["runtime"].null_count() == 1
    assert r["runtime"].to_list() == ["llamacpp-cuda", "trtllm"]
    # llama.cpp's memory-technology profile; TensorRT-LLM's fit for L4's architecture (L40S's, Ada)
    assert r["calibration"][0].startswith("runtime-profile (llamacpp-cuda")
    assert r["calibration"][1].startswith("architecture-profile (ada: L40S's trtllm")
    assert min(r["tpot_s"]) > u["tpot_s"][0]
    r = _cli("sweep", "-m", "meta-llama/Llama-3.2-1B", "-H", "L4", "--runtime", "vlm", cwd=tmp_path)
    assert r.returncode == 2 and "unknown runtime" in r.stderr


def test_cli_sweep_without_out_prints_a_summary_of_the_frame_it_would_write(tmp_path):
    # Llama-3.1-70B in bf16 (141 GB) does not fit one or two H100s: those plans are counted as not fitting
    args = ["-m", "meta-llama/Llama-3.1-8B", "-m", "meta-llama/Llama-3.1-70B", "-H", "H100_SXM", "--batch", "1,64",
            "--tp", "1,2,4,3"]  # fmt: skip
    r = _cli("sweep", *args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    df = ridgeline.sweep({"model": args[1:4:2], "hardware": "H100_SXM", "batch": [1, 64], "tp": [1, 2, 4, 3]})
    priced = df.filter(pl.col("error").is_null())
    fit = priced.filter(pl.col("fits"))
    lines = r.stdout.splitlines()
    assert lines[0] == (f"{df.height} plans: {priced.height} priced ({fit.height} fit in memory, "
                        f"{priced.height - fit.height} do not), {df.height - priced.height} refused")  # fmt: skip
    # TP 3 divides neither model's heads (32 and 64): one reason each, two plans each
    assert sorted(lines[1:3]) == ["  refused x2: tp: TP 3 does not divide the 32 attention heads",
                                  "  refused x2: tp: TP 3 does not divide the 64 attention heads"]  # fmt: skip
    assert lines[3] == "varying: model (2), tp (4), batch (2)"
    # the best plan by throughput heads its table, with the varying columns and its numbers rounded
    i = lines.index(f"highest throughput (of {fit.height} that fit)")
    best = fit.sort("throughput_tok_s", descending=True).row(0, named=True)
    cells = lines[i + 2].split()
    assert cells[:3] == [best["model"], str(best["tp"]), str(best["batch"])]
    assert float(cells[7].replace(",", "")) == pytest.approx(best["throughput_tok_s"], rel=5e-3)
    j = lines.index("lowest latency (TPOT, then TTFT)")
    fastest = fit.sort(["tpot_s", "ttft_s"]).row(0, named=True)
    assert float(lines[j + 2].split()[5]) == pytest.approx(fastest["tpot_s"] * 1e3, rel=5e-3)
    assert len(lines[i + 1 : j - 1]) == 6  # a header and the top five


def test_top_level_functions_are_the_callables():
    assert callable(ridgeline.sweep) and callable(ridgeline.simulate) and callable(ridgeline.estimate)
    assert ridgeline.sweep is sweep


def test_speculation_is_an_axis_whose_plans_are_estimates_and_a_plan_without_it_is_swept_once():
    grid = {"model": "deepseek-ai/DeepSeek-V3", "hardware": "H200", "tp": 8, "batch": [1, 16],
            "speculative": ["none", "mtp"], "draft_tokens": [1, 2]}  # fmt: skip
    df = sweep(grid)
    # none once, mtp at depths 1 and 2: 3 combinations of 2 batches
    assert df.height == grid_size(grid) == 6 and df.columns == list(SWEEP_COLUMNS)
    for r in df.iter_rows(named=True):
        kw = {} if r["speculative"] is None else {"speculative": "mtp", "draft_tokens": r["draft_tokens"]}
        e = ridgeline.estimate("deepseek-ai/DeepSeek-V3", "H200", tp=8, batch=r["batch"], **kw)
        assert r["tpot_s"] == pytest.approx(e.tpot_s, rel=1e-12)
        if kw:
            assert r["acceptance_length"] == e.plan["speculation"]["acceptance_length"]
            assert "borrowed from deepseek-ai/DeepSeek-R1" in r["acceptance"]
        else:
            assert r["draft_tokens"] is None and r["acceptance_length"] is None
    with pytest.raises(PlanError, match="has no MTP layers"):
        sweep({"model": "meta-llama/Llama-3.1-8B", "hardware": "H100_SXM", "speculative": "mtp", "draft_tokens": 2})
