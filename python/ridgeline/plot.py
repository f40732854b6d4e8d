"""Figures (the ``plot`` extra: matplotlib), as PNG or SVG.

Of plans: ``roofline`` (each operator's intensity and achieved FLOP/s under the device's roofs),
``waterfall`` (a decode step's time by operator class, communication and overheads included),
``scaling`` (TTFT, TPOT and throughput over batch, context or TP for one or more devices) and
``compare`` (plans side by side), and of a recommendation ``frontier`` (cost against TTFT, the
Pareto plans joined); each returns a matplotlib Figure, ``save`` writes one. Of
serving simulations: TTFT and ITL CDFs, the queue and KV use over time, and the
throughput-latency curve of a rate sweep (``simulation``, ``rate_curve``: written to a folder)."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from .errors import PlanError

FORMATS = ("png", "svg")


def _pyplot(fmt: str) -> Any:
    if fmt not in FORMATS:
        raise PlanError(f"format: must be one of {', '.join(FORMATS)}, got {fmt!r}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlanError("plots need matplotlib: pip install 'ridgeline[plot]'") from None
    return plt


def simulation(sim: Any, directory: str, fmt: str = "png") -> list[str]:
    """The CDFs of TTFT (per request; needs ``keep_requests``) and ITL (per token), and the
    queue and KV use over time (needs ``sample_s``) of one ``Simulation``. Returns the paths."""
    plt = _pyplot(fmt)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fig in (("latency_cdf", latency_cdf(sim)), ("queue_kv", queue_kv(sim))):
        if fig is None:
            continue
        p = out / f"{name}.{fmt}"
        fig.savefig(p)
        plt.close(fig)
        paths.append(str(p))
    return paths


def latency_cdf(sim: Any) -> Any:
    """The CDFs of TTFT (per request; needs ``keep_requests``) and inter-token latency (per token)
    of one ``Simulation``, with its TTFT and TPOT objectives where it has them. Returns the Figure."""
    import numpy as np

    plt = _pyplot("png")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    if sim.requests is not None:
        ttft = np.sort(sim.requests["ttft_s"].drop_nans().drop_nulls().to_numpy()) * 1e3
        if ttft.size:
            axes[0].plot(ttft, np.arange(1, ttft.size + 1) / ttft.size, label="TTFT, each request")
    axes[0].set_xlabel("TTFT (ms)")
    axes[0].set_ylabel("share of requests")
    h = sim.itl_hist
    if h is not None and h.height:
        axes[1].plot(h["itl_s"].to_numpy() * 1e3, np.cumsum(h["tokens"].to_numpy()) / h["tokens"].sum(),
                     label="inter-token latency, each token")  # fmt: skip
    axes[1].set_xscale("log")
    axes[1].set_xlabel("inter-token latency (ms)")
    axes[1].set_ylabel("share of tokens")
    _slo_lines(axes, sim.slo, vertical=True)
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{sim.model} on {sim.hardware}: {sim.workload['describe']}", fontsize=8)
    fig.tight_layout()
    return fig


def queue_kv(sim: Any) -> Any:
    """Requests waiting and running and the KV blocks in use over time (needs ``sample_s``), one
    legend for both axes; None where the run kept no series."""
    if sim.series is None or not sim.series.height:
        return None
    plt = _pyplot("png")
    s = sim.series
    fig, ax = plt.subplots(figsize=(10, 4))
    t = s["t_s"].to_numpy()
    ax.plot(t, s["waiting"].to_numpy(), label="waiting")
    ax.plot(t, s["running"].to_numpy(), label="running")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("requests")
    kv = ax.twinx()
    kv.plot(t, s["kv_used"].to_numpy() * 100, color="grey", lw=0.8, label="KV in use")
    kv.set_ylabel("KV blocks in use (%)")
    kv.set_ylim(0, 100)
    # one legend for both axes: the KV line is on the right-hand axis
    handles = [h for a in (ax, kv) for h in a.get_legend_handles_labels()[0]]
    ax.legend(handles, [str(h.get_label()) for h in handles], loc="upper left")
    fig.suptitle(f"{sim.model} on {sim.hardware}: {sim.workload['describe']}", fontsize=8)
    fig.tight_layout()
    return fig


def _slo_lines(axes: Any, slo: Any, *, vertical: bool) -> None:
    """The run's TTFT objective on the first panel and its TPOT objective on the second (a line
    across the axis the latency is on), each in the legend; none where the run set none."""
    slo = slo or {}
    for ax, key, name in ((axes[0], "ttft", "TTFT"), (axes[1], "tpot", "TPOT")):
        v = slo.get(key) if isinstance(slo, Mapping) else None
        if v is not None:
            line = ax.axvline if vertical else ax.axhline
            line(float(v), color="red", ls="--", lw=1, label=f"{name} objective {v:g} ms")


def rate_curve(sims: Sequence[Any], directory: str, fmt: str = "png") -> str:
    """Output throughput against TTFT and TPOT (p50 and p99) over a rate sweep's simulations,
    written to ``directory``. Returns the path."""
    plt = _pyplot(fmt)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    fig = rate_curve_figure(sims)
    p = out / f"rate_curve.{fmt}"
    fig.savefig(p)
    plt.close(fig)
    return str(p)


def rate_curve_figure(sims: Sequence[Any]) -> Any:
    """Output throughput against TTFT and TPOT (p50 and p99), with the objectives. Returns the Figure."""
    plt = _pyplot("png")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    x = [s.output_tok_s for s in sims]
    for ax, key, label in ((axes[0], "ttft_s", "TTFT (ms)"), (axes[1], "tpot_s", "TPOT (ms)")):
        for q in ("p50", "p99"):
            ax.plot(x, [getattr(s, key)[q] * 1e3 for s in sims], marker="o", label=q)
        ax.set_xlabel("output tokens/s")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    _slo_lines(axes, sims[0].slo, vertical=False)
    for ax in axes:
        ax.legend(fontsize=7)
    axes[0].set_yscale("log")
    for s, xi in zip(sims, x):
        axes[0].annotate(f"{s.workload['arrivals'].get('rate', 0):g}/s", (xi, s.ttft_s["p99"] * 1e3), fontsize=7)
    fig.suptitle(f"{sims[0].model} on {sims[0].hardware}: {sims[0].cluster['describe']}", fontsize=8)
    fig.tight_layout()
    return fig


#: Operator classes of the decode waterfall, by the engine's operator names (rust/src/graph/mod.rs
#: ``OpKind::name``); an operator not listed is its own band, so none is dropped.
OP_CLASSES = {
    "attention projections": ("qkv_proj", "q_lora_proj", "kv_lora_proj", "kv_up_proj", "q_absorb", "v_unabsorb",
                              "o_proj", "attn_gate", "indexer_proj"),
    "attention": ("attention", "kv_cache_write", "rotary", "qk_norm", "latent_norm", "indexer_cache_write",
                  "indexer_scores"),
    "linear attention": ("linear_in_proj", "short_conv", "linear_attention", "gated_norm", "linear_out_proj"),
    "dense FFN": ("ffn_up", "ffn_act", "ffn_down"),
    "MoE experts": ("router", "expert_up", "expert_act", "expert_down", "shared_expert_up", "shared_expert_act",
                    "shared_expert_down", "moe_latent_proj"),
    "communication": ("embedding_allreduce", "attn_allreduce", "ffn_allreduce", "logits_allgather",
                      "expert_dispatch_combine", "pp_send"),
    "embedding and head": ("embedding", "position_embedding", "final_norm", "lm_head"),
    "norms and quantisation": ("norm", "act_quant", "kv_up_act_quant"),
    "layer, step and front-end overhead": ("layer_overhead", "step_overhead", "request_overhead"),
}  # fmt: skip
_CLASS_OF = {op: c for c, ops in OP_CLASSES.items() for op in ops}
LAUNCH_BAND = "kernel launches / floors"


def _breakdown(e: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = e.breakdown_rows()
    return rows


def _title(e: Any) -> str:
    p = e.plan
    par = "".join(f", {k.upper()} {p[k]}" for k in ("tp", "ep", "pp") if p[k] > 1)
    spill = "" if e.fits else "; does NOT fit: priced as if every weight were resident"
    return (f"{e.model} on {e.hardware}{par}: batch {p['batch']}, prompt {p['prompt']}, "
            f"{p['weights']} weights; {p['runtime'] or 'no runtime'}, {e.basis}{spill}")  # fmt: skip


def roofline(e: Any) -> Any:
    """The roofline chart of one estimate's operators: arithmetic intensity (FLOP per byte moved)
    against the FLOP/s each operator achieves as priced, prefill and decode, under the device's
    compute and memory roofs. Operators without FLOPs or bytes (copies, collectives, overheads) have
    no intensity and are listed under the chart. Returns the Figure."""
    import numpy as np

    plt = _pyplot("png")
    rows = _breakdown(e)
    fig, ax = plt.subplots(figsize=(9, 5.5))
    peak, bw = e.peak_tflops * 1e12, e.memory_bw_gbs * 1e9
    pts = [r for r in rows if r["flops"] > 0 and r["bytes"] > 0 and r["time_s"] > 0]
    x = np.array([r["flops"] / r["bytes"] for r in pts])
    lo, hi = min(x.min() / 3, 0.1), max(x.max() * 3, 3 * peak / bw)
    grid = np.geomspace(lo, hi, 200)
    ax.plot(grid, np.minimum(peak, bw * grid), color="black", lw=1.5, label="device roofs")
    ax.annotate(f"{e.peak_tflops:,.0f} TFLOP/s ({e.gemm_dtype})", (peak / bw * 1.15, peak * 1.15), va="bottom",
                fontsize=8)  # fmt: skip
    ax.annotate(f"{e.memory_bw_gbs:,.0f} GB/s", (lo * 1.5, bw * lo * 1.5 * 1.3), va="bottom", fontsize=8)
    ax.axvline(peak / bw, color="grey", lw=0.6, ls=":")
    for phase, marker, color in (("prefill", "o", "tab:blue"), ("decode", "^", "tab:orange")):
        sel = [r for r in pts if r["phase"] == phase]
        if not sel:
            continue
        xs = [r["flops"] / r["bytes"] for r in sel]
        ys = [r["flops"] / r["time_s"] for r in sel]
        ax.scatter(xs, ys, marker=marker, color=color, s=36, label=phase, zorder=3)
        # operators at nearly the same point share one label (a GEMM family at one intensity)
        clusters: list[tuple[float, float, list[str]]] = []
        for r, xi, yi in zip(sel, xs, ys):
            near = next((c for c in clusters if abs(np.log10(c[0] / xi)) < 0.5 and abs(np.log10(c[1] / yi)) < 0.08),
                        None)  # fmt: skip
            if near is None:
                clusters.append((xi, yi, [r["op"]]))
            elif r["op"] not in near[2]:
                near[2].append(r["op"])
        for xi, yi, ops in clusters:
            text = ", ".join(ops[:4]) + (f" +{len(ops) - 4}" if len(ops) > 4 else "")
            ax.annotate(text, (xi, yi), fontsize=6.5, color=color, xytext=(4, -9),
                        textcoords="offset points")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ys_all = [r["flops"] / r["time_s"] for r in pts]
    ax.set_ylim(min(bw * lo, *ys_all) / 3, peak * 3)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of device memory)")
    ax.set_ylabel("achieved FLOP/s (as priced)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="lower right", fontsize=8)
    off = sorted({r["op"] for r in rows} - {r["op"] for r in pts})
    if off:
        fig.text(0.01, 0.01, "not shown (no FLOPs or no bytes): " + ", ".join(off), fontsize=6.5)
    ax.set_title(_title(e), fontsize=8)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def waterfall_bands(e: Any, phase: str = "decode") -> list[tuple[str, float]]:
    """The time of one step of ``phase`` (decode: TPOT; prefill: TTFT) split into bands per operator
    class (``OP_CLASSES``), kernel launches and floors in a band of their own; the bands sum to the
    step's time. (band, seconds) pairs, largest first."""
    rows = [r for r in _breakdown(e) if r["phase"] == phase]
    steps = int(e.decode["steps"]) if phase == "decode" else 1
    bands: dict[str, float] = {}
    for r in rows:
        band = _CLASS_OF.get(r["op"], r["op"])
        bands[band] = bands.get(band, 0.0) + (r["time_s"] - r["launch_s"]) / steps
        bands[LAUNCH_BAND] = bands.get(LAUNCH_BAND, 0.0) + r["launch_s"] / steps
    return sorted(((k, v) for k, v in bands.items() if v > 0), key=lambda kv: -kv[1])


def waterfall(e: Any, phase: str = "decode") -> Any:
    """The decode-time waterfall (``phase="prefill"``: the prefill's): one bar per operator class
    rising from where the last ended, communication and overheads included, to the total (TPOT or
    TTFT) at the right. Returns the Figure."""
    plt = _pyplot("png")
    bands = waterfall_bands(e, phase)
    total = sum(v for _, v in bands) * 1e3
    fig, ax = plt.subplots(figsize=(9, 5))
    base = 0.0
    names = [b for b, _ in bands] + ["TPOT" if phase == "decode" else "TTFT"]
    for i, (band, v) in enumerate(bands):
        ms_ = v * 1e3
        ax.bar(i, ms_, bottom=base, color="tab:red" if band == "communication" else "tab:blue", alpha=0.85)
        ax.annotate(f"{ms_:.3g}", (i, base + ms_), ha="center", va="bottom", fontsize=7)
        base += ms_
    ax.bar(len(bands), total, color="black")
    ax.annotate(f"{total:.3g} ms", (len(bands), total), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(f"time per {'decode step' if phase == 'decode' else 'prefill'} (ms)")
    ax.set_ylim(0, total * 1.1)
    ax.grid(alpha=0.3, axis="y")
    ax.set_title(_title(e), fontsize=8)
    fig.tight_layout()
    return fig


SCALING_AXES = ("batch", "prompt", "output", "tp")


def scaling(model: str, hardware: Sequence[str], axis: str, values: Sequence[int], **plan: Any) -> Any:
    """TTFT, TPOT and output throughput over one plan axis (batch, prompt, output or tp) for one or
    more devices, from one sweep; plans that do not fit or cannot be priced are left out (a gap).
    Returns the Figure."""
    import polars as pl

    from .sweeps.sweep import sweep

    if axis not in SCALING_AXES:
        raise PlanError(f"axis: must be one of {', '.join(SCALING_AXES)}, got {axis!r}")
    if not values:
        raise PlanError(f"values: give at least one {axis}")
    plt = _pyplot("png")
    calibrated = plan.pop("calibrated", True)
    grid = {**{k: v for k, v in plan.items() if v is not None}, "model": model, "hardware": list(hardware),
            axis: list(values)}  # fmt: skip
    df = sweep(grid, calibrated=calibrated)
    drawn = df.filter(pl.col("error").is_null() & pl.col("fits"))
    if drawn.height == 0:
        why = df.filter(pl.col("error").is_not_null())["error"].to_list()
        raise PlanError(f"plot scaling: no plan of {model} over {axis} {', '.join(map(str, values))} fits on "
                        f"{', '.join(hardware)}" + (f" ({why[0]})" if why else "") + "; nothing to draw")  # fmt: skip
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    for hw in hardware:
        d = df.filter((pl.col("hardware") == hw) & pl.col("error").is_null() & pl.col("fits")).sort(axis)
        label = hw if d.height else f"{hw} (no plan fits)"
        for ax, col, k in ((axes[0], "ttft_s", 1e3), (axes[1], "tpot_s", 1e3), (axes[2], "throughput_tok_s", 1)):
            ax.plot(d[axis].to_list(), (d[col] * k).to_list(), marker="o", label=label)
    from matplotlib.ticker import FuncFormatter, LogLocator

    plain = FuncFormatter(lambda v, _: f"{v:,.10g}")
    for ax, name in zip(axes, ("TTFT (ms)", "TPOT (ms)", "output throughput (tok/s)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(plain)
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        ax.set_xlabel({"batch": "batch (sequences)", "prompt": "prompt (tokens)", "output": "output (tokens)",
                       "tp": "tensor-parallel degree"}[axis])  # fmt: skip
        ax.set_ylabel(name)
        ax.grid(alpha=0.3, which="both")
    axes[2].legend(fontsize=8)
    fixed = ", ".join(f"{k} {v}" for k, v in plan.items() if v is not None and k != axis)
    fig.suptitle(f"{model}: over {axis}" + (f" ({fixed})" if fixed else "")
                 + "; plans that do not fit are not drawn", fontsize=9)  # fmt: skip
    fig.tight_layout()
    return fig


def compare(estimates: Sequence[Any], labels: Optional[Sequence[str]] = None) -> Any:
    """Two or more plans side by side: TTFT, TPOT, output throughput and memory per device, one bar
    per plan, labelled. Returns the Figure."""
    if len(estimates) < 2:
        raise PlanError(f"compare: give at least two plans, got {len(estimates)}")
    if labels is not None and len(labels) != len(estimates):
        raise PlanError(f"labels: {len(labels)} given for {len(estimates)} plans")
    plt = _pyplot("png")
    names = list(labels) if labels is not None else [_plan_label(e) for e in estimates]
    fig, axes = plt.subplots(1, 4, figsize=(14, 4.2))
    metrics = (("TTFT (ms)", [e.ttft_s * 1e3 for e in estimates]),
               ("TPOT (ms)", [(e.tpot_s or 0.0) * 1e3 for e in estimates]),
               ("output throughput (tok/s)", [e.throughput_tok_s for e in estimates]),
               ("memory per device (GB)", [e.memory["total_bytes"] / 1e9 for e in estimates]))  # fmt: skip
    colors = [f"C{i}" for i in range(len(estimates))]
    for ax, (name, vals) in zip(axes, metrics):
        ax.bar(range(len(vals)), vals, color=colors)
        for i, v in enumerate(vals):
            ax.annotate(f"{v:,.3g}", (i, v), ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(vals)))
        ax.set_xticklabels([textwrap.fill(n, 16) for n in names], fontsize=6)
        ax.set_ylabel(name)
        ax.set_ylim(0, max(vals) * 1.15 or 1)
        ax.grid(alpha=0.3, axis="y")
    budget = [e.memory["budget_bytes"] / 1e9 for e in estimates]
    for i, b in enumerate(budget):
        axes[3].hlines(b, i - 0.4, i + 0.4, color="black", lw=1, label="usable memory" if i == 0 else None)
    axes[3].set_ylim(0, max(*budget, *metrics[3][1]) * 1.25)
    axes[3].legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    return fig


def frontier(rec: Any) -> Any:
    """A recommendation's plans as cost per million output tokens against TTFT at its percentile,
    the Pareto frontier joined as a step line and each frontier plan labelled (device, plan,
    replicas). Returns the Figure."""
    from .recommend import load_text, plan_label

    if not rec.plans:
        raise PlanError("frontier: the recommendation has no plan that meets the SLOs")
    plt = _pyplot("png")
    q = rec.workload["shown_quantile"]
    fig, ax = plt.subplots(figsize=(9, 5.5))
    devices = sorted({p["hardware"] for p in rec.plans})
    for i, d in enumerate(devices):
        pts = [p for p in rec.plans if p["hardware"] == d]
        ax.scatter([p["ttft_q_s"] * 1e3 for p in pts], [p["usd_per_million_output_tokens"] for p in pts],
                   color=f"C{i % 10}", marker="osD^v"[i // 10 % 5], label=d, s=28, alpha=0.8)  # fmt: skip
    front = sorted(rec.frontier(), key=lambda p: p["ttft_q_s"])
    xs, ys = [p["ttft_q_s"] * 1e3 for p in front], [p["usd_per_million_output_tokens"] for p in front]
    ax.step(xs, ys, where="post", color="black", lw=1, label="Pareto frontier")
    for p, x, y in zip(front, xs, ys):
        ax.annotate(f"{p['hardware']} {plan_label(p)} x{p['replicas']}", (x, y), textcoords="offset points",
                    xytext=(4, 4), fontsize=7)  # fmt: skip
    ax.set_xlabel(f"{q} TTFT (ms)")
    ax.set_ylabel("USD per million output tokens")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    w = rec.workload
    slo = ", ".join(f"{k} {w[f'slo_{k.lower()}_ms']:g} ms" for k in ("TTFT", "TPOT") if w[f"slo_{k.lower()}_ms"])
    ax.set_title(f"{rec.model}: {load_text(w)}, p{w['percentile']:g} within {slo}", fontsize=9)
    fig.tight_layout()
    return fig


def budget_frontier(b: Any) -> Any:
    """A GPU budget's points (``planner.BudgetPlan``) as output tokens/s per GPU against tokens/s
    per user, aggregated and disaggregated apart, hollow where they miss the objectives, the
    frontier joined and each of its plans labelled. Returns the Figure."""
    plt = _pyplot("png")
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for i, kind in enumerate(("aggregated", "disaggregated")):
        for ok in (True, False):
            pts = [p for p in b.points if p.kind == kind and p.meets == ok]
            if pts:
                ax.scatter([p.tok_s_per_user for p in pts], [p.tok_s_per_gpu for p in pts], s=26, marker="os"[i],
                           facecolors=f"C{i}" if ok else "none", edgecolors=f"C{i}",
                           label=f"{kind}" + ("" if ok else ", misses the objectives"))  # fmt: skip
    front = b.frontier
    ax.plot([p.tok_s_per_user for p in front], [p.tok_s_per_gpu for p in front], color="black", lw=1,
            label="frontier")  # fmt: skip
    for p in front:
        ax.annotate(f"{p.label}, {p.clients} clients", (p.tok_s_per_user, p.tok_s_per_gpu),
                    textcoords="offset points", xytext=(4, 4), fontsize=6)  # fmt: skip
    w = b.workload
    if w["slo_tpot_ms"]:
        ax.axvline(1000.0 / w["slo_tpot_ms"], color="grey", ls="--", lw=1, label=f"TPOT {w['slo_tpot_ms']:g} ms")
    ax.set_xlabel("output tokens/s per user (1 / mean TPOT)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(f"{b.model} on {b.gpus} x {b.hardware}: {w['describe']}", fontsize=9)
    fig.tight_layout()
    return fig


def _plan_label(e: Any) -> str:
    p = e.plan
    par = "".join(f" {k.upper()}{p[k]}" for k in ("tp", "ep", "pp") if p[k] > 1)
    return f"{e.model.split('/')[-1]} on {e.hardware}{par} b{p['batch']} {p['weights']} ({p['runtime'] or 'bound'})"


def save(fig: Any, path: str, *, force: bool = False) -> str:
    """Writes a Figure to ``path`` (.png or .svg) through the atomic writer: an existing file is
    kept unless ``force``. Returns the path."""
    from ._io import atomic_output

    fmt = Path(path).suffix.lstrip(".").lower()
    plt = _pyplot(fmt)
    with atomic_output(path, force=force, what="out") as tmp:
        fig.savefig(tmp, format=fmt, dpi=150)
    plt.close(fig)
    return path


def validation(records: Sequence[dict[str, Any]], directory: str) -> list[str]:
    """A log-log scatter of observed against predicted speed and a residual plot per phase
    (needs the `plot` extra: matplotlib). Returns the PNG paths."""
    plt = _pyplot("png")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    fig, ax = plt.subplots(figsize=(6, 6))
    lo, hi = math.inf, 0.0
    for phase, marker in (("decode", "o"), ("prefill", "s"), ("e2e", "^")):
        rs = [r for r in records if r["phase"] == phase and r["metric"] != "ttft_ms" and not math.isnan(r["lodo"])]
        if rs:
            obs = [float(r["observed"]) for r in rs]
            pred = [float(r["observed"]) / float(r["lodo"]) for r in rs]
            lo, hi = min(lo, *obs, *pred), max(hi, *obs, *pred)
            ax.scatter(pred, obs, s=10, marker=marker, label=f"{phase} ({len(rs)})", alpha=0.6)
    ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8)
    ax.plot([lo, hi], [lo * 1.5, hi * 1.5], color="grey", lw=0.6, ls="--")
    ax.plot([lo, hi], [lo / 1.5, hi / 1.5], color="grey", lw=0.6, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("predicted tokens/s (leave-one-device-out)")
    ax.set_ylabel("observed tokens/s")
    ax.legend()
    fig.tight_layout()
    p1 = out / "validation_scatter.png"
    fig.savefig(p1, dpi=120)
    plt.close(fig)
    paths.append(str(p1))
    fig = residuals(records)
    p2 = out / "validation_residuals.png"
    fig.savefig(p2, dpi=120)
    plt.close(fig)
    paths.append(str(p2))
    return paths


def rows(records: Sequence[dict[str, Any]], directory: str) -> list[str]:
    """Observed against predicted for priced rows (``validate --rows`` and ``--serving``): one
    log-log panel per metric, each runtime its colour, the 1.5x band dashed. Returns the path."""
    plt = _pyplot("png")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    priced = [r for r in records if r.get("predicted") is not None and r.get("observed") is not None]
    if not priced:
        raise PlanError("plot: no row was priced, so there is nothing to draw")
    metrics = sorted({str(r["metric"]) for r in priced})
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 5), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        rs = [r for r in priced if r["metric"] == metric]
        for rt in sorted({str(r.get("runtime")) for r in rs}):
            mine = [r for r in rs if str(r.get("runtime")) == rt]
            ax.scatter([float(r["predicted"]) for r in mine], [float(r["observed"]) for r in mine], s=10, alpha=0.6,
                       label=f"{rt} ({len(mine)} rows)")  # fmt: skip
        vals = [float(r[k]) for r in rs for k in ("predicted", "observed") if float(r[k]) > 0]
        lo, hi = min(vals), max(vals)
        ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8, label="observed = predicted")
        ax.plot([lo, hi], [lo * 1.5, hi * 1.5], color="grey", lw=0.6, ls="--", label="1.5x either way")
        ax.plot([lo, hi], [lo / 1.5, hi / 1.5], color="grey", lw=0.6, ls="--")
        ax.set_xscale("log")
        ax.set_yscale("log")
        unit = rs[0].get("unit", "")
        ax.set_xlabel(f"predicted {metric} ({unit})" if unit else f"predicted {metric}")
        ax.set_ylabel(f"observed {metric} ({unit})" if unit else f"observed {metric}")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    p = out / "validation_rows.png"
    fig.savefig(p, dpi=120)
    plt.close(fig)
    return [str(p)]


def residuals(records: Sequence[dict[str, Any]]) -> Any:
    """Observed / predicted (each device predicted by a fit without it) by device, each phase its
    marker and colour in the legend, wide enough that every device's name reads. Returns the Figure."""
    plt = _pyplot("png")
    devices = sorted({r["hardware"] for r in records})
    # a label's room a device (0.22 in), so 50 devices' names do not overlap
    fig, ax = plt.subplots(figsize=(max(8.0, 0.22 * len(devices) + 1.5), 4.5))
    at = {d: i for i, d in enumerate(devices)}
    for phase, marker in (("decode", "o"), ("prefill", "s"), ("e2e", "^")):
        rs = [r for r in records if r["phase"] == phase and not math.isnan(r["lodo"])]
        if rs:
            ax.scatter([at[r["hardware"]] for r in rs], [float(r["lodo"]) for r in rs], s=8, alpha=0.6,
                       marker=marker, label=f"{phase} ({len(rs)} rows)")  # fmt: skip
    ax.set_yscale("log")
    for y in (1 / 1.5, 1.0, 1.5):
        ax.axhline(y, color="grey", lw=0.8, ls="-" if y == 1.0 else "--")
    ax.set_xticks(range(len(devices)))
    ax.set_xticklabels(devices, rotation=70, fontsize=7)
    ax.set_ylabel("observed / predicted (LODO)")
    ax.set_xlabel("device (each predicted by a fit without it); dashed: 1.5x either way")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
