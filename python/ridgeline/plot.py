"""Plots of serving simulations (the ``plot`` extra: matplotlib): TTFT and ITL CDFs, the queue and
KV use over time, and the throughput-latency curve of a rate sweep, as PNG or SVG."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
    import numpy as np

    plt = _pyplot(fmt)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    if sim.requests is not None:
        ttft = np.sort(sim.requests["ttft_s"].drop_nans().drop_nulls().to_numpy()) * 1e3
        if ttft.size:
            axes[0].plot(ttft, np.arange(1, ttft.size + 1) / ttft.size)
    axes[0].set_xlabel("TTFT (ms)")
    axes[0].set_ylabel("share of requests")
    h = sim.itl_hist
    if h is not None and h.height:
        axes[1].plot(h["itl_s"].to_numpy() * 1e3, np.cumsum(h["tokens"].to_numpy()) / h["tokens"].sum())
    axes[1].set_xscale("log")
    axes[1].set_xlabel("inter-token latency (ms)")
    axes[1].set_ylabel("share of tokens")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle(f"{sim.model} on {sim.hardware}: {sim.workload['describe']}", fontsize=8)
    fig.tight_layout()
    p = out / f"latency_cdf.{fmt}"
    fig.savefig(p)
    plt.close(fig)
    paths.append(str(p))
    if sim.series is not None and sim.series.height:
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
        ax.legend(loc="upper left")
        fig.tight_layout()
        p = out / f"queue_kv.{fmt}"
        fig.savefig(p)
        plt.close(fig)
        paths.append(str(p))
    return paths


def rate_curve(sims: Sequence[Any], directory: str, fmt: str = "png") -> str:
    """Output throughput against TTFT and TPOT (p50 and p99) over a rate sweep's simulations."""
    plt = _pyplot(fmt)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    x = [s.output_tok_s for s in sims]
    for ax, key, label in ((axes[0], "ttft_s", "TTFT (ms)"), (axes[1], "tpot_s", "TPOT (ms)")):
        for q in ("p50", "p99"):
            ax.plot(x, [getattr(s, key)[q] * 1e3 for s in sims], marker="o", label=q)
        ax.set_xlabel("output tokens/s")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
    axes[0].set_yscale("log")
    for s, xi in zip(sims, x):
        axes[0].annotate(f"{s.workload['arrivals'].get('rate', 0):g}/s", (xi, s.ttft_s["p99"] * 1e3), fontsize=7)
    fig.suptitle(f"{sims[0].model} on {sims[0].hardware}: {sims[0].cluster['describe']}", fontsize=8)
    fig.tight_layout()
    p = out / f"rate_curve.{fmt}"
    fig.savefig(p)
    plt.close(fig)
    return str(p)
