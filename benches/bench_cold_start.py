"""Wall time of a cold command-line estimate (opt-in; release build):

    pip install '.[test]' && python -m pytest benches/bench_cold_start.py --benchmark-only

One ``ridgeline estimate`` in a fresh process, first with an empty catalog cache (the first run
after install), then with the cache an earlier run left. tests/test_cold_start.py checks what
such a run imports and writes; this measures how long it takes.
"""

import os
import subprocess
import sys
import tempfile

ARGV = [sys.executable, "-m", "ridgeline.cli", "estimate", "-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM"]


def _estimate(cache: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RIDGELINE_HARDWARE", "RIDGELINE_CONSTANTS")}
    subprocess.run(ARGV, env={**env, "RIDGELINE_CACHE_DIR": cache}, check=True, capture_output=True)


def test_cold_estimate_empty_cache(benchmark, tmp_path):
    benchmark.pedantic(lambda: _estimate(tempfile.mkdtemp(dir=tmp_path)), rounds=10, iterations=1)


def test_cold_estimate_warm_cache(benchmark, tmp_path):
    _estimate(str(tmp_path))
    benchmark.pedantic(lambda: _estimate(str(tmp_path)), rounds=10, iterations=1)
