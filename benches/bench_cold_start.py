"""Wall time of a cold command-line estimate (opt-in; release build):

    pip install '.[test]' && python -m pytest benches/bench_cold_start.py --benchmark-only

One ``ridgeline estimate`` in a fresh process, first with an empty catalog cache (the first run
after install), then with the cache an earlier run left. tests/test_cold_start.py checks what
such a run imports and writes; this measures how long it takes.

Side by side with another checkout of the package (an earlier commit, built there), alternating
runs so that both see the same machine:

    python benches/bench_cold_start.py --baseline /path/to/old/checkout/python [--rounds 40]

prints the median and fastest of a cold CLI estimate and a cold API estimate (warm cache) for
each. PYTHONDONTWRITEBYTECODE is dropped so both read their compiled bytecode, as an install does.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ARGV = [sys.executable, "-m", "ridgeline.cli", "estimate", "-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM"]


def _estimate(cache: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RIDGELINE_HARDWARE", "RIDGELINE_CONSTANTS")}
    subprocess.run(ARGV, env={**env, "RIDGELINE_CACHE_DIR": cache}, check=True, capture_output=True)


def test_cold_estimate_empty_cache(benchmark, tmp_path):
    benchmark.pedantic(lambda: _estimate(tempfile.mkdtemp(dir=tmp_path)), rounds=10, iterations=1)


def test_cold_estimate_warm_cache(benchmark, tmp_path):
    _estimate(str(tmp_path))
    benchmark.pedantic(lambda: _estimate(str(tmp_path)), rounds=10, iterations=1)


API = [sys.executable, "-c", "import ridgeline; ridgeline.estimate('meta-llama/Llama-3.1-8B', 'H100_SXM')"]


def side_by_side(baseline: str, rounds: int) -> None:
    """Alternating cold runs of this package and the one at ``baseline`` (a python/ folder)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RIDGELINE_HARDWARE", "RIDGELINE_CONSTANTS",
                                                             "PYTHONDONTWRITEBYTECODE")}  # fmt: skip
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")
    trees = {"this checkout": os.path.abspath(here), "baseline": os.path.abspath(baseline)}
    caches = {t: tempfile.mkdtemp() for t in trees}
    times: dict[tuple[str, str], list[float]] = {}
    for i in range(rounds + 1):  # the first round fills each cache and compiles each tree's bytecode
        for kind, argv in (("cli", ARGV), ("api", API)):
            for name, path in trees.items():
                t0 = time.perf_counter()
                run_env = {**env, "PYTHONPATH": path, "RIDGELINE_CACHE_DIR": caches[name]}
                subprocess.run(argv, env=run_env, check=True, capture_output=True)
                if i:
                    times.setdefault((kind, name), []).append(time.perf_counter() - t0)
    for (kind, name), ts in sorted(times.items()):
        print(f"{kind} {name:14} median {statistics.median(ts) * 1e3:6.1f} ms, fastest {min(ts) * 1e3:6.1f} ms "
              f"over {len(ts)}")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="the python/ folder of the checkout to compare with")
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    side_by_side(args.baseline, args.rounds)
