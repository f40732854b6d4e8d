"""Speculative decoding in the simulator: each decode step keeps drafts drawn from the acceptance
curve (seeded), so TPOT spreads around the static estimate, which a lone request's mean meets;
a curve that gives only the mean is refused by name."""

import pytest
import ridgeline
from conftest import LLAMA, run
from ridgeline.errors import PlanError


def test_a_lone_request_draws_its_kept_drafts_and_meets_the_static_estimate_on_average(eagle3_curve):
    kw = {"speculative": "eagle3", "draft_tokens": 3, "acceptance": eagle3_curve, "prompt": 1024, "output": 256}
    s = ridgeline.simulate(LLAMA, "H100_SXM", concurrency=1, requests=30, **kw)
    e = ridgeline.estimate(LLAMA, "H100_SXM", **kw)
    assert s.ttft_s["mean"] == pytest.approx(e.ttft_s, rel=1e-9)
    assert s.tpot_s["mean"] == pytest.approx(e.tpot_s, rel=0.02)
    assert s.tpot_s["max"] > 1.03 * s.tpot_s["min"]
    plain = ridgeline.simulate(LLAMA, "H100_SXM", concurrency=1, requests=30, prompt=1024, output=256)
    assert s.tpot_s["mean"] < 0.6 * plain.tpot_s["mean"]


def test_a_curve_with_the_mean_alone_is_refused_by_the_simulator(tmp_path):
    p = tmp_path / "one.csv"
    p.write_text("depth,acceptance_length\n3,2.8\n")
    kw = {"speculative": "ngram", "draft_tokens": 3, "acceptance": str(p)}
    assert ridgeline.estimate(LLAMA, "H100_SXM", **kw).plan["speculation"]["acceptance_length"] == 2.8
    with pytest.raises(PlanError, match=r"needs the acceptance at every depth 1..=3"):
        ridgeline.simulate(LLAMA, "H100_SXM", concurrency=1, requests=2, **kw)


def test_the_cli_simulates_a_speculating_plan(eagle3_curve):
    r = run("simulate", "-m", LLAMA, "-H", "H100_SXM", "--concurrency", "2", "--requests", "6", "--speculative",
            "eagle3", "--draft-tokens", "3", "--acceptance", eagle3_curve)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "TPOT" in r.stdout
