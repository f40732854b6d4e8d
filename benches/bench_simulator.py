"""Serving-simulator speed with attention DP and disaggregation on (opt-in):

    python benches/bench_simulator.py [--requests N] [--clients C] [--json-out FILE]

Simulated requests per minute on one core (the process pinned to one CPU), for closed loops of C
clients (default 64) sending N requests (default 100,000) of prompt 1024 and output 256 tokens:

- Llama-3.1-8B on 8 H200s: eight TP-1 instances (aggregated), and four prefill plus four decode
  instances (disaggregated, KV over the catalog's scale-out link);
- DeepSeek-V3 on 8 H200s: one TP-8 EP-8 instance, and one instance of 8 attention-DP ranks over
  EP 8 (each rank its own scheduler and KV, stepping together);
- DeepSeek-V3 on 16 H200s, disaggregated: a TP-8 prefill instance feeding a decode instance of 8
  attention-DP ranks.
The catalog has no sourced scale-out latency for H200, so the disaggregated runs give the KV link
a latency of 0 us: the simulator's speed does not depend on it (the figures are not predictions).

Each timed run follows one warm-up run of a tenth of the requests. The goal (issue 44): at least
1,000,000 simulated requests a minute on one core with attention DP and disaggregation on. The
figures depend on the machine: report them with the machine they ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

LLAMA, DSV3, HW = "meta-llama/Llama-3.1-8B", "deepseek-ai/DeepSeek-V3", "H200_SXM"

CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("Llama-3.1-8B, 8 x TP1, aggregated", LLAMA, {"instances": 8, "router": "least_outstanding"}),
    ("Llama-3.1-8B, 4P + 4D TP1, disaggregated", LLAMA,
     {"prefill_instances": 4, "decode_instances": 4, "router": "least_outstanding"}),
    ("DeepSeek-V3, TP8 EP8, aggregated", DSV3, {"tp": 8, "ep": 8}),
    ("DeepSeek-V3, TP1 x attention DP 8, EP8", DSV3, {"tp": 1, "ep": 8, "attention_dp": 8}),
    ("DeepSeek-V3, 1P TP8 + 1D attention DP 8", DSV3,
     {"tp": 8, "ep": 8, "prefill_instances": 1, "decode_instances": 1, "decode_tp": 1, "decode_attention_dp": 8}),
]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    import ridgeline

    out = []
    print(f"{'run':<44} {'wall s':>8} {'req/min':>12} {'steps':>10} {'completed':>10}")
    for name, model, kw in CASES:
        common = {"concurrency": a.clients, "prompt": 1024, "output": 256, "runtime": "sglang",
                  "max_model_len": 2048, **kw}  # fmt: skip
        if "prefill_instances" in kw:
            common["kv_link_latency_us"] = 0.0
        ridgeline.simulate(model, HW, requests=max(a.requests // 10, 1), **common)
        t = time.perf_counter()
        s = ridgeline.simulate(model, HW, requests=a.requests, **common)
        wall = time.perf_counter() - t
        rate = a.requests / wall * 60
        out.append({"run": name, "wall_s": wall, "req_per_min": rate, "steps": s.steps,
                    "completed": s.counts["completed"], "devices": s.devices})  # fmt: skip
        print(f"{name:<44} {wall:>8.2f} {rate:>12,.0f} {s.steps:>10,} {s.counts['completed']:>10,}")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"requests": a.requests, "clients": a.clients, "runs": out}, f, indent=2)
    sys.exit(0)


if __name__ == "__main__":
    main()
