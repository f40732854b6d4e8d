"""Every answer says what it rests on (issue 42): measured (the device's own fit), borrowed (a fit
of other devices, with whose) or bound (no calibration: the efficiency-1 bound); rankings keep
bound plans apart; every door takes one default runtime and calibration per device."""

from __future__ import annotations

import polars as pl
import pytest
import ridgeline
from cli_in_process import run_main
from ridgeline.catalog.store import default_catalog
from ridgeline.sweeps.sweep import summary

MODEL = "meta-llama/Llama-3.1-8B"
FOUR = ["H100_SXM", "H200_SXM", "MI300X", "RTX_4090"]


def test_each_device_says_what_its_numbers_rest_on_and_whose_fit():
    got = {h: ridgeline.estimate(MODEL, h) for h in FOUR}
    # H100: kernel tables of its own; H200: none, its architecture's (H100's); MI300X: no runtime
    # with a calibration is its default (vLLM's NVIDIA-fitted profile is not); RTX 4090: llama.cpp's
    # profile over other GDDR cards
    assert {h: e.basis for h, e in got.items()} == {
        "H100_SXM": "measured", "H200_SXM": "borrowed", "MI300X": "bound", "RTX_4090": "borrowed"}  # fmt: skip
    assert got["H100_SXM"].basis_from.startswith("H100_SXM's own vllm")
    h200 = got["H200_SXM"].basis_from
    assert h200.startswith("H100_SXM's vllm") and "same architecture" in h200
    assert got["RTX_4090"].basis_from.startswith("llamacpp-cuda's profile, borrowed")
    assert got["MI300X"].basis_from == "no calibration: the efficiency-1 bound"
    d = got["H200_SXM"].to_dict()
    assert (d["basis"], d["basis_from"]) == ("borrowed", got["H200_SXM"].basis_from)
    assert ridgeline.estimate(MODEL, "H100_SXM", calibrated=False).basis == "bound"


def test_estimate_and_sweep_take_one_default_per_device_over_the_whole_catalog():
    cat = default_catalog()
    names = cat.names()
    df = ridgeline.sweep({"model": [MODEL], "hardware": names, "batch": [1]})
    rows = {r["hardware"]: r for r in df.iter_rows(named=True)}
    assert set(rows) == set(names)
    for h in names:
        try:
            e = ridgeline.estimate(MODEL, h, allow_no_fit=True)
        except ridgeline.RidgelineError:
            assert rows[h]["error"] is not None, h
            continue
        assert (rows[h]["runtime"], rows[h]["calibration"], rows[h]["basis"]) == (
            e.plan["runtime"], e.calibration, e.basis), h  # fmt: skip


def test_recommend_takes_each_devices_default_and_refuses_what_it_cannot_simulate():
    r = ridgeline.recommend(MODEL, rate=5, slo_tpot_ms=50, hardware=FOUR, tp=[1])
    for p in r.plans:
        e = ridgeline.estimate(MODEL, p["hardware"])
        assert (p["runtime"], p["basis"], p["basis_from"]) == (e.plan["runtime"], e.basis, e.basis_from)
    assert {p["hardware"] for p in r.plans} == {"H100_SXM", "H200_SXM"}
    why = {x["hardware"]: x["reason"] for x in r.refused}
    assert why["MI300X"].startswith("its default runtime, none (the efficiency-1 bound), has no serving scheduler")
    assert why["RTX_4090"].startswith("its default runtime, llamacpp-cuda, has no serving scheduler")
    # named, vLLM prices them with fits borrowed from other devices, and says whose
    named = ridgeline.recommend(MODEL, rate=5, slo_tpot_ms=50, hardware=FOUR, tp=[1], runtime="vllm")
    basis = {p["hardware"]: (p["basis"], p["basis_from"]) for p in named.plans}
    assert basis["MI300X"][0] == "borrowed" and "median over" in basis["MI300X"][1]
    assert basis["H100_SXM"][0] == "measured"
    text = named.summary()
    assert "borrowed [" in text and "the median over" in text


def _sweep_four():
    grid = {"model": [MODEL], "hardware": FOUR, "tp": [1, 2, 4, 8], "batch": [1, 8, 64, 256],
            "prompt": [512, 2048], "weight_dtype": ["bf16", "fp8"]}  # fmt: skip
    return ridgeline.sweep(grid)


def test_a_sweep_never_ranks_a_bound_plan_beside_calibrated_ones_unmarked():
    df = _sweep_four()
    fit = df.filter(pl.col("fits") & pl.col("error").is_null())
    bound = fit.filter(pl.col("basis") == "bound")
    assert bound.height and set(bound["hardware"]) >= {"MI300X"}
    # the bound is the fastest and cheapest of all on paper: ranked unmarked it tops every list
    fastest = fit.sort("tpot_s").row(0, named=True)
    assert fastest["basis"] == "bound"
    text = summary(df, top=200)
    ranked = text.split("not ranked below")[1]
    assert "MI300X" not in ranked and f"{bound.height:,} plans that fit rest on no calibration" in text
    marked = summary(df, top=200, include_bound=True)
    heads = [line.split() for line in marked.splitlines() if line.strip().startswith("hardware")]
    assert "MI300X" in marked and " bound " in marked and heads and all("basis" in h for h in heads)


def test_the_cli_keeps_bound_plans_apart_unless_asked():
    argv = ["sweep", "-m", MODEL, "-H", "H100_SXM", "-H", "MI300X", "--batch", "1,64"]
    code, out, _ = run_main(*argv)
    assert code == 0 and "rest on no calibration (MI300X" in out
    assert all("MI300X" not in line for line in out.split("not ranked below")[1].splitlines())
    code, out, _ = run_main(*argv, "--include-bound")
    assert code == 0 and "MI300X" in out and "bound" in out


@pytest.mark.parametrize("h", FOUR)
def test_a_simulation_says_its_basis(h):
    try:
        s = ridgeline.simulate(MODEL, h, rate=1, requests=10, runtime="vllm", max_model_len=4096)
    except ridgeline.RidgelineError:
        pytest.fail(f"{h}: vllm runs there")
    assert s.basis == ridgeline.estimate(MODEL, h, runtime="vllm").basis
    assert s.to_dict()["basis"] == s.basis and s.basis_from
