"""Speed of the estimate paths (opt-in; release build):

    pip install '.[test]' && python -m pytest benches/ --benchmark-only

Reports one warm ``ridgeline.estimate`` call through the Python API, and
10,000 plans (prefill + every decode step) evaluated in one call into Rust
on one thread and on all cores.
"""

import numpy as np
import pytest
import ridgeline
from ridgeline import _core
from ridgeline.catalog.store import default_catalog
from ridgeline.engine.estimate import prepare
from ridgeline.models.config import Model

LLAMA = "meta-llama/Llama-3.1-8B"


def test_estimate_python_api_warm(benchmark):
    ridgeline.estimate(LLAMA, "H100_SXM")  # warm the caches
    e = benchmark(ridgeline.estimate, LLAMA, "H100_SXM", breakdown=False)
    assert e.fits


def test_estimate_python_api_warm_with_breakdown(benchmark):
    ridgeline.estimate(LLAMA, "H100_SXM")
    benchmark(ridgeline.estimate, LLAMA, "H100_SXM")


def _grid(n=10_000, seed=0):
    rng = np.random.default_rng(seed)
    batch = rng.choice([1, 2, 4, 8, 16, 32, 64, 128], n).astype(np.int64)
    prompt = rng.choice([128, 512, 1024, 2048, 4096, 8192], n).astype(np.int64)
    output = np.full(n, 256, dtype=np.int64)
    tp = rng.choice([1, 2, 4, 8], n).astype(np.int64)
    return batch, prompt, output, tp


@pytest.mark.parametrize("threads", [1, 0], ids=["1-thread", "all-cores"])
@pytest.mark.parametrize("model", [LLAMA, "mistralai/Mixtral-8x7B-v0.1"])
def test_10k_plans_one_rust_call(benchmark, threads, model):
    cat = default_catalog()
    m = Model.from_config(model)
    dev = cat.get("H100_SXM")
    prepared = prepare(m, dev, runtime="none").core  # the plan as written, at the bound
    grid = _grid()
    out = benchmark(_core.estimate_many, prepared, *grid, threads)
    assert np.isfinite(out["e2e_s"]).all()
    benchmark.extra_info["plans_per_s"] = len(grid[0]) / benchmark.stats.stats.mean
