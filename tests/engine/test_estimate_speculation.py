"""Speculative decoding in estimate: the drafter each method brings (its memory, closed form), the
acceptance length read from a curve (measured on the model, borrowed from its family, or the
user's file), and the refusals where a part is missing. The step's physics (verification of k + 1
tokens, the drafter's passes) is checked in closed form in rust/src/engine/spec_tests.rs."""

import pytest
import ridgeline
from conftest import LLAMA, run
from ridgeline.errors import PlanError
from ridgeline.models.config import Model


def test_an_eagle3_head_adds_its_layer_fc_and_draft_vocabulary_head_to_memory(eagle3_curve):
    # the bundled head (SpecForge llama3-8B-eagle3.json): one Llama layer whose q/k/v read 2 x
    # hidden, three RMSNorms, an fc from 3 x hidden, and an LM head over 32,000 draft tokens;
    # the embedding is the target's. In bf16, 2 bytes a parameter.
    d, f, kv = 4096, 14336, 1024
    layer = 2 * d * (d + 2 * kv) + d * d + 3 * d * f + 3 * d
    params = layer + 3 * d * d + 32000 * d + d  # fc, LM head, final norm
    base = ridgeline.estimate(LLAMA, "H100_SXM")
    e = ridgeline.estimate(LLAMA, "H100_SXM", speculative="eagle3", draft_tokens=3, acceptance=eagle3_curve)
    assert e.memory["weights_bytes"] - base.memory["weights_bytes"] == pytest.approx(2 * params, rel=1e-12)
    # its KV: one layer beside the target's 32, over the sequence's 1024 + 256 tokens and 3 lookahead slots
    assert e.memory["kv_bytes"] / base.memory["kv_bytes"] == pytest.approx(33 / 32 * 1283 / 1280, rel=1e-12)
    s = e.plan["speculation"]
    assert (s["method"], s["draft_tokens"], s["acceptance_length"], s["borrowed"]) == ("eagle3", 3, 2.9, False)
    assert s["drafter"] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    # at batch 1 a 3-token draft kept 2.9 tokens a step: faster than plain decode, not 2.9x
    assert 1.5 < base.tpot_s / e.tpot_s < 2.9


def test_deepseek_v3_prices_its_mtp_module_with_the_acceptance_borrowed_from_deepseek_r1():
    # the MTP module is an MoE layer like its last plus eh_proj (2d x d) and two norms; the
    # acceptance is TensorRT-LLM's measured DeepSeek-R1 MTP ladder (2.58 at depth 2), labelled
    # borrowed: no curve was measured on DeepSeek-V3 itself
    m = Model.from_config("deepseek-ai/DeepSeek-V3")
    base = ridgeline.estimate(m, "H200", tp=8, batch=8)
    e = ridgeline.estimate(m, "H200", tp=8, batch=8, speculative="mtp", draft_tokens=2)
    s = e.plan["speculation"]
    assert s["acceptance_length"] == 2.58 and s["borrowed"]
    assert "deepseek-ai/DeepSeek-R1" in s["acceptance"]
    assert any("borrowed from deepseek-ai/DeepSeek-R1" in w for w in e.warnings)
    # its weights on a rank: the module's parameters over 8 ranks in fp8 (1 byte each), but for
    # eh_proj (2d x d) and MLA's q and kv latent projections (d x 1536, d x 576), whole on every
    # rank; to 1% (block scales, norms and router in bf16)
    d = 7168
    replicated = 2 * d * d + d * (1536 + 576)
    want = (m.mtp_params + 7 * replicated) / 8
    extra = e.memory["weights_bytes"] - base.memory["weights_bytes"]
    assert extra == pytest.approx(want, rel=0.01)
    assert e.tpot_s < base.tpot_s


def test_glm5_prices_its_mtp_module_as_deepseek_mtp_on_its_sparse_attention_layer():
    # vLLM runs GLM-5's MTP (glm_moe_dsa) as deepseek_mtp: a layer like its last (MLA with the DSA
    # indexer, 256 experts) behind eh_proj (2d x d); in bf16, 2 bytes a parameter, over 8 ranks but
    # for eh_proj, MLA's q and kv latent projections (d x 2048, d x 576) and the indexer (wq_b
    # 2048 x 32 x 128, wk d x 128, weights_proj d x 32), whole on every rank; to 1% (norms, router)
    m = Model.from_config("zai-org/GLM-5")
    base = ridgeline.estimate(m, "B200", tp=8, batch=8, allow_no_fit=True)
    e = ridgeline.estimate(m, "B200", tp=8, batch=8, speculative="mtp", draft_tokens=2, allow_no_fit=True)
    d = 6144
    replicated = 2 * d * d + d * (2048 + 576) + 2048 * 32 * 128 + d * (128 + 32)
    extra = e.memory["weights_bytes"] - base.memory["weights_bytes"]
    assert extra == pytest.approx(2 * (m.mtp_params + 7 * replicated) / 8, rel=0.01)
    assert e.plan["speculation"]["borrowed"] and e.tpot_s < base.tpot_s


def test_a_curve_measured_on_the_model_is_its_own_and_several_give_their_median():
    # InferenceX publishes two Qwen3.5-397B-A17B MTP curves: 3.39 and 3.33 at depth 3
    e = ridgeline.estimate("Qwen/Qwen3.5-397B-A17B", "B200", tp=8, speculative="mtp", draft_tokens=3)
    s = e.plan["speculation"]
    assert s["acceptance_length"] == pytest.approx(3.36) and not s["borrowed"]
    assert "median of 2 curves, 3.33-3.39" in s["acceptance"]


def test_per_position_rates_give_one_plus_the_sum_of_the_first_k(tmp_path):
    p = tmp_path / "rates.csv"
    p.write_text("depth,acceptance_rate_at_position\n4,0.8;0.6;0.4;0.2\n")
    e = ridgeline.estimate(LLAMA, "H100_SXM", speculative="ngram", draft_tokens=3, acceptance=str(p))
    assert e.plan["speculation"]["acceptance_length"] == pytest.approx(1 + 0.8 + 0.6 + 0.4)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"speculative": "mtp", "draft_tokens": 2}, "has no MTP layers"),
        ({"speculative": "eagle3", "draft_tokens": 2}, "--acceptance FILE"),
        ({"speculative": "medusa", "draft_tokens": 2}, "not a method"),
        ({"speculative": "ngram"}, "--draft-tokens"),
        ({"draft_tokens": 2}, "without --speculative"),
        ({"speculative": "draft:", "draft_tokens": 2}, "draft:MODEL"),
    ],
)
def test_a_speculation_that_cannot_be_priced_is_refused_by_name(kwargs, words):
    with pytest.raises(ridgeline.errors.RidgelineError, match=words.replace("-", "[-]")):
        ridgeline.estimate(LLAMA, "H100_SXM", **kwargs)


def test_an_acceptance_curve_without_the_depth_asked_names_the_depths_it_has(eagle3_curve, tmp_path):
    with pytest.raises(PlanError, match=r"no value at depth 5 \(depths: 1, 2, 3\); nothing is extrapolated"):
        ridgeline.estimate(LLAMA, "H100_SXM", speculative="eagle3", draft_tokens=5, acceptance=eagle3_curve)
    bad = tmp_path / "bad.csv"
    bad.write_text("depth,acceptance_length,al_typo\n3,2.5,x\n")
    with pytest.raises(PlanError, match="unknown column"):
        ridgeline.estimate(LLAMA, "H100_SXM", speculative="ngram", draft_tokens=3, acceptance=str(bad))
    over = tmp_path / "over.csv"
    over.write_text("depth,acceptance_length\n3,4.5\n")
    with pytest.raises(PlanError, match="outside 1 ..= 4"):
        ridgeline.estimate(LLAMA, "H100_SXM", speculative="ngram", draft_tokens=3, acceptance=str(over))


def test_the_cli_prints_the_speculation_and_drops_the_held_out_range_no_speculative_row_had(eagle3_curve):
    r = run("estimate", "-m", LLAMA, "-H", "H100_SXM", "--speculative", "eagle3", "--draft-tokens", "3",
            "--acceptance", eagle3_curve)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "speculation  eagle3 by yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, 3 draft tokens a step" in r.stdout
    assert "held-out" not in r.stdout
    r = run("estimate", "-m", LLAMA, "-H", "H100_SXM", "--speculative", "mtp", "--draft-tokens", "2")
    assert r.returncode != 0 and "has no MTP layers" in r.stderr and "Traceback" not in r.stderr


def test_an_acceptance_file_changed_between_calls_is_read_again(tmp_path):
    # estimate keeps a prepared plan between calls: never one resting on a file the user may edit
    p = tmp_path / "curve.csv"
    p.write_text("depth,acceptance_length\n3,2.0\n")
    kw = {"speculative": "ngram", "draft_tokens": 3, "acceptance": str(p)}
    slow = ridgeline.estimate(LLAMA, "H100_SXM", **kw).tpot_s
    p.write_text("depth,acceptance_length\n3,3.0\n")
    fast = ridgeline.estimate(LLAMA, "H100_SXM", **kw).tpot_s
    assert fast == pytest.approx(slow * 2.0 / 3.0, rel=0.02)


def test_an_eagle1_head_is_one_of_the_targets_layers_behind_an_fc_and_shares_its_head(tmp_path):
    # the EAGLE paper's head: one decoder layer like the target's, an fc from the embedding and the
    # feature (2d x d), the target's embedding and LM head; bf16
    d, f, kv = 4096, 14336, 1024
    layer = d * (d + 2 * kv) + d * d + 3 * d * f + 2 * d
    curve = tmp_path / "eagle.csv"
    curve.write_text("depth,acceptance_length\n3,2.2\n")
    base = ridgeline.estimate(LLAMA, "H100_SXM")
    e = ridgeline.estimate(LLAMA, "H100_SXM", speculative="eagle", draft_tokens=3, acceptance=str(curve))
    assert e.memory["weights_bytes"] - base.memory["weights_bytes"] == pytest.approx(2 * (layer + 2 * d * d), rel=1e-12)
    with pytest.raises(PlanError, match="MoE model"):
        ridgeline.estimate("Qwen/Qwen3-30B-A3B", "H100_SXM", speculative="eagle", draft_tokens=3, acceptance=str(curve))
