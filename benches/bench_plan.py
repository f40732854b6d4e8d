"""Speed of the fixed-budget search (``ridgeline plan``) against the loop it replaces (opt-in):

    python benches/bench_plan.py [--json-out FILE]

Issue 46's example: Llama-3.1-70B on 16 H200s, 8192 prompt and 1024 output tokens, TPOT 30 ms
for 90% of requests. Timed side by side in one run:

- ``plan_budget``: every aggregated and disaggregated layout that uses the 16 devices, each
  simulated at a ladder of client counts until it misses the objective or saturates;
- the baseline a user had before it, a shell loop of ``simulate --max-rate`` (here its function,
  ``serving.capacity.max_rate``, at 300 requests a run): the highest rate each aggregated layout
  holds within the objective, one layout after another (no disaggregated layouts, no frontier).

Both run in this process after one warm-up of each (the catalog and calibration loaded). The
figures depend on the machine: report them with the machine they ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

MODEL, DEVICE, GPUS = "meta-llama/Llama-3.1-70B", "H200_SXM", 16
WORKLOAD = {"prompt": 8192, "output": 1024}
SLO_TPOT_MS = 30.0


def _plan() -> Any:
    from ridgeline.planner import plan_budget

    return plan_budget(MODEL, DEVICE, GPUS, slo_tpot_ms=SLO_TPOT_MS, **WORKLOAD)


def _loop() -> list[tuple[str, float]]:
    from ridgeline.serving.capacity import max_rate

    out = []
    for tp in (2, 4, 8):  # TP 1 holds no KV cache for a 70B model on one H200
        rate, _ = max_rate(MODEL, DEVICE, share=0.9, slo_tpot_ms=SLO_TPOT_MS, tp=tp, requests=300, **WORKLOAD)
        out.append((f"{GPUS // tp} x TP{tp}", rate))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()
    _plan(), _loop()  # warm-up
    t0 = time.perf_counter()
    b = _plan()
    t_plan = time.perf_counter() - t0
    t0 = time.perf_counter()
    rates = _loop()
    t_loop = time.perf_counter() - t0
    res = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "plan_s": t_plan,
        "plan_points": len(b.points),
        "plan_best": {k: (p.label, p.tok_s_per_gpu) for k in ("aggregated", "disaggregated") if (p := b.best(k))},
        "max_rate_loop_s": t_loop,
        "max_rate_loop": rates,
    }
    print(
        f"plan_budget: {t_plan:.2f} s for {len(b.points)} simulated points (aggregated and disaggregated, the frontier)"
    )
    print(f"max_rate loop over the aggregated layouts: {t_loop:.2f} s for {len(rates)} layouts (no disaggregation)")
    for label, r in rates:
        print(f"  {label}: {r:.3g} req/s within TPOT {SLO_TPOT_MS:g} ms")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
