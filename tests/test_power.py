"""Power and energy (spec 60): the linear model over the engine's own occupancies, its one fitted
share against measured GPU power during serving, and what is missing said as missing."""

import json

import numpy as np
import polars as pl
import pytest
import ridgeline
from ridgeline import _data
from ridgeline.power_fit import constant_row, fit, predict, priced, rows, validation

LLAMA = "meta-llama/Llama-3.1-8B"


@pytest.fixture(scope="module")
def runs():
    return priced(rows())


def _rho() -> float:
    return ridgeline.Catalog().constant("power_memory_rho")


def test_each_phase_draws_idle_plus_its_busier_roofs_share_of_the_dynamic_range():
    e = ridgeline.estimate(LLAMA, "H100_SXM", batch=16)
    pw, dev, rho = e.power, ridgeline.Catalog().get("H100_SXM"), _rho()
    assert (pw["idle_w"], pw["tdp_w"], pw["rho"]) == (dev.idle_w, dev.tdp_w, rho) == (69.0, 700.0, rho)
    for phase in ("prefill", "decode"):
        t = e.to_dict()[phase]
        u = min(1.0, max(t["compute_s"] / t["time_s"], rho * t["memory_s"] / t["time_s"]))
        assert pw[phase]["utilisation"] == pytest.approx(u, rel=1e-12)
        assert pw[phase]["watts"] == pytest.approx(69.0 + u * (700.0 - 69.0), rel=1e-12)
    joules = pw["prefill"]["watts"] * e.prefill["time_s"] + pw["decode"]["watts"] * e.decode["time_s"]
    assert pw["energy_j"] == pytest.approx(joules, rel=1e-12)
    assert pw["energy_per_output_token_j"] == pytest.approx(joules / (16 * 256), rel=1e-12)


def test_spec_60_checks_on_a_real_device():
    # a prefill-heavy request draws more accelerator power than a decode-heavy one (rho < 1)
    def avg(e):
        p, t = e.power, (e.prefill["time_s"], e.decode["time_s"])
        return (p["prefill"]["watts"] * t[0] + p["decode"]["watts"] * t[1]) / sum(t)

    heavy_in = ridgeline.estimate(LLAMA, "H100_SXM", prompt=4096, output=8)
    heavy_out = ridgeline.estimate(LLAMA, "H100_SXM", prompt=8, output=512)
    assert _rho() < 1 and avg(heavy_in) > avg(heavy_out)
    # power rises with batch for a fixed shape, never past TDP; energy per token falls
    w = [ridgeline.estimate(LLAMA, "H100_SXM", batch=b).power for b in (1, 4, 16, 64)]
    assert all(a["decode"]["watts"] <= b["decode"]["watts"] <= 700 for a, b in zip(w, w[1:]))
    assert all(a["energy_per_output_token_j"] > b["energy_per_output_token_j"] for a, b in zip(w, w[1:]))


def test_missing_power_is_said_never_defaulted(tmp_path):
    # RTX 4090: a TDP but no sourced idle power; PP: the stages' idle bubbles are not modelled
    assert "RTX_4090 has no sourced idle_w" in ridgeline.estimate(LLAMA, "RTX_4090").power["missing"]
    pp = ridgeline.estimate("meta-llama/Llama-3.1-70B", "H100_SXM", pp=2, tp=2).power
    assert "pipeline" in pp["missing"]
    df = ridgeline.sweep({"model": LLAMA, "hardware": ["H100_SXM", "RTX_4090"], "batch": [1, 8]})
    got = df.filter(pl.col("hardware") == "RTX_4090").select("power_prefill_w", "power_decode_w", "energy_per_token_j")
    assert got.null_count().row(0) == (2, 2, 2)
    # the sweep's power is the estimate's, plan by plan
    for r in df.filter(pl.col("hardware") == "H100_SXM").iter_rows(named=True):
        p = ridgeline.estimate(LLAMA, "H100_SXM", batch=r["batch"]).power
        assert r["power_decode_w"] == p["decode"]["watts"] and r["energy_per_token_j"] == p["energy_per_output_token_j"]
    # --json carries it; the CLI prints it in the answer's lines
    from test_cli import run

    out = run("estimate", "-m", LLAMA, "-H", "RTX_4090", cwd=tmp_path).stdout
    assert "power        missing: RTX_4090 has no sourced idle_w" in out
    d = json.loads(run("estimate", "-m", LLAMA, "-H", "H100_SXM", "--json", cwd=tmp_path).stdout)
    assert d["power"]["decode"]["watts"] > d["power"]["idle_w"]


def test_the_shipped_share_is_the_fresh_fit_of_the_shipped_runs(runs):
    rho, rms = fit(runs)
    shipped = next(
        ln for ln in _data.read_text("data/constants.csv").splitlines() if ln.startswith("power_memory_rho,")
    )
    row = constant_row(runs, rho, rms)
    assert shipped.startswith(f"power_memory_rho,{row['value']},fraction,") and row["source"] in shipped
    assert _rho() == rho and len(runs["observed"]) == 190 and not runs["refused"]
    # the fit is a minimum: a step either way is worse
    mask = np.ones(190, bool)
    err = lambda r: np.sqrt(np.mean(np.log(predict(runs, r)[mask] / runs["observed"][mask]) ** 2))  # noqa: E731
    assert (
        err(rho) == pytest.approx(rms)
        and err(rho) <= err(max(0.0, rho - 0.01))
        and err(rho) <= err(min(1.0, rho + 0.01))
    )


def test_power_against_the_measured_runs_in_sample_and_held_out(runs):
    # ML.ENERGY v3.0 (vLLM 0.11.1 on H100 SXM and B200, 190 dense-model runs): the figures the
    # README quotes. The model under-predicts large batches (compute and memory both busy,
    # max() counts one): the median observed/predicted rises with max_num_seqs.
    v = validation(runs)
    assert v["in_sample"]["all"]["medape"] == pytest.approx(0.124, abs=0.005)
    assert v["held_out"]["all"]["medape"] == pytest.approx(0.158, abs=0.005)
    small, large = v["in_sample"]["max_num_seqs=16"], v["in_sample"]["max_num_seqs=512"]
    assert small["median_obs_over_pred"] < 1.0 < 1.2 < large["median_obs_over_pred"]
