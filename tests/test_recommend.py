"""``ridgeline recommend``: the cheapest plans within the SLOs, each confirmed by the simulator."""

import json

import pytest
import ridgeline
from ridgeline import PlanError
from ridgeline.recommend import plan_label

LLAMA70 = "meta-llama/Llama-3.1-70B"
LLAMA8 = "meta-llama/Llama-3.1-8B"
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
        assert sim.within_slo == pytest.approx(p["within_slo"]) and sim.rejected == sim.unfinished == 0
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
    from conftest import run

    args = ["recommend", "-m", LLAMA70, "--rate", "5", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "50",
            "-H", "H100_SXM", "-H", "A30", "--requests", "200", "--tp", "4,8"]  # fmt: skip
    r = run(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"{LLAMA70}: 5 req/s") and "p90 TTFT" in lines[1]
    assert lines[-1] == "2 candidates refused (--verbose lists each with its reason)"
    v = run(*args, "--verbose", cwd=tmp_path).stdout
    assert "A30 TP4  no published price for A30" in v
    d = json.loads(run(*args, "--json", cwd=tmp_path).stdout)
    assert [p["tp"] for p in d["plans"]] and all(p["hardware"] == "H100_SXM" for p in d["plans"])
    bad = run("recommend", "-m", LLAMA70, "--rate", "5", cwd=tmp_path)
    assert bad.returncode == 2 and "needs an SLO" in bad.stderr


def test_runtimes_weights_and_disaggregation_are_searched_and_each_plan_holds_in_simulation():
    search = {"rate": 10, "slo_ttft_ms": 500, "slo_tpot_ms": 40, "hardware": ["H100_SXM"], "tp": (1,),
              "requests": 150}  # fmt: skip
    # the KV link a disaggregated prompt crosses is given (test values)
    link = {"kv_link_gbs": 50, "kv_link_latency_us": 10}
    r = ridgeline.recommend(LLAMA8, runtime="vllm,sglang", weight_dtype=["bf16", "fp8"], disaggregate=True, **link,
                            **search)  # fmt: skip
    agg = [p for p in r.plans if p["prefill_instances"] is None]
    assert sorted((p["runtime"], p["weights"].split()[0]) for p in agg) == [
        ("sglang", "bf16"), ("sglang", "fp8"), ("vllm", "bf16"), ("vllm", "fp8")]  # fmt: skip
    split = [p for p in r.plans if p["prefill_instances"] is not None]
    assert split, r.refused
    for p in split:
        # a split of at most one instance more than the aggregated fleet of the same candidate
        assert p["prefill_instances"] + p["decode_instances"] == p["replicas"] >= 2
        twin = next(a for a in agg if (a["runtime"], a["weights"]) == (p["runtime"], p["weights"]))
        assert p["replicas"] <= twin["replicas"] + 1
        wd = p["weights"].split()[0]
        sim = ridgeline.simulate(LLAMA8, "H100_SXM", runtime=p["runtime"], weight_dtype=wd, tp=1, rate=10,
                                 prefill_instances=p["prefill_instances"], decode_instances=p["decode_instances"],
                                 router="least_outstanding", requests=150 * p["replicas"], prompt=1024, output=256,
                                 max_model_len=1280, slo_ttft_ms=500, slo_tpot_ms=40, **link)  # fmt: skip
        assert (
            sim.within_slo == pytest.approx(p["within_slo"])
            and sim.rejected == sim.unfinished == 0
            and p["within_slo"] >= 0.9
        )
    # the frontier: cheapest first, each faster than every cheaper plan; the energy is the simulation's
    front = r.frontier()
    assert front and all(a["ttft_q_s"] > b["ttft_q_s"] for a, b in zip(front, front[1:]))
    assert all(p["j_per_output_token"] > 0 for p in r.plans)


def test_an_moe_model_also_tries_its_experts_spread_over_the_tp_group_and_attention_dp_ranks():
    # TP 2 is tried as TP 2, TP 2 with the experts over the two ranks (EP 2), and two attention-DP
    # ranks of TP 1 over the same two devices (EP 2)
    r = ridgeline.recommend("Qwen/Qwen3-30B-A3B", rate=8, slo_ttft_ms=500, slo_tpot_ms=30, hardware=["H100_SXM"],
                            tp=(2,), requests=300)  # fmt: skip
    tried = {(p["tp"], p["ep"], p["attention_dp"]) for p in (*r.plans, *r.refused)}
    assert tried == {(2, 1, 1), (2, 2, 1), (1, 2, 2)}
    assert any(p["ep"] == 2 for p in r.plans) and "EP2" in r.summary()
    # DeepSeek-V3 at 256 clients on H200: 8 attention-DP ranks over EP 8 (one 8-device instance) is
    # the cheapest plan, priced by its tp x attention_dp devices; a dense model tries no attention DP
    d = ridgeline.recommend("deepseek-ai/DeepSeek-V3", concurrency=256, slo_ttft_ms=5000, slo_tpot_ms=80,
                            hardware=["H200_SXM"], tp=(8,), runtime="sglang", prompt=1024, output=512,
                            requests=512)  # fmt: skip
    best = d.plans[0]
    assert (best["tp"], best["ep"], best["attention_dp"], best["devices"]) == (1, 8, 8, 8 * best["replicas"])
    assert "TP1 EP8 ADP8" in d.summary()
    dense = ridgeline.recommend(LLAMA8, rate=2, slo_ttft_ms=500, hardware=["H100_SXM"], tp=(2,), requests=100)
    assert {p["attention_dp"] for p in (*dense.plans, *dense.refused)} == {1}
    # the static prune of an attention-DP candidate is by TPOT only: its static TTFT is 8 prompts
    # at the experts (1.25 s for 8,000 tokens), a lone client's 0.94 s, within 1.1 s
    one = ridgeline.recommend("deepseek-ai/DeepSeek-V3", concurrency=1, slo_ttft_ms=1100, slo_tpot_ms=50,
                              hardware=["H200_SXM"], tp=(8,), runtime="sglang", prompt=8000, output=64,
                              requests=20)  # fmt: skip
    adp = [p for p in one.plans if p["attention_dp"] == 8]
    assert adp and adp[0]["ttft_q_s"] < 1.1


def test_the_frontier_plot_and_purchase_prices(tmp_path):
    pytest.importorskip("matplotlib")
    from ridgeline import plot

    r = ridgeline.recommend(LLAMA8, rate=10, slo_ttft_ms=500, slo_tpot_ms=40, hardware=["H100_SXM", "RTX_4090"],
                            tp=(1, 2), requests=100, amortise_years=3)  # fmt: skip
    # ranked by each device's purchase price over 3 years of hours
    for p in r.plans:
        buy = ridgeline.Catalog().purchases(p["hardware"])[0]["usd_per_device"]
        assert p["usd_per_device_hour"] == pytest.approx(buy / (3 * 8766)) and p["offer"]["tier"] == "purchase"
    fig = plot.frontier(r)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "p90 TTFT (ms)" and ax.get_ylabel() == "USD per million output tokens"
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "Pareto frontier"]
    xs = sorted(p["ttft_q_s"] * 1e3 for p in r.frontier())
    assert list(line.get_xdata()) == pytest.approx(xs)
    assert plot.save(fig, str(tmp_path / "f.png")) and (tmp_path / "f.png").stat().st_size > 0


def test_length_distributions_are_drawn_by_the_simulator_and_bound_its_sequences():
    lengths = {"prompt": "lognormal:1500:0.8:16:8000", "output": "uniform:64:512"}
    r = ridgeline.recommend(LLAMA8, rate=6, slo_ttft_ms=800, slo_tpot_ms=40, hardware=["H100_SXM"], tp=(1,),
                            requests=200, **lengths)  # fmt: skip
    w = r.workload
    assert w["mean_lengths"] == (1500, 288) and w["max_model_len"] == 8000 + 512
    assert "prompt lognormal(mean 1500, sigma 0.8, lo 16, hi 8000), output uniform(lo 64, hi 512)" in r.summary()
    (p,) = r.plans
    sim = ridgeline.simulate(LLAMA8, "H100_SXM", tp=1, instances=p["replicas"], router="least_outstanding", rate=6,
                             requests=200 * p["replicas"], max_model_len=8512, slo_ttft_ms=800, slo_tpot_ms=40,
                             **lengths)  # fmt: skip
    assert (
        sim.within_slo == pytest.approx(p["within_slo"])
        and sim.rejected == sim.unfinished == 0
        and p["within_slo"] >= 0.9
    )
    with pytest.raises(PlanError, match="prompt"):
        ridgeline.recommend(LLAMA8, rate=6, slo_tpot_ms=40, prompt="zipf:3")


def test_a_closed_loop_of_clients_is_served_by_the_fewest_replicas_that_meet_the_slos():
    search = {"slo_ttft_ms": 500, "slo_tpot_ms": 30, "hardware": ["H100_SXM"], "tp": (1,), "requests": 200}
    r = ridgeline.recommend(LLAMA8, concurrency=64, **search)
    assert r.workload["concurrency"] == 64 and r.workload["rate"] is None and "64 clients" in r.summary()
    (p,) = r.plans
    assert p["per_instance_rate"] is None

    def run(n):
        s = ridgeline.simulate(LLAMA8, "H100_SXM", tp=1, instances=n, router="least_outstanding", concurrency=64,
                               requests=200 * n, prompt=1024, output=256, max_model_len=1280, slo_ttft_ms=500,
                               slo_tpot_ms=30)  # fmt: skip
        return s.within_slo

    # its own simulation meets the SLOs; one replica fewer does not
    assert run(p["replicas"]) == pytest.approx(p["within_slo"]) and p["within_slo"] >= 0.9
    assert p["replicas"] == 1 or run(p["replicas"] - 1) < 0.9
    with pytest.raises(PlanError, match="rate .* or concurrency"):
        ridgeline.recommend(LLAMA8, rate=5, concurrency=8, slo_tpot_ms=30)
    with pytest.raises(PlanError, match="needs a load"):
        ridgeline.recommend(LLAMA8, slo_tpot_ms=30)


def test_a_disaggregated_split_that_rejects_requests_is_never_listed():
    # Llama-3.1-8B on L40S, 8k prompts: one decode instance holds the KV of few requests; 1P+1D at
    # 2 req/s rejects most of them (decode KV) while every request it finishes is within the SLOs,
    # so counting finished requests only would list it at 100% within SLO
    slo = {"slo_ttft_ms": 60000, "slo_tpot_ms": 1000}
    link = {"kv_link_gbs": 50, "kv_link_latency_us": 10}
    split = ridgeline.simulate(LLAMA8, "L40S", rate=2, requests=200, prompt=8192, output=1024, max_model_len=9216,
                               prefill_instances=1, decode_instances=1, router="least_outstanding", **slo,
                               **link)  # fmt: skip
    assert split.rejected_causes["decode_kv"] > 0 and split.good_requests == split.finished
    assert split.within_slo == split.good_requests / 200 < 0.9
    r = ridgeline.recommend(LLAMA8, rate=2, prompt=8192, output=1024, hardware=["L40S"], tp=(1,), disaggregate=True,
                            requests=100, **slo, **link)  # fmt: skip
    assert r.plans and all(p["rejected"] == p["unfinished"] == 0 for p in r.plans)
    for p in r.plans:
        if p["prefill_instances"]:
            sim = ridgeline.simulate(LLAMA8, "L40S", rate=2, requests=100 * p["replicas"], prompt=8192, output=1024,
                                     max_model_len=9216, prefill_instances=p["prefill_instances"],
                                     decode_instances=p["decode_instances"], router="least_outstanding", **slo,
                                     **link)  # fmt: skip
            assert sim.rejected == 0 and sim.within_slo >= 0.9
    # none of the splits met the objectives here: the refusal names the nearest and what it broke
    (why,) = [x["reason"] for x in r.refused if x["reason"].startswith("disaggregated")]
    assert "no split of 7 instances or fewer" in why and "requests rejected (decode kv" in why, why


def test_a_search_that_finds_nothing_names_its_nearest_miss_and_the_objective_it_broke():
    r = ridgeline.recommend(LLAMA8, rate=60, slo_ttft_ms=200, slo_tpot_ms=30, prompt=1024, output=256,
                            hardware=["H100_SXM"], tp=(1,), requests=100, max_devices=1)  # fmt: skip
    assert not r.plans
    near = r.nearest_miss()
    assert near is not None and near["within_slo"] < 0.9
    assert "more than max_devices 1" in near["reason"] and "p90 TTFT" in near["reason"], near
    assert f"the nearest miss: {near['candidate']}: {near['reason']}" in r.summary()


def test_a_kv_link_without_a_split_is_refused_and_a_given_hand_off_prices_the_split():
    with pytest.raises(PlanError, match=r"kv_handoff_us: the KV link of a prefill/decode split, only with"):
        ridgeline.recommend(LLAMA8, rate=5, slo_tpot_ms=50, kv_handoff_us=1000)
    # a hand-off of 2 s a transfer: no split meets a 1 s TTFT, and the refusal says what broke
    r = ridgeline.recommend(LLAMA8, rate=5, slo_ttft_ms=1000, slo_tpot_ms=50, hardware=["H100_SXM"], tp=(1,),
                            runtime="sglang", requests=60, disaggregate=True, kv_link_gbs=50, kv_link_latency_us=10,
                            kv_handoff_us=2_000_000)  # fmt: skip
    assert r.plans and all(p["prefill_instances"] is None for p in r.plans)
    (why,) = [x["reason"] for x in r.refused if x["reason"].startswith("disaggregated")]
    assert "p90 TTFT" in why and "over 1000 ms" in why, why


def test_every_candidate_is_also_tried_speculating_and_the_acceptance_it_rests_on_is_said():
    # DeepSeek-V3 with its MTP module (2 draft tokens, acceptance borrowed from DeepSeek-R1's
    # measured ladder): each layout is tried with and without; the MTP plan decodes faster on the
    # same devices, and the table says what its acceptance rests on
    r = ridgeline.recommend("deepseek-ai/DeepSeek-V3", hardware=["H200"], concurrency=64, slo_tpot_ms=80, tp=[8],
                            runtime="sglang", speculative="mtp", draft_tokens=2, requests=100)  # fmt: skip
    by = {plan_label(p): p for p in r.plans}
    assert {"TP8 EP8", "TP8 EP8 MTP2"} <= set(by)
    assert by["TP8 EP8 MTP2"]["tpot_q_s"] < 0.8 * by["TP8 EP8"]["tpot_q_s"]
    assert by["TP8 EP8 MTP2"]["speculation"]["acceptance_length"] == 2.58
    assert "MTP2: mtp, 2 draft tokens a step, acceptance length 2.58 (borrowed from deepseek-ai/DeepSeek-R1" in (
        r.summary()
    )
    # a model without MTP layers: refused before the search (test_a_speculation_no_candidate_could_take_...)
    # a refused candidate is named as a listed one is (TP4 EP4 MTP2: DeepSeek-V3 does not fit 4 H200s)
    small = ridgeline.recommend("deepseek-ai/DeepSeek-V3", hardware=["H200"], concurrency=64, slo_tpot_ms=80,
                                tp=[4], runtime="sglang", speculative="mtp", draft_tokens=2, requests=100)  # fmt: skip
    assert {x["candidate"] for x in small.refused} >= {"H200_SXM TP4 EP4", "H200_SXM TP4 EP4 MTP2"}


def test_a_speculation_no_candidate_could_take_is_refused_before_the_search():
    # where every candidate would be refused alike, the search does not run and answer exit 0
    kw = {"rate": 1, "slo_tpot_ms": 50, "hardware": ["H100_SXM"], "requests": 50}
    with pytest.raises(PlanError, match="draft depth"):
        ridgeline.recommend(LLAMA8, speculative="mtp", **kw)
    with pytest.raises(PlanError, match="no MTP layers"):
        ridgeline.recommend(LLAMA8, speculative="mtp", draft_tokens=2, **kw)
