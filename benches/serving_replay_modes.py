"""How the measured serving runs' TTFT grows with their clients, against three replays of them
(issue 44, item 1: the residual study that decides the waiting term's form). Needs a source
checkout (the runs ship only there):

    python benches/serving_replay_modes.py vllm H100_SXM [--runs 60]

For a seeded sample of one runtime's aggregated runs on one device, each run is replayed through
the simulator three ways, each a closed loop of the run's clients with its warm-up and measured
requests (constants.csv):

- lock-step: every client starts at 0 with the run's fixed prompt and output lengths (as
  ``ridgeline validate --serving`` replays them);
- staggered: the clients' starts spread evenly over one lone request's duration (``ramp_s``);
- drawn: lock-step starts, lengths drawn uniformly from 0.8-1.0 of the run's.

It prints, per band of clients, the medians of measured and replayed TTFT over the lone
request's TTFT (``estimate``), measured over each replay, and TPOT measured over replayed.
A client of AIPerf or GenAI-Perf in concurrency mode sends its next request as soon as its last
one ends, and a fixed-length run (ignore_eos) ends every client's request in the same step, so
the clients stay in lock-step round after round; a replay that desynchronises them prices a
different workload.
"""

import argparse
import random
import statistics
from collections import defaultdict
from pathlib import Path

import ridgeline
from ridgeline.calibration.decompose import _estimate_kwargs
from ridgeline.catalog.benchmarks import import_file
from ridgeline.catalog.store import default_catalog
from ridgeline.models.config import Model

RUNS = Path(__file__).resolve().parents[1] / "data" / "benchmarks" / "aic" / "silicon_calibration.csv"
BANDS = ((1, 1), (2, 4), (5, 16), (17, 64), (65, 256), (257, 1 << 30))


def replays(runtime: str, hardware: str, n: int) -> list[dict[str, float]]:
    """The sampled runs, each with its measured TTFT and TPOT, the lone request's and the replays'."""
    cat = default_catalog()
    rows = import_file(str(RUNS), RUNS.read_text(), cat)
    runs: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in rows:
        runs[r["id"].rsplit(":", 1)[0]][r["metric"]] = r
    per_client = int(cat.constant("serving_run_requests_per_client"))
    warmup = int(cat.constant("serving_run_warmup_per_client"))
    picked = [v for v in runs.values() if "tpot_ms" in v and "ttft_ms" in v and v["tpot_ms"]["not_priced"] is None
              and (v["tpot_ms"]["runtime"], v["tpot_ms"]["hardware"]) == (runtime, hardware)]  # fmt: skip
    random.Random(0).shuffle(picked)
    out = []
    for v in picked[:n]:
        r = v["tpot_ms"]
        kw, _ = _estimate_kwargs(r, Model.from_config(r["model"]).max_model_len, cat)
        if kw["attention_dp"] > 1 or kw["pp"] > 1:
            continue  # the simulator runs instances without them (issue 44, item 3)
        c, isl, osl = int(r["batch"]), int(r["prompt_tokens"]), int(r["output_tokens"])
        plan = {"tp": kw["tp"], "ep": kw["ep"], "runtime": r["runtime"], "weight_dtype": kw["weight_dtype"],
                "kv_dtype": kw["kv_dtype"], "catalog": cat}  # fmt: skip
        lone = ridgeline.estimate(r["model"], hardware, prompt=isl, output=osl, allow_no_fit=True, **plan)
        loop = {"concurrency": c, "requests": (per_client + warmup) * c, "max_model_len": isl + osl, **plan}
        lock = ridgeline.simulate(r["model"], hardware, prompt=isl, output=osl, **loop)
        stag = ridgeline.simulate(r["model"], hardware, prompt=isl, output=osl, ramp_s=lone.e2e_s, **loop)
        drawn = ridgeline.simulate(r["model"], hardware, prompt=f"uniform:{int(0.8 * isl)}:{isl}",
                                   output=f"uniform:{int(0.8 * osl)}:{osl}", **loop)  # fmt: skip
        out.append({"clients": c, "ttft": float(v["ttft_ms"]["value"]) / 1e3, "lone": lone.ttft_s,
                    "lock": lock.ttft_s["mean"], "stag": stag.ttft_s["mean"], "drawn": drawn.ttft_s["mean"],
                    "tpot": float(r["value"]) / 1e3, "tpot_lock": lock.tpot_s["mean"],
                    "tpot_stag": stag.tpot_s["mean"]})  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runtime")
    ap.add_argument("hardware")
    ap.add_argument("--runs", type=int, default=60)
    a = ap.parse_args()
    out = replays(a.runtime, a.hardware, a.runs)
    print(f"{a.runtime} on {a.hardware}: {len(out)} runs (medians; lone: a lone request's TTFT)")
    cols = ("meas/lone", "lock/lone", "stag/lone", "drawn/lone", "meas/lock", "meas/stag", "TPOT m/lock",
            "TPOT m/stag")  # fmt: skip
    print(f"{'clients':<11}{'runs':>5}" + "".join(f"{c:>12}" for c in cols))
    for lo, hi in BANDS:
        band = [x for x in out if lo <= x["clients"] <= hi]
        if not band:
            continue
        ratios = [("ttft", "lone"), ("lock", "lone"), ("stag", "lone"), ("drawn", "lone"), ("ttft", "lock"),
                  ("ttft", "stag"), ("tpot", "tpot_lock"), ("tpot", "tpot_stag")]  # fmt: skip
        cells = "".join(f"{statistics.median(x[p] / x[q] for x in band):>12.2f}" for p, q in ratios)
        print(f"{f'{lo}-{hi}' if hi < 1 << 30 else f'{lo}+':<11}{len(band):>5}{cells}")


if __name__ == "__main__":
    main()
