"""The performance record (opt-in; release build; the peers need the PyPI registry):

    pip install . && python benches/perf_record.py [--baseline-python PY] [--genz-python PY] [--rounds 10]

Measures each figure of the performance table (docs/performance.md) side by side in one run on this
machine: this checkout's ridgeline (the ``python`` running the script), the previous release of
ridgeline (``--baseline-python``: an interpreter with it installed, e.g. a venv made from
``git worktree add /tmp/base f1f24a0 && pip install /tmp/base``) and GenZ (genz-llm 0.0.16 in
its own venv, made on first use as benches/genz_compare.py makes it). Every figure is the median
of ``--rounds`` runs; a peer that is not given (or does not install) is left out, said so.
AIConfigurator is not measured: the project does not install it (its data is held out).

Writes benches/perf.json and rewrites the table between the ``perf-table`` markers of docs/performance.md
from it (``--table-only`` rewrites the table from an existing perf.json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benches" / "perf.json"
README = ROOT / "docs" / "performance.md"
START, END = "<!-- perf-table:start -->", "<!-- perf-table:end -->"
ESTIMATE = ["estimate", "-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM"]
# 1e7 dense plans: 1000 batches x 10 prompts x 250 outputs x 4 TP degrees (Llama-3.1-8B on H100)
SWEEP = ["sweep", "-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM", "--batch", "1..1000",
         "--prompt", "1024..1996:+108", "--output", "256..2746:+10", "--tp", "1,2,4,8", "--threads", "2"]  # fmt: skip
SWEEP_1E6 = [*SWEEP[:10], "256..2656:+100", *SWEEP[11:]]  # 25 outputs: 1e6 plans

WARM = r"""
import json, sys, time
import ridgeline
# a mix: dense and MoE, batch 1-64, prompt 512-2048, TP 1-2, each priced as `ridgeline estimate`
# prices it (the device's default runtime and its shipped calibration)
plans = [dict(model=m, batch=b, prompt=p, tp=t) for m in ("meta-llama/Llama-3.1-8B", "Qwen/Qwen3-30B-A3B")
         for b in (1, 8, 64) for p in (512, 2048) for t in (1, 2)]
for p in plans:
    ridgeline.estimate(p["model"], "H100_SXM", batch=p["batch"], prompt=p["prompt"], tp=p["tp"], allow_no_fit=True)
rates = []
for _ in range(int(sys.argv[1])):
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.5:
        for p in plans:
            ridgeline.estimate(p["model"], "H100_SXM", batch=p["batch"], prompt=p["prompt"], tp=p["tp"],
                               allow_no_fit=True)
        n += len(plans)
    rates.append(n / (time.perf_counter() - t0))
print(json.dumps(rates))
"""

GENZ_COLD = r"""
import warnings
warnings.filterwarnings("ignore")
from GenZ import prefill_moddeling, decode_moddeling
prefill_moddeling(model="meta-llama/meta-llama-3.1-8b", batch_size=1, input_tokens=1024, system_name="H100_GPU",
                  bits="bf16", tensor_parallel=1)
decode_moddeling(model="meta-llama/meta-llama-3.1-8b", batch_size=1, input_tokens=1024, output_tokens=256, Bb=1,
                 system_name="H100_GPU", bits="bf16", tensor_parallel=1)
"""


def median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def wall(cmd: list[str], env: Optional[dict[str, str]] = None, cwd: Optional[Path] = None) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one command, which must succeed."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
    _, status, usage = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t0
    err = p.stderr.read().decode() if p.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {err.strip()[-400:]}")
    return dt, usage.ru_maxrss / 1024


def ridgeline_cmd(py: str, *args: str) -> list[str]:
    return [py, "-m", "ridgeline.cli", *args]


def cold(py: str, rounds: int) -> dict[str, float]:
    """A fresh-process CLI estimate, calibrated: the first run after install (empty cache) and later ones."""
    env = {k: v for k, v in os.environ.items() if k not in ("RIDGELINE_HARDWARE", "RIDGELINE_CONSTANTS")}
    first, later = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            empty = {**env, "RIDGELINE_CACHE_DIR": str(Path(tmp) / f"c{i}")}
            first.append(wall(ridgeline_cmd(py, *ESTIMATE), env=empty)[0])
            later.append(wall(ridgeline_cmd(py, *ESTIMATE), env=empty)[0])
    return {"first_s": median(first), "later_s": median(later)}


def warm(py: str, rounds: int) -> float:
    out = subprocess.run([py, "-c", WARM, str(rounds)], capture_output=True, text=True, check=True)
    return median(json.loads(out.stdout.strip().splitlines()[-1]))


def sweep(py: str, args: list[str], plans: int, runtime: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        dt, rss = wall(ridgeline_cmd(py, *args, "--runtime", runtime, "--out", str(Path(tmp) / "r.parquet")))
    return {"plans": plans, "wall_s": dt, "plans_per_s": plans / dt, "peak_rss_mb": rss}


def calibration(py: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        cal = wall(ridgeline_cmd(py, "calibrate", "--out", str(Path(tmp) / "fits.csv")), cwd=Path(tmp))[0]
        val = wall(ridgeline_cmd(py, "validate"), cwd=Path(tmp))[0]
    return {"calibrate_s": cal, "validate_s": val}


def genz(given: Optional[str], rounds: int) -> Optional[dict[str, float]]:
    sys.path.insert(0, str(ROOT / "benches"))
    try:
        import genz_compare  # type: ignore[import-not-found]

        py = genz_compare.genz_python(given)
        cold_s = median([wall([py, "-c", GENZ_COLD])[0] for _ in range(max(3, rounds // 3))])
        r = subprocess.run([py, "-c", genz_compare.GENZ_SCRIPT], input=json.dumps(genz_compare.PLANS),
                           capture_output=True, text=True, check=True)  # fmt: skip
        res = json.loads(r.stdout.strip().splitlines()[-1])
        return {"cold_s": cold_s, "estimates_per_s": len(genz_compare.PLANS) / res["seconds"]}
    except (subprocess.CalledProcessError, OSError, SystemExit) as e:
        print(f"GenZ left out: {e}", file=sys.stderr)
        return None


def git_head() -> str:
    r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return r.stdout.strip()


def record(args: argparse.Namespace) -> dict[str, Any]:
    me, base = sys.executable, args.baseline_python
    numpy_s = median([wall([me, "-c", "import numpy"])[0] for _ in range(args.rounds)])
    out: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "commit": git_head(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "rounds": args.rounds,
        "numpy_import_s": numpy_s,
    }
    for who, py in (("ridgeline", me), ("baseline", base)):
        if not py:
            continue
        print(f"measuring {who} ({py})", file=sys.stderr)
        r: dict[str, Any] = {"cold": cold(py, args.rounds), "warm_estimates_per_s": warm(py, args.rounds)}
        r["sweep_bound"] = sweep(py, SWEEP, 10_000_000, "none")
        # the previous release prices a runtime's sweep at 24,000 plans/s: 1e6 plans, not 1e7
        slow = who == "baseline"
        r["sweep_runtime"] = sweep(py, SWEEP_1E6 if slow else SWEEP, 1_000_000 if slow else 10_000_000,
                                   "llamacpp-cuda")  # fmt: skip
        if not args.skip_calibration:
            r["calibration"] = calibration(py)
        out[who] = r
    out["genz"] = None if args.no_genz else genz(args.genz_python, args.rounds)
    return out


def fmt_s(x: Optional[float]) -> str:
    return "-" if x is None else (f"{x * 1e3:.0f} ms" if x < 1 else f"{x:.1f} s")


def table(r: dict[str, Any]) -> str:
    me, base, gz = r["ridgeline"], r.get("baseline"), r.get("genz")

    def get(d: Optional[dict[str, Any]], *path: str) -> Any:
        for k in path:
            if not isinstance(d, dict) or k not in d:
                return None
            d = d[k]
        return d

    def rate(x: Optional[float]) -> str:
        return "-" if x is None else f"{x:,.0f}/s"

    def sweep_cell(s: Optional[dict[str, Any]]) -> str:
        if not s:
            return "-"
        return f"{s['plans_per_s'] / 1e6:.2f}M plans/s ({s['plans']:,} plans, peak {s['peak_rss_mb']:.0f} MB)"

    bound, priced = me["sweep_bound"]["plans_per_s"], me["sweep_runtime"]["plans_per_s"]
    rows = [
        ("Cold `ridgeline " + " ".join(ESTIMATE) + "`, first run after install",
         fmt_s(me["cold"]["first_s"]), fmt_s(get(base, "cold", "first_s")), fmt_s(get(gz, "cold_s")),
         "< 300 ms"),
        ("Cold, later runs", fmt_s(me["cold"]["later_s"]), fmt_s(get(base, "cold", "later_s")), "-",
         f"< 5x `import numpy` ({fmt_s(5 * r['numpy_import_s'])})"),
        ("Warm `ridgeline.estimate()`, calibrated, 24-plan mix", rate(me["warm_estimates_per_s"]),
         rate(get(base, "warm_estimates_per_s")), rate(get(gz, "estimates_per_s")), ">= 20,000/s"),
        ("`ridgeline sweep` to Parquet, 2 threads, the bound (`--runtime none`)", sweep_cell(me["sweep_bound"]),
         sweep_cell(get(base, "sweep_bound")), "-", ">= 1M plans/s, < 1 GB"),
        (f"`ridgeline sweep`, llamacpp-cuda (its 512-token prompt steps): {bound / priced:.2f}x the bound's time",
         sweep_cell(me["sweep_runtime"]), sweep_cell(get(base, "sweep_runtime")), "-", "within 3x of the bound"),
        ("`ridgeline calibrate`", fmt_s(get(me, "calibration", "calibrate_s")),
         fmt_s(get(base, "calibration", "calibrate_s")), "-", "< 60 s"),
        ("`ridgeline validate`", fmt_s(get(me, "calibration", "validate_s")),
         fmt_s(get(base, "calibration", "validate_s")), "-", "< 15 s"),
    ]  # fmt: skip
    lines = [
        f"Measured {r['date']} at {r['commit']} on {r['machine']} by `python benches/perf_record.py` "
        f'(median of {r["rounds"]} runs; `python -c "import numpy"` took {fmt_s(r["numpy_import_s"])}):',
        "",
        "| figure | ridgeline | previous release | GenZ | goal |",
        "| --- | --- | --- | --- | --- |",
        *(f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in rows),
    ]
    return "\n".join(lines)


def write_table(r: dict[str, Any]) -> None:
    text = README.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"docs/performance.md has no {START} ... {END} markers")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    README.write_text(f"{head}{START}\n{table(r)}\n{END}{tail}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline-python", default=os.environ.get("RIDGELINE_BASELINE_PYTHON"))
    ap.add_argument("--genz-python", default=os.environ.get("GENZ_PYTHON"))
    ap.add_argument("--no-genz", action="store_true", help="leave GenZ out (no registry)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--skip-calibration", action="store_true", help="leave calibrate and validate out")
    ap.add_argument(
        "--table-only", action="store_true", help="rewrite the docs/performance.md table from benches/perf.json"
    )
    args = ap.parse_args()
    if args.table_only:
        write_table(json.loads(RESULTS.read_text()))
        return
    r = record(args)
    RESULTS.write_text(json.dumps(r, indent=1) + "\n")
    write_table(r)
    print(table(r))


if __name__ == "__main__":
    main()
