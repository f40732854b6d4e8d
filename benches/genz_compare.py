"""Side by side with GenZ (genz-llm 0.0.16, from PyPI) on the same 20 plans (opt-in):

    python benches/genz_compare.py [--genz-python /path/to/venv/bin/python]

Without --genz-python it makes its own venv under the system temp folder and
installs genz-llm==0.0.16 there (it needs the PyPI registry). It reports both
tools' TTFT and TPOT for each plan, GenZ's estimates per second (prefill +
decode, warm) against ridgeline's plans per second in the sweep path, and the
causes of the differences read off GenZ's own operator table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time

import numpy as np
from _peers import peer_python  # benches/, beside this script

# ridgeline id -> (GenZ model name, TP that fits an 80 GB H100)
MODELS = {
    "meta-llama/Llama-3.1-8B": ("meta-llama/meta-llama-3.1-8b", 1),
    "meta-llama/Llama-3.1-70B": ("meta-llama/meta-llama-3.1-70b", 4),
    "Qwen/Qwen2.5-7B": ("Qwen/Qwen2.5-7B", 1),
    "mistralai/Mixtral-8x7B-v0.1": ("mistralai/Mixtral-8x7B", 2),
}
SHAPES = [(1, 128, 128), (1, 1024, 256), (8, 2048, 256), (1, 8192, 128), (16, 4096, 512)]
PLANS = [
    {"model": m, "genz": g, "batch": b, "prompt": p, "output": o, "tp": tp}
    for m, (g, tp) in MODELS.items()
    for (b, p, o) in SHAPES
]

GENZ_SCRIPT = r"""
import json, sys, time, warnings
warnings.filterwarnings("ignore")
from GenZ import prefill_moddeling, decode_moddeling
plans = json.loads(sys.stdin.read())
def run(p):
    pre = prefill_moddeling(model=p["genz"], batch_size=p["batch"], input_tokens=p["prompt"],
                            system_name="H100_GPU", bits="bf16", tensor_parallel=p["tp"])
    dec = decode_moddeling(model=p["genz"], batch_size=p["batch"], input_tokens=p["prompt"],
                           output_tokens=p["output"], Bb=1, system_name="H100_GPU", bits="bf16",
                           tensor_parallel=p["tp"])
    df = pre["model_df"]
    logit = df[df["Op Type"] == "Logit"]  # one layer's QK^T inside GenZ's Repeat block
    return {"ttft_ms": float(pre["Latency"]), "tpot_ms": float(dec["Latency"]),
            "logit_mflop_per_layer": float(logit["Num ops (MFLOP)"].sum())}
def safe(p):
    try:
        return run(p)
    except Exception as e:  # GenZ refuses some plans (unknown model, does not fit)
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"}
safe(plans[0])  # warm
out, t0 = [], time.perf_counter()
for p in plans:
    out.append(safe(p))
dt = time.perf_counter() - t0
print(json.dumps({"results": out, "seconds": dt}))
"""


def genz_python(given: str | None) -> str:
    return peer_python(given, "ridgeline-genz-venv", "genz-llm==0.0.16")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--genz-python", default=os.environ.get("GENZ_PYTHON"))
    args = ap.parse_args()
    r = subprocess.run([genz_python(args.genz_python), "-c", GENZ_SCRIPT], input=json.dumps(PLANS),
                       capture_output=True, text=True, check=True)  # fmt: skip
    genz = json.loads(r.stdout.strip().splitlines()[-1])
    genz_rate = len(PLANS) / genz["seconds"]

    import ridgeline

    ours = []
    for p in PLANS:
        e = ridgeline.estimate(p["model"], "H100_SXM", batch=p["batch"], prompt=p["prompt"], output=p["output"],
                               tp=p["tp"], allow_no_fit=True, runtime="none")  # fmt: skip
        att = e.breakdown.filter((e.breakdown["phase"] == "prefill") & (e.breakdown["op"] == "attention"))
        ours.append({"ttft_ms": e.ttft_s * 1e3, "tpot_ms": (e.tpot_s or 0) * 1e3, "attn_flop": att["flops"].sum()})
    # the sweep path on the same 20 plans: each model's plans tiled into one Rust call
    from ridgeline import _core
    from ridgeline.catalog.store import default_catalog
    from ridgeline.engine.estimate import prepare
    from ridgeline.models.config import Model

    cat = default_catalog()
    dev = cat.get("H100_SXM")
    reps, total, t0 = 20_000, 0, time.perf_counter()
    for m in MODELS:
        ps = [p for p in PLANS if p["model"] == m]
        cols = [
            np.tile(np.array([p[k] for p in ps], dtype=np.int64), reps) for k in ("batch", "prompt", "output", "tp")
        ]
        r = _core.estimate_many(prepare(Model.from_config(m), dev, cat, runtime="none").core, *cols)
        total += len(r["e2e_s"])
    ours_rate = total / (time.perf_counter() - t0)
    n_layers = {m: Model.from_config(m).num_layers for m in MODELS}

    print(f"{'plan':<48} {'GenZ TTFT':>10} {'ours':>9} {'ratio':>6}   {'GenZ TPOT':>10} {'ours':>9} {'ratio':>6}")
    for p, g, o in zip(PLANS, genz["results"], ours):
        label = f"{p['model'].split('/')[1]} b{p['batch']} {p['prompt']}+{p['output']} tp{p['tp']}"
        if "error" in g:
            print(f"{label:<48} GenZ: {g['error']}")
            continue
        print(f"{label:<48} {g['ttft_ms']:>10.3f} {o['ttft_ms']:>9.3f} {o['ttft_ms'] / g['ttft_ms']:>6.2f}   "
              f"{g['tpot_ms']:>10.3f} {o['tpot_ms']:>9.3f} {o['tpot_ms'] / g['tpot_ms']:>6.2f}")  # fmt: skip
        # GenZ's QK^T over all layers against our causal QK^T (half of our attention FLOPs)
        g["qk_ratio"] = g["logit_mflop_per_layer"] * 1e6 * n_layers[p["model"]] / (o["attn_flop"] / 2)
    both = [(g, o) for g, o in zip(genz["results"], ours) if "error" not in g]
    ttft = [o["ttft_ms"] / g["ttft_ms"] for g, o in both]
    tpot = [o["tpot_ms"] / g["tpot_ms"] for g, o in both]
    qk = [g["qk_ratio"] for g in genz["results"] if g.get("qk_ratio")]
    print(f"\nmedian ridgeline/GenZ: TTFT {np.median(ttft):.2f}, TPOT {np.median(tpot):.2f}")
    if qk:
        print(f"GenZ QK^T FLOPs over ridgeline's causal count: median {np.median(qk):.2f} "
              "(2.0 = full S^2 instead of the S(S+1)/2 triangle)")  # fmt: skip
    print(f"GenZ: {genz_rate:,.1f} estimates/s (prefill + decode, warm); ridgeline sweep: {ours_rate:,.0f} plans/s; "
          f"ratio {ours_rate / genz_rate:,.0f}x")  # fmt: skip


if __name__ == "__main__":
    main()
