"""Figures a person can read without the docs (issue 46): each rendered, its axes labelled and its
legend naming every line it draws: the objectives on the latency CDFs and the rate curve, the KV
line of the queue plot, the phases of the residual plot, the plans under compare's bars."""

import matplotlib
import pytest
import ridgeline
from ridgeline import plot as figures

matplotlib.use("Agg")

LLAMA = "meta-llama/Llama-3.1-8B"


def _legend(ax):
    leg = ax.get_legend()
    return [t.get_text() for t in leg.get_texts()] if leg else []


@pytest.fixture(scope="module")
def sim():
    return ridgeline.simulate(LLAMA, "H100_SXM", rate=8, requests=120, prompt=512, output=64, slo_ttft_ms=200,
                              slo_tpot_ms=12, keep_requests=True, sample_s=0.05)  # fmt: skip


def test_latency_cdfs_draw_the_objectives(sim):
    fig = figures.latency_cdf(sim)
    ttft, itl = fig.axes
    assert ttft.get_xlabel() == "TTFT (ms)" and itl.get_xlabel() == "inter-token latency (ms)"
    assert _legend(ttft) == ["TTFT, each request", "TTFT objective 200 ms"]
    assert _legend(itl) == ["inter-token latency, each token", "TPOT objective 12 ms"]
    # the objective line sits at its value
    assert list(ttft.lines[1].get_xdata()) == [200.0, 200.0]
    # a run without objectives draws no line and says none
    bare = ridgeline.simulate(LLAMA, "H100_SXM", rate=8, requests=40, prompt=512, output=64, keep_requests=True)
    assert _legend(figures.latency_cdf(bare).axes[0]) == ["TTFT, each request"]


def test_queue_plot_names_the_kv_line(sim):
    fig = figures.queue_kv(sim)
    assert _legend(fig.axes[0]) == ["waiting", "running", "KV in use"]
    assert fig.axes[1].get_ylabel() == "KV blocks in use (%)"
    no_series = ridgeline.simulate(LLAMA, "H100_SXM", rate=8, requests=20, prompt=512, output=64)
    assert figures.queue_kv(no_series) is None


def test_rate_curve_draws_the_objectives():
    sims = [ridgeline.simulate(LLAMA, "H100_SXM", rate=r, requests=60, prompt=512, output=64, slo_ttft_ms=200,
                               slo_tpot_ms=12) for r in (2, 8)]  # fmt: skip
    fig = figures.rate_curve_figure(sims)
    assert _legend(fig.axes[0]) == ["p50", "p99", "TTFT objective 200 ms"]
    assert _legend(fig.axes[1]) == ["p50", "p99", "TPOT objective 12 ms"]
    assert list(fig.axes[1].lines[-1].get_ydata()) == [12.0, 12.0]


def test_residuals_colour_by_phase_and_room_for_every_device():
    records = [{"hardware": f"GPU_{i:02d}", "phase": ph, "lodo": 1.0 + i / 100, "metric": "tok_s", "observed": 1.0}
               for i in range(50) for ph in ("decode", "prefill")]  # fmt: skip
    fig = figures.residuals(records)
    ax = fig.axes[0]
    assert _legend(ax) == ["decode (50 rows)", "prefill (50 rows)"]
    assert len(ax.get_xticklabels()) == 50
    # 0.22 in a label: fifty devices' names fit side by side at the rotation drawn
    assert fig.get_size_inches()[0] >= 0.22 * 50


def test_rows_figure_for_validate_serving(tmp_path):
    recs = [{"metric": "tpot_ms", "runtime": rt, "observed": 10.0 * k, "predicted": 9.0 * k, "unit": "ms"}
            for rt in ("vllm", "sglang") for k in (1, 2, 3)]  # fmt: skip
    (path,) = figures.rows([*recs, {"metric": "tpot_ms", "predicted": None, "observed": 3.0}], str(tmp_path))
    assert path.endswith("validation_rows.png") and (tmp_path / "validation_rows.png").stat().st_size > 1000
    with pytest.raises(ridgeline.PlanError, match="no row was priced"):
        figures.rows([{"metric": "x", "predicted": None, "observed": 1.0}], str(tmp_path))
