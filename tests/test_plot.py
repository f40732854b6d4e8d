"""``ridgeline plot``: each figure rendered, its axes labelled and its data series the numbers it plots."""

import os
import subprocess
import sys
from pathlib import Path

import matplotlib
import numpy as np
import polars as pl
import pytest
import ridgeline
from ridgeline import PlanError
from ridgeline import plot as figures

matplotlib.use("Agg")

LLAMA70 = "meta-llama/Llama-3.1-70B"


def _cli(*args, cwd):
    exe = Path(sys.executable).with_name("ridgeline")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, cwd=cwd, env=os.environ.copy())


@pytest.fixture(scope="module")
def tp4():
    return ridgeline.estimate(LLAMA70, "H100_SXM", tp=4, batch=16, breakdown=True)


def test_roofline_plots_each_operator_at_its_intensity_and_achieved_rate_under_the_roofs(tp4):
    fig = figures.roofline(tp4)
    ax = fig.axes[0]
    assert "intensity" in ax.get_xlabel() and "FLOP per byte" in ax.get_xlabel() and "FLOP/s" in ax.get_ylabel()
    assert ax.get_xscale() == ax.get_yscale() == "log"
    roof = ax.lines[0]
    x, y = roof.get_xdata(), roof.get_ydata()
    assert np.allclose(y, np.minimum(tp4.peak_tflops * 1e12, tp4.memory_bw_gbs * 1e9 * x))
    rows = tp4.breakdown.filter((pl.col("flops") > 0) & (pl.col("bytes") > 0))
    for coll, phase in zip(ax.collections, ("prefill", "decode")):
        r = rows.filter(pl.col("phase") == phase)
        pts = coll.get_offsets()
        assert np.allclose(pts[:, 0], (r["flops"] / r["bytes"]).to_numpy())
        assert np.allclose(pts[:, 1], (r["flops"] / r["time_s"]).to_numpy())
        # nothing priced runs above its roof
        assert (pts[:, 1] <= np.minimum(tp4.peak_tflops * 1e12, tp4.memory_bw_gbs * 1e9 * pts[:, 0]) * 1.0001).all()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["device roofs", "prefill", "decode"]
    # the operators it cannot place are named, not dropped
    assert "attn_allreduce" in fig.texts[0].get_text() and "step_overhead" in fig.texts[0].get_text()


def test_waterfall_bands_sum_to_tpot_and_ttft(tp4):
    for phase, total in (("decode", tp4.tpot_s), ("prefill", tp4.ttft_s)):
        bands = figures.waterfall_bands(tp4, phase)
        assert sum(v for _, v in bands) == pytest.approx(total, rel=1e-9)
        names = [b for b, _ in bands]
        assert "communication" in names and figures.LAUNCH_BAND in names and "dense FFN" in names
    fig = figures.waterfall(tp4)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "time per decode step (ms)"
    bars = ax.patches
    bands = figures.waterfall_bands(tp4)
    assert len(bars) == len(bands) + 1
    # each band rises from where the last ended; the last bar is TPOT
    tops = [b.get_y() + b.get_height() for b in bars[:-1]]
    assert [b.get_y() for b in bars[1:-1]] == pytest.approx(tops[:-1])
    assert bars[-1].get_height() == pytest.approx(tp4.tpot_s * 1e3) == pytest.approx(tops[-1])
    assert [t.get_text() for t in ax.get_xticklabels()] == [*(b for b, _ in bands), "TPOT"]


def test_scaling_draws_the_sweeps_numbers_one_line_per_device():
    hw = ["H100_SXM", "A100_SXM_80GB"]
    fig = figures.scaling("meta-llama/Llama-3.1-8B", hw, "batch", [1, 4, 16, 64, 256])
    df = ridgeline.sweep({"model": "meta-llama/Llama-3.1-8B", "hardware": hw, "batch": [1, 4, 16, 64, 256]})
    labels = ("TTFT (ms)", "TPOT (ms)", "output throughput (tok/s)")
    assert [a.get_ylabel() for a in fig.axes] == list(labels)
    assert all(a.get_xlabel() == "batch (sequences)" for a in fig.axes)
    for ax, col, k in zip(fig.axes, ("ttft_s", "tpot_s", "throughput_tok_s"), (1e3, 1e3, 1)):
        assert len(ax.lines) == 2
        for line, h in zip(ax.lines, hw):
            d = df.filter((pl.col("hardware") == h) & pl.col("fits")).sort("batch")
            assert list(line.get_xdata()) == d["batch"].to_list()
            assert np.allclose(line.get_ydata(), (d[col] * k).to_numpy())
    # batch 256 prefills 256k tokens at once: it does not fit an 80 GB part, and is left out
    assert 256 not in fig.axes[0].lines[0].get_xdata()
    with pytest.raises(PlanError, match="axis"):
        figures.scaling("meta-llama/Llama-3.1-8B", hw, "context", [1])


def test_compare_puts_each_plans_numbers_side_by_side():
    es = [ridgeline.estimate(LLAMA70, "H100_SXM", tp=t) for t in (4, 8)]
    fig = figures.compare(es)
    want = ([e.ttft_s * 1e3 for e in es], [e.tpot_s * 1e3 for e in es], [e.throughput_tok_s for e in es],
            [e.memory["total_bytes"] / 1e9 for e in es])  # fmt: skip
    for ax, w in zip(fig.axes, want):
        assert [p.get_height() for p in ax.patches] == pytest.approx(w)
    # each bar is named by its plan under it, not a letter decoded in a footer
    ticks = [t.get_text().replace("\n", " ") for t in fig.axes[0].get_xticklabels()]
    assert "TP4" in ticks[0] and "TP8" in ticks[1] and not fig.texts
    assert [t.get_text() for t in fig.axes[3].get_legend().get_texts()] == ["usable memory"]
    with pytest.raises(PlanError, match="at least two"):
        figures.compare(es[:1])


def test_cli_plot_writes_each_figure_and_keeps_an_existing_file(tmp_path):
    plan = ["-m", LLAMA70, "--tp", "4", "--batch", "8"]
    cases = (
        (["roofline", "-H", "H100_SXM", *plan], "r.png"),
        (["waterfall", "-H", "H100_SXM", *plan], "w.svg"),
        (["scaling", "-H", "H100_SXM", "-H", "H200", *plan, "--over", "tp", "--values", "2,4,8"], "s.png"),
        (["compare", "-H", "H100_SXM", *plan, "--vs", "tp=8", "--vs", "hardware=H200"], "c.png"),
    )
    for args, out in cases:
        r = _cli("plot", *args, "-o", out, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        head = (tmp_path / out).read_bytes()[:64]
        assert head.startswith(b"\x89PNG") if out.endswith(".png") else b"<svg" in (tmp_path / out).read_bytes()[:600]
    before = (tmp_path / "r.png").read_bytes()
    r = _cli("plot", "roofline", "-H", "H200", *plan, "-o", "r.png", cwd=tmp_path)
    assert r.returncode == 2 and "--force" in r.stderr and (tmp_path / "r.png").read_bytes() == before
    r = _cli("plot", "compare", "-H", "H100_SXM", *plan, "--vs", "gpus=8", "-o", "x.png", cwd=tmp_path)
    assert r.returncode == 2 and "KEY=VALUE" in r.stderr and "Traceback" not in r.stderr
    r = _cli("plot", "roofline", "-H", "H100_SXM", *plan, "-o", "x.jpg", cwd=tmp_path)
    assert r.returncode == 2 and "png, svg" in r.stderr and not (tmp_path / "x.jpg").exists()
