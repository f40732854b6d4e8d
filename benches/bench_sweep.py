"""Sweep throughput, the 1,000,000-plan Parquet sweep and CLI cold start (opt-in):

    python -m pytest benches/bench_sweep.py --benchmark-only -s

Plans are prefill + the full decode of 256 tokens (summed exactly in closed form).
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from ridgeline import _core
from ridgeline.catalog.store import default_catalog
from ridgeline.engine.estimate import prepare
from ridgeline.models.config import Model


def _axes(n_batch=1000, n_tp=4):
    one = np.array([1], dtype=np.int64)
    return (
        np.array([1, 2, 4, 8][:n_tp], dtype=np.int64), one, one, one, np.array([0], dtype=np.int64),
        np.arange(1, n_batch + 1, dtype=np.int64), np.array([1024], dtype=np.int64), np.array([256], dtype=np.int64),
    )  # fmt: skip


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("model", ["meta-llama/Llama-3.1-8B", "mistralai/Mixtral-8x7B-v0.1"])
def test_sweep_plans_per_second(benchmark, model, threads):
    cat = default_catalog()
    m, dev = Model.from_config(model), cat.get("H100_SXM")
    prepared = prepare(m, dev, runtime="none").core  # the plan as written, at the bound
    axes = _axes()
    n = int(np.prod([len(a) for a in axes]))
    out = benchmark(_core.sweep_grid, prepared, *axes, threads)
    assert len(out["e2e_s"]) == n
    benchmark.extra_info["plans_per_s"] = n / benchmark.stats.stats.mean
    print(f"\n{model} threads={threads}: {n / benchmark.stats.stats.mean:,.0f} plans/s")


def _ridgeline(*args):
    exe = Path(sys.executable).with_name("ridgeline")
    return [str(exe), *args] if exe.exists() else [sys.executable, "-m", "ridgeline.cli", *args]


def test_million_plan_sweep_to_parquet(tmp_path):
    out = tmp_path / "results.parquet"
    cmd = _ridgeline(
        "sweep", "-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM", "--batch", "1..1000",
        "--prompt", "1024..1996:+108", "--output", "256..2656:+100", "--tp", "1,2,4,8", "--out", str(out),
    )  # fmt: skip
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr
    print(f"\n{r.stderr.strip()} (wall {dt:.1f} s)")
    import duckdb

    n = duckdb.connect().execute(f"SELECT count(*) FROM '{out}'").fetchall()[0][0]
    assert n == 1000 * 10 * 25 * 4


def test_cli_cold_start_to_first_line():
    env = {**os.environ}
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        p = subprocess.Popen(
            _ridgeline("estimate", "-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM"),
            stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        assert p.stdout is not None
        p.stdout.readline()
        times.append(time.perf_counter() - t0)
        p.communicate()
    print(f"\nCLI cold start to the first line: median {np.median(times) * 1e3:.0f} ms, min {min(times) * 1e3:.0f} ms")
