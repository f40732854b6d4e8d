"""Attention data parallelism in the serving simulator (spec 70): an instance of ``attention_dp``
ranks of ``tp`` devices, each with its own scheduler, batch and KV cache, stepping together over
the routed experts they share. The event loop's own invariants (a lone request, saturation at the
static throughput, ranks waiting for the slowest) are tested in rust/src/serving/tests/adp.rs;
here: the doors, one answer per plan, and the production runs it now replays."""

import dataclasses

import polars as pl
import pytest
import ridgeline
from conftest import run
from ridgeline.errors import PlanError
from test_serving_runs import replay, silicon_runs

DSV3 = "deepseek-ai/DeepSeek-V3"


@pytest.mark.parametrize(
    "model, hardware, runtime, tp, ep, adp",
    [(DSV3, "H200_SXM", "sglang", 1, 8, 8), ("Qwen/Qwen3-30B-A3B", "H100_SXM", "vllm", 1, 2, 2),
     ("moonshotai/Kimi-K2.5", "B200", "vllm", 2, 8, 4)],
)  # fmt: skip
def test_a_lone_request_under_attention_dp_is_the_same_in_estimate_and_simulate(model, hardware, runtime, tp, ep,
                                                                                 adp):  # fmt: skip
    # one client: one rank works while the others run dummy batches. Its decode steps are padded
    # (every rank as many tokens, under CUDA graphs): TPOT is the estimate's at batch 1 a rank, in
    # both doors. Its prompt runs unpadded, the experts serving its tokens alone where the static
    # plan gives them every rank's: TTFT is below the estimate's by the experts' time at adp x
    # prompt tokens less theirs at prompt tokens (the static prefill of prompt / adp tokens a
    # rank); closed for a bf16 model, whose experts' activations are not quantised apart
    plan = ridgeline.Plan(tp=tp, ep=ep, attention_dp=adp, runtime=runtime, prompt=1024, output=100)
    e = ridgeline.estimate(model, hardware, plan=plan)
    s = ridgeline.simulate(model, hardware, plan=plan, concurrency=1, requests=2, max_model_len=2048)
    assert s.tpot_s["mean"] == pytest.approx(e.tpot_s, rel=1e-6)
    assert s.ttft_s["mean"] < e.ttft_s

    def experts(x: ridgeline.Estimate) -> float:
        rows = x.breakdown.filter((pl.col("phase") == "prefill") & pl.col("op").is_in(["expert_up", "expert_act",
                                                                                         "expert_down"]))  # fmt: skip
        return float(rows["time_s"].sum())

    if e.plan["weights"] == "bf16":
        part = ridgeline.estimate(model, hardware, plan=dataclasses.replace(plan, prompt=1024 // adp))
        assert s.ttft_s["mean"] == pytest.approx(e.ttft_s - experts(e) + experts(part), rel=1e-6)
    assert s.devices == tp * adp == e.parallel["devices"]
    assert f"attention DP {adp}" in s.cluster["describe"] and s.plan["attention_dp"] == adp


def test_ranks_share_the_clients_and_each_holds_its_own_kv():
    # 16 clients over 8 ranks: round robin gives each rank 2, so at most 16 run on the instance
    # at once; the KV blocks are a rank's
    kw = {"concurrency": 16, "requests": 64, "prompt": 512, "output": 64, "runtime": "sglang", "max_model_len": 1024}
    s = ridgeline.simulate(DSV3, "H200_SXM", tp=1, ep=8, attention_dp=8, **kw)
    assert s.max_running == 16 and s.counts["completed"] == 64
    one = ridgeline.simulate(DSV3, "H200_SXM", tp=8, ep=8, **kw)
    # the same 8 devices: a rank holds all of the attention's weights (TP 8 an eighth), so fewer
    # blocks than a TP-8 device; but TP 8 keeps every token's MLA latent on all 8 devices where
    # the ranks keep each sequence's on one, so the instance holds more tokens
    assert one.kv_blocks[0] > s.kv_blocks[0] > one.kv_blocks[0] / 8
    assert "an attention-DP rank" in s.summary() and s.energy["pools"][0]["devices"] == 8


def test_disaggregated_pools_take_their_own_attention_dp():
    # a TP-8 prefill pool feeding a decode pool of 8 attention-DP ranks: one client decodes at the
    # estimate's attention-DP step
    kw = {"concurrency": 1, "requests": 2, "prompt": 2000, "output": 50, "runtime": "sglang", "max_model_len": 4096,
          "prefill_instances": 1, "decode_instances": 1, "kv_link_gbs": 50.0, "kv_link_latency_us": 5.0}  # fmt: skip
    s = ridgeline.simulate(DSV3, "H200_SXM", tp=8, ep=8, prefill_attention_dp=1, decode_tp=1, decode_attention_dp=8,
                           **kw)  # fmt: skip
    e = ridgeline.estimate(DSV3, "H200_SXM", tp=1, ep=8, attention_dp=8, runtime="sglang", prompt=2000, output=50)
    assert s.tpot_s["mean"] == pytest.approx(e.tpot_s, rel=1e-6)
    assert [p["attention_dp"] for p in s.cluster["pools"]] == [1, 8] and s.devices == 16
    with pytest.raises(PlanError, match="decode_attention_dp: only with prefill_instances"):
        ridgeline.simulate(DSV3, "H200_SXM", tp=8, ep=8, decode_attention_dp=8, concurrency=1, requests=1)
    with pytest.raises(PlanError, match="attention_dp"):
        ridgeline.simulate(DSV3, "H200_SXM", tp=1, ep=8, attention_dp=0, concurrency=1, requests=1)
    # EP must divide the group of a pool
    with pytest.raises(PlanError, match="ep"):
        ridgeline.simulate(DSV3, "H200_SXM", tp=1, ep=3, attention_dp=8, concurrency=1, requests=1)


def test_the_cli_takes_attention_dp_for_the_instance_and_each_pool():
    r = run("simulate", "-m", DSV3, "-H", "H200_SXM", "--tp", "1", "--ep", "8", "--attention-dp", "8", "--runtime",
            "sglang", "--concurrency", "8", "--requests", "16", "--prompt", "256", "--output", "16")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "TP 1 EP 8 x attention DP 8" in r.stdout and "8 devices" in r.stdout
    bad = run("simulate", "-m", DSV3, "-H", "H200_SXM", "--tp", "8", "--prefill-attention-dp", "2",
              "--concurrency", "1", "--requests", "1")  # fmt: skip
    assert bad.returncode != 0 and "--prefill-attention-dp: only with prefill_instances" in bad.stderr


def test_attention_dp_runs_are_replayed_with_their_concurrency(tmp_path):
    # an aggregated run of 2 ranks (batch_size 2 a rank, 4 clients), a disaggregated one whose
    # prefill pool has 8 attention-DP ranks, and one of 64 ranks (8 nodes of B200): all priced at
    # the source's concurrency; the last across nodes with the catalog's NIC latency (NCCL's), so no
    # term is left out and the serving fit takes it
    raw = silicon_runs()
    pick = [raw[49 - 2], raw[349 - 2], raw[315 - 2]]
    shape = [(x["attention_dp_size"], x["batch_size"], x["prefill_attention_dp_size"]) for x in pick]
    assert shape == [("2", "2", ""), ("", "", "8"), ("64", "2", "")]
    got = replay(tmp_path, pick)
    assert len(got) == 6 and all(g["predicted"] is not None for g in got), [g.get("reason") for g in got]
    assert [g["concurrency"] for g in got] == [4, 4, 1, 1, 128, 128]
    assert [g["omitted_term"] for g in got] == [False] * 6
