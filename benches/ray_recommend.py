"""A simulator-backed recommend search on 1 and on 2 local Ray workers (opt-in; needs the extra):

    pip install ".[ray]" && python benches/ray_recommend.py [--requests N] [--json-out FILE]

The search: Llama-3.1-70B at 20 req/s (Poisson), prompt 1024 and output 256 tokens, p90 TTFT
within 500 ms and TPOT within 50 ms, over every catalog device with a published offer x TP 1, 2,
4, 8 under vLLM, each candidate sized by the simulator (``serving.max_rate``'s bisection, then a
confirming simulation of the fleet) with N requests a run. It runs three times, the same search
each time: here without Ray (the baseline), then on a local cluster (tests/ray_local.py: a head of
no CPUs and W worker nodes of one CPU each on 127.0.0.1) of 1 and of 2 workers. Reported: each
wall time, the speed-up of 2 workers over 1, that the three answers are identical, the per-task
times (the longest candidate bounds a run), and from them what a search of the whole catalog (x 3
runtimes x 2 weight formats x 10 load points) would take on 100 nodes of 16 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

SEARCH: dict[str, Any] = {"rate": 20, "slo_ttft_ms": 500, "slo_tpot_ms": 50, "prompt": 1024, "output": 256,
                          "tp": (1, 2, 4, 8), "runtime": "vllm"}  # fmt: skip
MODEL = "meta-llama/Llama-3.1-70B"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=1000, help="Requests per simulated run (default 1000).")
    ap.add_argument("--json-out", default=None, help="Write the figures here as JSON.")
    args = ap.parse_args()

    from ray_local import local_cluster
    from ridgeline import __version__, recommend
    from ridgeline.sweeps.cluster import RunReport

    kw = {**SEARCH, "requests": args.requests}
    recommend(MODEL, **{**kw, "hardware": ["H100_SXM"], "tp": (8,), "requests": 50})  # warm the caches
    t0 = time.perf_counter()
    base = recommend(MODEL, **kw)
    runs: dict[str, Any] = {"local": {"wall_s": time.perf_counter() - t0, "report": base.run}}
    for workers in (1, 2):
        with local_cluster(workers) as address:
            t0 = time.perf_counter()
            r = recommend(MODEL, backend="ray", ray_address=address, **kw)
            runs[f"ray_{workers}"] = {"wall_s": time.perf_counter() - t0, "report": r.run, "same": r == base}
    one, two = runs["ray_1"], runs["ray_2"]
    rep: RunReport = two["report"]
    tasks = rep.tasks
    # each candidate's own time, from the one-worker run (no contention for the CPU)
    per_task = one["report"].task_s / tasks
    slowest = one["report"].slowest_s
    overhead = (one["wall_s"] - one["report"].task_s) / tasks  # Ray's cost per task, one worker
    out = {
        "date": time.strftime("%Y-%m-%d"),
        "ridgeline": __version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "search": {"model": MODEL, **{k: list(v) if isinstance(v, tuple) else v for k, v in kw.items()}},
        "candidates": tasks,
        "plans_found": len(base.plans),
        "local_wall_s": runs["local"]["wall_s"],
        "ray_1_wall_s": one["wall_s"],
        "ray_2_wall_s": two["wall_s"],
        "speedup_2_over_1": one["wall_s"] / two["wall_s"],
        "identical": bool(one["same"] and two["same"]),
        "tasks_by_node_2": {k: v["tasks"] for k, v in rep.nodes.items()},
        "mean_task_s": per_task,
        "slowest_task_s": slowest,
        "ray_overhead_per_task_s": overhead,
    }
    # 100 nodes of 16 cores each (one task a core). The whole catalog: every device and TP degree (this
    # search's candidates) x the three production runtimes x two weight formats x ten load points
    cores = 100 * 16
    whole = tasks * 3 * 2 * 10
    out["projection_100_nodes"] = {
        "tasks": whole,
        "cores": cores,
        "wall_s": max(whole * (per_task + overhead) / cores, slowest + overhead),
        "note": "ideal packing from the measured mean task time plus Ray's measured per-task cost, and never "
                "less than the slowest candidate; a task's time grows about linearly with --requests",
    }  # fmt: skip
    text = json.dumps(out, indent=1)
    print(text)
    if args.json_out:
        Path(args.json_out).write_text(text + "\n")


if __name__ == "__main__":
    main()
