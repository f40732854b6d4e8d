"""A fixed GPU budget searched (ridgeline plan): every plan uses the budget exactly, each point is
the simulator's run of the plan's unit (simulate with the same arguments gives the same numbers),
the best of each kind meets the objectives, and the frontier is the Pareto set."""

import json

import pytest
import ridgeline
from conftest import LLAMA, run
from ridgeline.errors import PlanError
from ridgeline.planner import plan_budget


@pytest.fixture(scope="module")
def budget():
    return plan_budget(LLAMA, "H100_SXM", 4, prompt=2048, output=256, slo_tpot_ms=20, tp=(1, 2, 4))


def _devices(kw):
    if "prefill_instances" in kw:
        return kw["prefill_instances"] * kw["prefill_tp"] + kw["decode_instances"] * kw["decode_tp"]
    return kw["tp"] * kw.get("attention_dp", 1)


def test_every_plan_uses_the_budget_exactly(budget):
    assert budget.points
    for p in budget.points:
        assert p.copies * _devices(p.simulate_kwargs) == 4, p.label
        assert p.clients == p.copies * p.simulate_kwargs["concurrency"]


def test_the_best_plans_are_simulate_on_the_same_plan(budget):
    for p in (budget.aggregated, budget.disaggregated):
        assert p is not None and p.meets and p.tpot_q_s <= 0.020
        s = ridgeline.simulate(LLAMA, "H100_SXM", **p.simulate_kwargs)
        assert s.output_tokens / s.duration_s / _devices(p.simulate_kwargs) == pytest.approx(p.tok_s_per_gpu, rel=1e-12)
        assert 1 / s.tpot_s["mean"] == pytest.approx(p.tok_s_per_user, rel=1e-12)
        assert s.tpot_s["p90"] == p.tpot_q_s and s.ttft_s["p90"] == p.ttft_q_s
    # no plan that meets the objectives serves more tokens per GPU than the best of its kind
    for kind in ("aggregated", "disaggregated"):
        best = budget.best(kind)
        assert all(q.tok_s_per_gpu <= best.tok_s_per_gpu for q in budget.points if q.kind == kind and q.meets)
    assert budget.ratio == pytest.approx(budget.disaggregated.tok_s_per_gpu / budget.aggregated.tok_s_per_gpu)


def test_the_frontier_is_the_pareto_set(budget):
    front = budget.frontier

    def dominated(p):
        return any(q.tok_s_per_gpu >= p.tok_s_per_gpu and q.tok_s_per_user >= p.tok_s_per_user
                   and (q.tok_s_per_gpu, q.tok_s_per_user) != (p.tok_s_per_gpu, p.tok_s_per_user)
                   for q in budget.points)  # fmt: skip

    assert front and not any(dominated(p) for p in front)
    assert all(dominated(p) or p in front for p in budget.points)
    # more clients, more tokens per GPU and fewer per user, along each plan's ladder
    for label in {p.label for p in budget.points}:
        ladder = [p for p in budget.points if p.label == label]
        assert [p.clients for p in ladder] == sorted(p.clients for p in ladder)
        assert all(b.tok_s_per_user <= a.tok_s_per_user * 1.001 for a, b in zip(ladder, ladder[1:]))


def test_a_tp_whose_instance_holds_no_kv_is_refused_once():
    b = plan_budget("meta-llama/Llama-3.1-70B", "H100_SXM", 8, prompt=1024, output=128, slo_tpot_ms=50,
                    tp=(1, 8), disaggregate=True)  # fmt: skip
    assert [c for c, _ in b.refused] == ["8 x TP1"]
    assert all("TP1" not in p.label for p in b.points)


@pytest.mark.parametrize(
    "kw, match",
    [({}, "needs an objective"), ({"slo_tpot_ms": 20, "percentile": 120}, "percentile"),
     ({"slo_tpot_ms": 20, "gpus": 0}, "gpus")],
)  # fmt: skip
def test_a_budget_without_an_objective_or_with_a_bad_number_is_refused(kw, match):
    args = {"gpus": 4, **kw}
    with pytest.raises(PlanError, match=match):
        plan_budget(LLAMA, "H100_SXM", args.pop("gpus"), **args)


def test_min_user_tok_s_is_a_tpot_objective():
    b = plan_budget(LLAMA, "H100_SXM", 2, prompt=512, output=64, min_user_tok_s=50, tp=(1,), disaggregate=False)
    assert b.workload["slo_tpot_ms"] == 20.0 and b.aggregated.tpot_q_s <= 0.020


def test_the_cli_prints_both_best_plans_and_the_frontier(tmp_path):
    args = ["plan", "-m", LLAMA, "-H", "H100_SXM", "--gpus", "4", "--prompt", "2048", "--output", "256",
            "--slo-tpot-ms", "20", "--tp", "1,2,4"]  # fmt: skip
    r = run(*args, "--plot", str(tmp_path / "f.png"))
    assert r.returncode == 0, r.stderr
    assert "best aggregated" in r.stdout and "best disaggregated" in r.stdout and "frontier" in r.stdout
    assert "disaggregated / aggregated" in r.stdout and (tmp_path / "f.png").stat().st_size > 10_000
    d = json.loads(run(*args, "--json").stdout)
    assert d["aggregated"]["meets"] and d["frontier"] and d["gpus"] == 4


def test_runtimes_weights_and_speculation_are_searched_too():
    b = plan_budget("meta-llama/Llama-3.1-70B", "H200_SXM", 8, prompt=4096, output=512, slo_tpot_ms=30, tp=(4, 8),
                    runtime="vllm,sglang", weight_dtype=["bf16", "fp8"])  # fmt: skip
    kinds = {(p.simulate_kwargs["runtime"], p.simulate_kwargs["weight_dtype"]) for p in b.points}
    assert kinds == {(r, w) for r in ("vllm", "sglang") for w in ("bf16", "fp8")}
    # each variant is labelled with what it tried, and each point is still simulate on its unit
    p = max((q for q in b.points if q.meets), key=lambda q: q.tok_s_per_gpu)
    assert p is b.aggregated or p is b.disaggregated
    rt, wd = p.simulate_kwargs["runtime"], p.simulate_kwargs["weight_dtype"]
    assert p.label.endswith(f" {rt} {wd}")
    s = ridgeline.simulate("meta-llama/Llama-3.1-70B", "H200_SXM", **p.simulate_kwargs)
    assert s.output_tokens / s.duration_s / _devices(p.simulate_kwargs) == pytest.approx(p.tok_s_per_gpu, rel=1e-12)
    # speculation: every layout with and without MTP where the model has MTP layers
    q = plan_budget("Qwen/Qwen3.5-397B-A17B", "B200", 8, prompt=2048, output=256, slo_tpot_ms=40, tp=(8,),
                    weight_dtype="fp8", speculative="mtp", draft_tokens=2, disaggregate=False)  # fmt: skip
    labels = {pt.label for pt in q.points}
    assert "1 x TP8" in labels and "1 x TP8 MTP2" in labels
    spec = [pt for pt in q.points if pt.label == "1 x TP8 MTP2"]
    assert all(pt.simulate_kwargs["speculative"] == "mtp" for pt in spec)


def test_a_speculation_no_plan_could_take_is_refused_up_front():
    with pytest.raises(PlanError, match="draft_tokens"):
        plan_budget(LLAMA, "H100_SXM", 2, slo_tpot_ms=50, tp=(1,), speculative="mtp")
    with pytest.raises(PlanError, match="no MTP layers"):  # Llama-3.1-8B has none
        plan_budget(LLAMA, "H100_SXM", 2, slo_tpot_ms=50, tp=(1,), speculative="mtp", draft_tokens=2)
