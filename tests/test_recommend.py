"""``ridgeline recommend``: the cheapest plans within the SLOs, each confirmed by the simulator."""

import json

import pytest
import ridgeline
from ridgeline import PlanError

LLAMA70 = "meta-llama/Llama-3.1-70B"
SEARCH = {"rate": 5, "slo_ttft_ms": 1000, "slo_tpot_ms": 50, "hardware": ["H100_SXM", "A100_SXM_80GB", "A30"],
          "tp": (1, 2, 4, 8), "requests": 200}  # fmt: skip


@pytest.fixture(scope="module")
def rec():
    return ridgeline.recommend(LLAMA70, **SEARCH)


def test_every_plan_meets_the_slos_in_its_own_simulation_and_is_priced_by_its_devices(rec):
    assert rec.plans and rec.workload["shown_quantile"] == "p90"
    for p in rec.plans:
        assert p["within_slo"] >= 0.9 and p["ttft_q_s"] <= 1.0 and p["tpot_q_s"] <= 0.05
        assert p["devices"] == p["replicas"] * p["tp"]
        price = ridgeline.Catalog().prices(p["hardware"], "on-demand")[0]["usd_per_device_hour"]
        assert p["usd_per_hour"] == pytest.approx(price * p["devices"])
        # cost per million output tokens: the fleet's hourly price over its output tokens an hour
        assert p["usd_per_million_output_tokens"] == pytest.approx(p["usd_per_hour"] / (p["output_tok_s"] * 3600) * 1e6)
        # the fleet is sized from one instance's highest rate within the SLOs, plus what confirmation added
        assert p["replicas"] >= -(-SEARCH["rate"] // p["per_instance_rate"])
        sim = ridgeline.simulate(LLAMA70, p["hardware"], tp=p["tp"], instances=p["replicas"], rate=5,
                                 router="least_outstanding", requests=200 * p["replicas"], prompt=1024, output=256,
                                 max_model_len=1280, slo_ttft_ms=1000, slo_tpot_ms=50)  # fmt: skip
        assert sim.good_requests / sim.finished == pytest.approx(p["within_slo"])
    costs = [p["usd_per_million_output_tokens"] for p in rec.plans]
    assert costs == sorted(costs)


def test_the_frontier_holds_no_dominated_plan_and_refusals_say_why(rec):
    front = [p for p in rec.plans if p["frontier"]]
    assert front[0] is rec.plans[0]
    for p in front:
        assert not any(q["usd_per_million_output_tokens"] < p["usd_per_million_output_tokens"]
                       and q["ttft_q_s"] <= p["ttft_q_s"] for q in rec.plans)  # fmt: skip
    why = {(r["hardware"], r["tp"]): r["reason"] for r in rec.refused}
    assert "does not fit" in why[("H100_SXM", 1)] and "no published price for A30" in why[("A30", 1)]
    assert "a lone request misses the TPOT objective" in why[("A100_SXM_80GB", 2)]


def test_bad_input_is_refused_by_name():
    with pytest.raises(PlanError, match="needs an SLO"):
        ridgeline.recommend(LLAMA70, rate=5)
    with pytest.raises(PlanError, match="percentile"):
        ridgeline.recommend(LLAMA70, rate=5, slo_tpot_ms=50, percentile=120)
    with pytest.raises(PlanError, match="rate"):
        ridgeline.recommend(LLAMA70, rate=0, slo_tpot_ms=50)


def test_cli_recommend_prints_the_ranked_plans_and_json(tmp_path):
    from test_cli import run

    args = ["recommend", "-m", LLAMA70, "--rate", "5", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "50",
            "-H", "H100_SXM", "-H", "A30", "--requests", "200", "--tp", "4,8"]  # fmt: skip
    r = run(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"{LLAMA70}: 5 req/s") and "p90 TTFT" in lines[1]
    assert lines[-1] == "2 candidates refused (--verbose lists each with its reason)"
    v = run(*args, "--verbose", cwd=tmp_path).stdout
    assert "A30 TP 4  no published price for A30" in v
    d = json.loads(run(*args, "--json", cwd=tmp_path).stdout)
    assert [p["tp"] for p in d["plans"]] and all(p["hardware"] == "H100_SXM" for p in d["plans"])
    bad = run("recommend", "-m", LLAMA70, "--rate", "5", cwd=tmp_path)
    assert bad.returncode == 2 and "needs an SLO" in bad.stderr
