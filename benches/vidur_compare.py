"""Side by side with Vidur (vidur 0.0.26, from PyPI) on one serving workload (opt-in):

    python benches/vidur_compare.py [--vidur-python /path/to/venv/bin/python] [--requests N]
                                    [--vidur-profile-dir DIR | --vidur-hf] [--json-out FILE]

Workload: Llama-3.1-8B (Vidur: its meta-llama/Llama-3-8B, the same architecture) on one H100,
TP 1, N requests (default 100,000) of prompt 1024 and output 256 tokens, at most 64 sequences in a
batch. ridgeline runs in this process as a closed loop of 64 clients, and again with every request
arriving at t=0 under max_num_seqs=64 (and once more under a vLLM-v0-like scheduler: whole prompts,
prefill-only steps, 4,096 tokens a step). Vidur has no closed loop: its closest equivalent is every
request at t=0 (synthetic generator, fixed lengths, static interval generator) under its vllm
replica scheduler with batch_size_cap 64 (max_tokens_in_batch 4,096, its default). Vidur runs in its
own venv through a subprocess, twice: a warm-up that trains and caches its sklearn predictors, then
the timed run that loads them. Reported for each: wall seconds, simulated requests per minute on
one core (each timed run pinned to one CPU), peak RSS, the ratio ridgeline/Vidur, and each tool's
simulated output tokens per simulated second, mean TTFT and TPOT.

Vidur's timing excludes its interpreter start-up and imports and its output writing (reported apart);
plots, wandb, the chrome and json traces and its batch/utilisation metrics are off, its logger is at
WARNING and its native (C++) execution-time predictor is on, all in its favour. Its prediction tables
are cut to 4,096 tokens a request (default 2M), which covers this workload (1,280 tokens a sequence,
4,096 a prefill batch) and shortens its start. ridgeline's timed calls follow one warm-up call.

Vidur's execution-time predictor needs per-operator GPU profiles of the model on the device. 0.0.26
ships none (the wheel and the sdist hold only request traces): it downloads them from the Hugging
Face Hub (datasets project-vajra/dev-staging-meta-llama-llama-3-8b-h100 and
project-vajra/dev-staging-h100-dgx), which a machine with only PyPI cannot reach. So:
  --vidur-profile-dir DIR  a local copy of those two datasets, DIR/compute and DIR/network (each as
                           `hf download --repo-type dataset ID --local-dir ...` leaves it);
  --vidur-hf               let Vidur download them itself;
  neither (the default)    a stand-in profile in Vidur's format, written from ridgeline's own
                           per-operator H100 times (ridgeline.estimate). Vidur's timed run does the
                           same work whatever the profile's numbers (all requests arrive at t=0, so the
                           batches it forms do not depend on predicted times), but its simulated
                           TTFT/TPOT/throughput are then ridgeline's operator costs under Vidur's
                           scheduler, not Vidur's own measurements; the output says which profile.

Without --vidur-python it makes its own venv under the system temp folder and installs
vidur==0.0.26 there (it needs the PyPI registry); vidur is never a dependency of ridgeline.
"""

from __future__ import annotations

import argparse
import csv
import json
import lzma
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _peers import peer_python  # benches/, beside this script

MODEL, HARDWARE = "meta-llama/Llama-3.1-8B", "H100_SXM"
PROMPT, OUTPUT, MAX_SEQS = 1024, 256, 64
VIDUR_VERSION = "0.0.26"
VIDUR_MODEL, VIDUR_DEVICE, VIDUR_NODE = "meta-llama/Llama-3-8B", "h100", "h100_dgx"
# Vidur's own dataset ids for this model and node (its defaults in vidur/config/config.py)
HF_COMPUTE, HF_NETWORK = "project-vajra/dev-staging-meta-llama-llama-3-8b-h100", "project-vajra/dev-staging-h100-dgx"
STAND_IN_COMPUTE, STAND_IN_NETWORK = "ridgeline-stand-in/llama-3-8b-h100", "ridgeline-stand-in/h100-dgx"
# the columns Vidur filters its profiles on, for its Llama-3-8B at TP 1 and block size 16
VIDUR_DIMS = {"n_embd": 4096, "n_q_head": 32, "n_kv_head": 8, "n_expanded_embd": 14336, "vocab_size": 128256}
# tokens a step (Vidur's vllm max_tokens_in_batch, its default; ridgeline's v0-like run) and the reach of
# Vidur's prediction tables (prediction_max_tokens_per_request, default 2M)
MAX_TOKENS = 4096

VIDUR_SCRIPT = r"""
import json, logging, os, resource, sys, time
cfg = json.loads(sys.stdin.read())
if cfg["cpu"] is not None:
    os.sched_setaffinity(0, {cfg["cpu"]})
t_start = time.perf_counter()
import pandas as pd
from vidur.config import SimulationConfig
from vidur.simulator import Simulator
from vidur.utils.random import set_seeds
import vidur.execution_time_predictor.sklearn_execution_time_predictor as etp
t_imported = time.perf_counter()
logging.getLogger("vidur").setLevel(logging.WARNING)
local = cfg["datasets"]
if local is not None:  # profiles from local folders; anything else (its prediction repos) is absent
    def snapshot_download(repo_id, **kwargs):
        if repo_id in local:
            return local[repo_id]
        raise FileNotFoundError(f"{repo_id}: no local copy (offline run)")
    etp.snapshot_download = snapshot_download
sys.argv = ["vidur.main", *cfg["argv"]]
config = SimulationConfig.create_from_cli_args()
set_seeds(config.seed)
t0 = time.perf_counter()
sim = Simulator(config)  # trains or loads the predictors, generates the requests
t1 = time.perf_counter()
write_output, sim._write_output = sim._write_output, lambda: None
sim.run()
t2 = time.perf_counter()
write_output()
t3 = time.perf_counter()
out = config.metrics_config.output_dir
df = pd.read_csv(f"{out}/request_metrics.csv")
n_dec = cfg["output"] - 1  # the prefill step gives the first token, as in ridgeline
print(json.dumps({
    "import_s": t_imported - t_start, "init_s": t1 - t0, "loop_s": t2 - t1, "output_s": t3 - t2,
    "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "output_dir": out,
    "completed": int(len(df)), "duration_s": float(sim._time),
    "ttft_mean_s": float(df["prefill_e2e_time"].mean()),
    "ttft_from_scheduled_mean_s": float(df["prefill_time_execution_plus_preemption"].mean()),
    "tpot_mean_s": float(((df["request_e2e_time"] - df["prefill_e2e_time"]) / n_dec).mean()),
}))
"""


def vidur_python(given: str | None) -> str:
    return peer_python(given, "ridgeline-vidur-venv", f"vidur=={VIDUR_VERSION}")


def one_cpu() -> int | None:
    return min(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def write_stand_in_profile(root: Path) -> dict[str, str]:
    """Vidur-format compute profile (mlp.csv.xz, attention.csv.xz) from ridgeline's per-operator times."""
    import ridgeline
    from ridgeline.models.config import Model

    layers = Model.from_config(MODEL).num_layers

    def per_layer_ms(batch: int, prompt: int, phase: str) -> dict[str, float]:
        e = ridgeline.estimate(MODEL, HARDWARE, batch=batch, prompt=prompt, output=2, allow_no_fit=True)
        b = e.breakdown.filter(e.breakdown["phase"] == phase)
        return {op: t * 1e3 / layers for op, t in zip(b["op"].to_list(), b["time_s"].to_list())}

    common = {"n_embd": VIDUR_DIMS["n_embd"], "n_q_head": VIDUR_DIMS["n_q_head"], "n_kv_head": VIDUR_DIMS["n_kv_head"]}
    mlp, attn = [], []
    for n in [1, 2, 4, 8, 16, 24, 32, 48, *range(64, MAX_TOKENS + 1, 32)]:
        p = per_layer_ms(1, n, "prefill")
        ops = {
            "attn_pre_proj": p["qkv_proj"],
            "attn_rope": p["rotary"],
            "attn_post_proj": p["o_proj"],
            "mlp_up_proj": p["ffn_up"],
            "mlp_act": p["ffn_act"],
            "mlp_down_proj": p["ffn_down"],
            "input_layernorm": p["norm"] / 2,
            "post_attention_layernorm": p["norm"] / 2,
            "add": 0.0,
        }
        mlp.append(
            {
                "n_head": VIDUR_DIMS["n_q_head"],
                "n_kv_head": VIDUR_DIMS["n_kv_head"],
                "n_embd": VIDUR_DIMS["n_embd"],
                "n_expanded_embd": VIDUR_DIMS["n_expanded_embd"],
                "use_gated_mlp": True,
                "vocab_size": VIDUR_DIMS["vocab_size"],
                "num_tensor_parallel_workers": 1,
                "num_tokens": n,
                **{f"time_stats.{k}.median": v for k, v in ops.items()},
            }
        )
        attn.append(
            {
                **common,
                "block_size": 16,
                "num_tensor_parallel_workers": 1,
                "batch_size": 1,
                "prefill_chunk_size": n,
                "kv_cache_size": 0,
                "is_prefill": True,
                "time_stats.attn_prefill.median": p["attention"],
                "time_stats.attn_decode.median": 0.0,
                "time_stats.attn_kv_cache_save.median": p["kv_cache_write"],
            }
        )
    for b in [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128]:
        for kv in range(0, MAX_TOKENS + 1, 256):
            d = per_layer_ms(b, max(kv, 1), "decode")
            attn.append(
                {
                    **common,
                    "block_size": 16,
                    "num_tensor_parallel_workers": 1,
                    "batch_size": b,
                    "prefill_chunk_size": 0,
                    "kv_cache_size": kv,
                    "is_prefill": False,
                    "time_stats.attn_prefill.median": 0.0,
                    "time_stats.attn_decode.median": d["attention"],
                    "time_stats.attn_kv_cache_save.median": d["kv_cache_write"],
                }
            )
    compute, network = root / "compute", root / "network"
    compute.mkdir(parents=True, exist_ok=True)
    network.mkdir(parents=True, exist_ok=True)
    for name, rows in (("mlp", mlp), ("attention", attn)):
        with lzma.open(compute / f"{name}.csv.xz", "wt", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    (compute / "config.json").write_text(json.dumps({"model": VIDUR_MODEL, "device_sku": VIDUR_DEVICE}))
    (network / "config.json").write_text(json.dumps({"sku": VIDUR_NODE}))  # TP 1, PP 1: no collectives read
    return {STAND_IN_COMPUTE: str(compute), STAND_IN_NETWORK: str(network)}


def vidur_argv(n: int, work: Path, compute_ds: str, network_ds: str, full_grid: bool) -> list[str]:
    et = "random_forrest_execution_time_predictor_config_"
    opts: dict[str, Any] = {
        "seed": 42,
        "cluster_config_num_replicas": 1,
        "global_scheduler_config_type": "round_robin",
        "replica_config_model_name": VIDUR_MODEL,
        "replica_config_device": VIDUR_DEVICE,
        "replica_config_network_device": VIDUR_NODE,
        "replica_config_tensor_parallel_size": 1,
        "replica_config_num_pipeline_stages": 1,
        "replica_scheduler_config_type": "vllm",
        "vllm_scheduler_config_batch_size_cap": MAX_SEQS,
        "vllm_scheduler_config_max_tokens_in_batch": MAX_TOKENS,
        "request_generator_config_type": "synthetic",
        "synthetic_request_generator_config_num_requests": n,
        "length_generator_config_type": "fixed",
        "fixed_request_length_generator_config_prefill_tokens": PROMPT,
        "fixed_request_length_generator_config_decode_tokens": OUTPUT,
        "interval_generator_config_type": "static",
        "execution_time_predictor_config_type": "random_forrest",
        et + "model_profiling_dataset": compute_ds,
        et + "network_profiling_dataset": network_ds,
        et + "cache_dir": work / "vidur_cache",
        et + "prediction_max_tokens_per_request": MAX_TOKENS,
        "metrics_config_output_dir": work / "vidur_out",
    }
    if not full_grid:
        # Vidur's default grid search (27 forests of 250-750 trees, 10-fold, for each of 12 operators) ran
        # past 10 minutes on two cores on the stand-in profile; one point of it, 2-fold, trains in seconds
        # (the timed run only loads the cached predictions either way)
        opts.update({et + "num_estimators": 250, et + "max_depth": 16, et + "min_samples_split": 2})
        opts[et + "k_fold_cv_splits"] = 2
    off = ["enable_chrome_trace", "store_plots", "write_json_trace", "store_batch_metrics", "store_utilization_metrics"]
    # its C++ predictor: the same times as the Python one here, the loop about 8% faster
    native = f"--{et}use_native_execution_time_predictor"
    return (
        [a for k, v in opts.items() for a in (f"--{k}", str(v))] + [f"--no-metrics_config_{f}" for f in off] + [native]
    )


def run_vidur(py: str, argv: list[str], datasets: dict[str, str] | None, cpu: int | None) -> dict[str, Any]:
    env = {**os.environ, "WANDB_MODE": "disabled", "HF_HUB_DISABLE_TELEMETRY": "1"}
    if cpu is not None:
        env.update({k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
    cfg = {"argv": argv, "datasets": datasets, "cpu": cpu, "output": OUTPUT}
    t0 = time.perf_counter()
    r = subprocess.run([py, "-c", VIDUR_SCRIPT], input=json.dumps(cfg), capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        hint = "(Vidur's profiles: --vidur-hf needs the Hugging Face Hub; see --vidur-profile-dir)"
        sys.exit(f"Vidur failed (exit {r.returncode}) {hint}:\n{r.stderr[-4000:]}\n{r.stdout[-2000:]}")
    out: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    out["process_wall_s"] = wall
    out["wall_s"] = out["init_s"] + out["loop_s"]  # set-up (predictors, requests) + simulation
    return out


def run_ridgeline(n: int, work: Path, cpu: int | None) -> dict[str, dict[str, Any]]:
    t_import = time.perf_counter()
    import ridgeline

    import_s = time.perf_counter() - t_import
    rss_base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    trace = work / "t0.csv"
    with trace.open("w") as f:
        f.write("arrival_s,prompt_tokens,output_tokens\n")
        f.writelines(f"0,{PROMPT},{OUTPUT}\n" for _ in range(n))
    runs = {
        "closed_loop": {"concurrency": MAX_SEQS, "requests": n, "prompt": PROMPT, "output": OUTPUT},
        "t0": {"trace": str(trace), "max_num_seqs": MAX_SEQS},
        "t0_v0_sched": {
            "trace": str(trace),
            "max_num_seqs": MAX_SEQS,
            "max_num_batched_tokens": MAX_TOKENS,
            "chunked_prefill": False,
            "mixed": False,
        },
    }
    old = os.sched_getaffinity(0) if cpu is not None else None
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    out = {}
    try:
        t0 = time.perf_counter()  # warm-up: the first call loads the model, catalog and calibration
        ridgeline.simulate(MODEL, HARDWARE, concurrency=MAX_SEQS, requests=MAX_SEQS, prompt=PROMPT, output=OUTPUT)
        first_call_s = time.perf_counter() - t0
        for name, kw in runs.items():
            t0 = time.perf_counter()
            s = ridgeline.simulate(MODEL, HARDWARE, **kw)
            wall = time.perf_counter() - t0
            out[name] = {
                "wall_s": wall,
                "completed": s.counts["completed"],
                "steps": s.steps,
                "duration_s": s.duration_s,
                "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "output_tok_per_sim_s": s.output_tokens / s.duration_s,
                "ttft_mean_s": s.ttft_s["mean"],
                "tpot_mean_s": s.tpot_s["mean"],
                "scheduler": s.scheduler,
            }
    finally:
        if old is not None:
            os.sched_setaffinity(0, old)
    for r in out.values():
        r.update(import_s=import_s, rss_after_import_mib=rss_base, first_call_64_requests_s=first_call_s)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vidur-python", default=os.environ.get("VIDUR_PYTHON"))
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--warmup-requests", type=int, help="requests in Vidur's warm-up run (default: --requests)")
    src = ap.add_mutually_exclusive_group()
    src.add_argument(
        "--vidur-profile-dir", type=Path, help="local copy of Vidur's profile datasets (compute/, network/)"
    )
    src.add_argument("--vidur-hf", action="store_true", help="let Vidur download its profiles from the Hub")
    ap.add_argument("--vidur-full-grid", action="store_true", help="Vidur's default predictor grid search (slow)")
    ap.add_argument("--no-pin", action="store_true", help="do not pin the timed runs to one CPU")
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--keep-work", action="store_true", help="keep the temp folder (Vidur's outputs, the profile)")
    args = ap.parse_args()
    n = args.requests
    cpu = None if args.no_pin else one_cpu()
    work = Path(tempfile.mkdtemp(prefix="ridgeline-vidur-"))

    ours = run_ridgeline(n, work, cpu)  # first, so this process's peak RSS is ridgeline's

    py = vidur_python(args.vidur_python)
    if args.vidur_hf:
        datasets, (compute_ds, network_ds), profile = None, (HF_COMPUTE, HF_NETWORK), "Vidur's (Hugging Face Hub)"
    elif args.vidur_profile_dir:
        d = args.vidur_profile_dir.resolve()
        datasets = {HF_COMPUTE: str(d / "compute"), HF_NETWORK: str(d / "network")}
        compute_ds, network_ds, profile = HF_COMPUTE, HF_NETWORK, f"Vidur's (local copy, {d})"
    else:
        datasets = write_stand_in_profile(work / "stand_in_profile")
        compute_ds, network_ds = STAND_IN_COMPUTE, STAND_IN_NETWORK
        profile = "stand-in: ridgeline's per-operator H100 times in Vidur's format (Vidur's own profile is not local)"
    warm_n = args.warmup_requests or n
    vidur_warm = run_vidur(py, vidur_argv(warm_n, work, compute_ds, network_ds, args.vidur_full_grid), datasets, None)
    vidur = run_vidur(py, vidur_argv(n, work, compute_ds, network_ds, args.vidur_full_grid), datasets, cpu)
    for r in (vidur_warm, vidur):
        r["output_tok_per_sim_s"] = r["completed"] * OUTPUT / r["duration_s"]
    if vidur["completed"] != n:
        sys.exit(f"Vidur completed {vidur['completed']} of {n} requests")

    if args.keep_work:
        print(f"work folder kept: {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
        for r in (vidur_warm, vidur):
            r.pop("output_dir")
    rpm = {k: n / r["wall_s"] * 60 for k, r in ours.items()}
    vidur_rpm = n / vidur["wall_s"] * 60
    summary = {
        "workload": {
            "model": MODEL,
            "hardware": HARDWARE,
            "tp": 1,
            "requests": n,
            "prompt": PROMPT,
            "output": OUTPUT,
            "max_seqs": MAX_SEQS,
            "pinned_cpu": cpu,
        },
        "ridgeline": {k: {**r, "requests_per_min": rpm[k]} for k, r in ours.items()},
        "vidur": {
            "version": VIDUR_VERSION,
            "python": py,
            "model": VIDUR_MODEL,
            "device": VIDUR_DEVICE,
            "profile": profile,
            "config": "synthetic generator, fixed 1024/256, static intervals (all at t=0); vllm replica scheduler, "
            f"batch_size_cap {MAX_SEQS}, max_tokens_in_batch {MAX_TOKENS}; random_forrest predictor",
            "warmup": {**vidur_warm, "requests": warm_n},
            "timed": {**vidur, "requests_per_min": vidur_rpm},
        },
        "ratio_ridgeline_over_vidur": {k: rpm[k] / vidur_rpm for k in ours},
    }
    print(json.dumps(summary, indent=2, default=str))
    if args.json_out:
        args.json_out.write_text(json.dumps(summary, indent=2, default=str))

    print(f"\n{n:,} requests, prompt {PROMPT}, output {OUTPUT}, <= {MAX_SEQS} sequences, TP 1, one CPU: {cpu}")
    print(
        f"{'run':<34} {'wall s':>9} {'req/min':>12} {'RSS MiB':>8} {'x Vidur':>8} "
        f"{'tok/sim s':>10} {'TTFT ms':>9} {'TPOT ms':>8}"
    )
    rows = [(f"ridgeline {k}", r, rpm[k], rpm[k] / vidur_rpm) for k, r in ours.items()]
    rows += [
        ("Vidur warm-up (trains predictors)", vidur_warm, warm_n / vidur_warm["wall_s"] * 60, None),
        ("Vidur timed (cached predictors)", vidur, vidur_rpm, 1.0),
    ]
    for label, r, per_min, ratio in rows:
        x = f"{ratio:>8.1f}" if ratio is not None else f"{'':>8}"
        print(
            f"{label:<34} {r['wall_s']:>9.2f} {per_min:>12,.0f} {r['maxrss_mib']:>8.0f} {x} "
            f"{r['output_tok_per_sim_s']:>10,.0f} {r['ttft_mean_s'] * 1e3:>9.1f} {r['tpot_mean_s'] * 1e3:>8.2f}"
        )
    print(
        "TTFT at t=0 counts the wait in the queue; Vidur's from its first scheduling (nearer a closed loop's): "
        f"{vidur['ttft_from_scheduled_mean_s'] * 1e3:.1f} ms.\nVidur's process took {vidur['process_wall_s']:.1f} s "
        f"(imports {vidur['import_s']:.1f} s and output {vidur['output_s']:.1f} s are outside its wall s). "
        f"Vidur's profile: {profile}."
    )


if __name__ == "__main__":
    main()
