"""Model-zoo structure: KV layouts, MLA, MoE reads, windows and weight formats, as closed forms."""

import pytest
import ridgeline
from ridgeline import Model, PlanError, _data
from ridgeline.models.quant import use_more_bits_share


def _row(e, phase, op):
    df = e.breakdown
    return df.filter((df["phase"] == phase) & (df["op"] == op))


def test_kv_bytes_per_token_per_layer():
    assert Model.from_config("meta-llama/Llama-3.1-8B").kv_bytes_per_token(2) == 32 * (2 * 8 * 128 * 2)
    assert Model.from_config("mistralai/Mistral-7B-v0.1").kv_bytes_per_token(2) == 32 * (2 * 8 * 128 * 2)
    # DeepSeek-V3 MLA: kv_lora_rank 512 + qk_rope_head_dim 64 = 576 values per token per layer
    assert Model.from_config("deepseek-ai/DeepSeek-V3").kv_bytes_per_token(2) == 61 * 576 * 2
    # Gemma-2-9B: window 4096 on alternate layers, so at 32k a sequence holds 4096 tokens on 21 layers
    g = Model.from_config("google/gemma-2-9b")
    per_layer = 2 * 8 * 256 * 2
    assert g.kv_bytes(32768, 2) == 21 * per_layer * 32768 + 21 * per_layer * 4096
    assert Model.from_config("mistralai/Mistral-7B-v0.1").kv_bytes(32768, 2) == 32 * 2 * 8 * 128 * 2 * 4096


def test_gemma2_decode_at_32k_reads_4096_keys_on_local_layers():
    import json

    cfg = json.loads(_data.read_text("data/models/google--gemma-2-9b.json"))
    cfg["max_position_embeddings"] = 65536  # a long-context variant of the same structure
    m = Model.from_dict(cfg, "gemma-2-9b-long")
    e = ridgeline.estimate(m, "H200_SXM", prompt=32768, output=2, runtime="none")
    rows = {r["layer_group"]: r for r in _row(e, "decode", "attention").to_dicts()}
    per_key = 2 * 8 * 256 * 2
    qo = 2 * 16 * 256 * 2
    local = next(r for k, r in rows.items() if "window 4096" in k)
    glob = next(r for k, r in rows.items() if "full" in k)
    assert local["bytes"] == 21 * (4096 * per_key + qo)
    assert glob["bytes"] == 21 * (32769 * per_key + qo)
    assert local["flops"] == 21 * 4 * 16 * 256 * 4096


def test_mla_decode_reads_the_latent_and_prefill_expands():
    m = Model.from_config("deepseek-ai/DeepSeek-V3")
    e = ridgeline.estimate(m, "H200_SXM", tp=8, prompt=4000, output=2, runtime="none")
    att = _row(e, "decode", "attention")
    h_t = 128 // 8
    # one decode step at context 4001: the 576-value latent of every key, once, shared by the heads
    per_layer = 4001 * 576 * 2 + 1 * h_t * (512 + 64 + 512) * 2
    assert att["bytes"].sum() == pytest.approx(61 * per_layer, rel=1e-12)
    assert att["flops"].sum() == 61 * 2 * h_t * (2 * 512 + 64) * 4001
    ops = set(e.breakdown.filter(e.breakdown["phase"] == "decode")["op"])
    assert {"q_absorb", "v_unabsorb"} <= ops and "kv_up_proj" not in ops
    pre = set(e.breakdown.filter(e.breakdown["phase"] == "prefill")["op"])
    assert "kv_up_proj" in pre and "q_absorb" not in pre
    # prefill attention in the expanded form: QK over 192 and PV over 128 per head, causal pairs
    pairs = 4000 * 4001 // 2
    assert _row(e, "prefill", "attention")["flops"].sum() == 61 * 2 * h_t * (192 + 128) * pairs
    assert e.gemm_dtype == "fp8" and e.plan["weights"].startswith("fp8 block 128x128")


def test_moe_weight_reads_follow_distinct_experts():
    m = Model.from_config("mistralai/Mixtral-8x7B-v0.1")
    one_expert = 3 * 4096 * 14336 * 2  # gate, up, down in bf16
    e1 = ridgeline.estimate(m, "H200_SXM", batch=1, prompt=128, output=2)
    w1 = _row(e1, "decode", "expert_up")["bytes"].sum() + _row(e1, "decode", "expert_down")["bytes"].sum()
    act1 = 32 * 2 * ((4096 + 2 * 14336) + (14336 + 4096)) * 2  # 2 token-rows through the experts
    assert w1 == pytest.approx(32 * 2 * one_expert + act1, rel=1e-12)  # top-2 of 8 at batch 1
    e512 = ridgeline.estimate(m, "H200_SXM", batch=512, prompt=128, output=2, tp=4)
    w512 = _row(e512, "decode", "expert_up")["bytes"].sum() + _row(e512, "decode", "expert_down")["bytes"].sum()
    distinct = 8 * (1 - (1 - 2 / 8) ** 512)
    assert distinct > 7.999999
    act = 32 * 512 * 2 * ((4096 + 2 * 14336 / 4) + (14336 / 4 + 4096)) * 2
    assert w512 == pytest.approx(32 * distinct * one_expert / 4 + act, rel=1e-12)


def test_expert_parallel_plan():
    m = Model.from_config("deepseek-ai/DeepSeek-V3")
    tp = ridgeline.estimate(m, "H200_SXM", tp=8, allow_no_fit=True)
    ep = ridgeline.estimate(m, "H200_SXM", tp=8, ep=8, allow_no_fit=True)
    # EP over the TP group: no all-to-all (every rank holds every token after the attention
    # all-reduce), the same FFN all-reduce as TP, so EP is not slower than TP at the bound
    comm = {k: e.breakdown.filter(e.breakdown["comm_s"] > 0)["comm_s"].sum() for k, e in (("tp", tp), ("ep", ep))}
    assert comm["ep"] == pytest.approx(comm["tp"], rel=1e-12) and comm["ep"] > 0
    assert ep.ttft_s <= tp.ttft_s * 1.001 and ep.tpot_s <= tp.tpot_s * 1.001
    # the same expert weights, split by whole experts instead of slices
    assert ep.memory["weights_bytes"] == pytest.approx(tp.memory["weights_bytes"], rel=1e-3)
    with pytest.raises(PlanError, match="EP 3 must divide TP 8"):
        ridgeline.estimate(m, "H200_SXM", tp=8, ep=3)
    # attention DP: 8 groups of TP 1, EP 8 over them; each group's tokens dispatched and combined
    adp = ridgeline.estimate(m, "H200_SXM", tp=1, attention_dp=8, ep=8, batch=4, allow_no_fit=True)
    assert _row(adp, "decode", "expert_dispatch_combine")["comm_s"].sum() > 0
    assert adp.parallel["devices"] == 8 and adp.plan["attention_dp"] == 8
    with pytest.raises(PlanError, match="EP 3 must divide TP 1 x attention DP 8"):
        ridgeline.estimate(m, "H200_SXM", tp=1, attention_dp=8, ep=3)
    with pytest.raises(PlanError, match="attention_dp"):
        ridgeline.estimate(m, "H200_SXM", attention_dp=0)
    # MoE TP x EP: EP 4 over TP 8 holds 64 whole experts a rank, each over 2 ranks: the same
    # expert bytes per rank, the expert GEMMs at a quarter of the token-rows and half the width
    ep4 = ridgeline.estimate(m, "H200_SXM", tp=8, ep=4, allow_no_fit=True)
    assert ep4.memory["weights_bytes"] == pytest.approx(tp.memory["weights_bytes"], rel=1e-3)
    up = {k: _row(e, "prefill", "expert_up")["flops"].sum() for k, e in (("tp", tp), ("ep4", ep4))}
    assert up["ep4"] == pytest.approx(up["tp"], rel=1e-12)  # (t k / 4) x (w / 2) vs (t k) x (w / 8)
    with pytest.raises(PlanError, match="EP 16 does not divide the 8 experts"):
        ridgeline.estimate("mistralai/Mixtral-8x7B-v0.1", "H200_SXM", tp=16, ep=16)


def test_gpt_oss_mxfp4_on_experts_only():
    m = Model.from_config("openai/gpt-oss-20b")
    e = ridgeline.estimate(m, "H100_SXM")
    p = m.params
    assert e.plan["weights"] == "mxfp4" and e.gemm_dtype == "bf16"
    # experts at 4.25 bits (4-bit E2M1 + one 8-bit scale per 32) with 16-bit biases; the rest in bf16
    fe, d, n_exp, layers = 2880, 2880, 32, 24
    expert_w = n_exp * layers * (d * 2 * fe + fe * d)
    expert_b = n_exp * layers * (2 * fe + d)
    assert p["experts"] == expert_w + expert_b
    rest = p["total"] - p["experts"]
    want = expert_w * 4.25 / 8 + expert_b * 2 + rest * 2
    assert e.memory["weights_bytes"] == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize(
    "fmt,bits",
    [("q4_0", 4.5), ("q8_0", 8.5), ("q6_k", 6.5625), ("q4_k", 4.5), ("int4", 4 + 16 / 128), ("gptq", 4 + 20 / 128)],
)
def test_weight_formats_from_their_block_layouts(fmt, bits):
    m = Model.from_config("meta-llama/Llama-2-7b-hf")  # 4096 x 11008 FFN: every K divisible by 128
    e = ridgeline.estimate(m, "RTX_4090", weight_dtype=fmt, runtime="none")
    p = m.params
    linear = p["attention"] + p["ffn"]
    got_linear_bytes = e.memory["weights_bytes"] - p["norms"] * 2
    gguf = fmt.startswith("q")
    emb_bits = bits if gguf else 16
    head_bits = 6.5625 if gguf and bits < 6.5625 else (bits if gguf else 16)
    want = linear * bits / 8 + p["embedding"] * emb_bits / 8 + p["lm_head"] * head_bits / 8
    assert got_linear_bytes == pytest.approx(want, rel=1e-12)
    assert e.gemm_dtype == "bf16"  # weight-only formats compute at the bf16 peak (W4A16)


def test_q4_k_m_keeps_v_and_down_in_more_bits():
    m = Model.from_config("meta-llama/Llama-2-7b-hf")
    share = use_more_bits_share(32)
    # layers 0-3 and 28-31, and i = 6, 9, ..., 27 where (i - 4) % 3 == 2 (llama.cpp use_more_bits)
    assert share == 16 / 32
    e = ridgeline.estimate(m, "RTX_4090", weight_dtype="q4_k_m")
    d, f, layers = 4096, 11008, 32
    v_bits = (1 - share) * 4.5 + share * 6.5625
    linear = layers * (3 * d * d * 4.5 + d * d * v_bits + 2 * d * f * 4.5 + f * d * v_bits) / 8
    want = linear + 32000 * d * 4.5 / 8 + 32000 * d * 6.5625 / 8 + m.params["norms"] * 2
    assert e.memory["weights_bytes"] == pytest.approx(want, rel=1e-12)


def test_quantization_config_methods(tmp_path):
    import json

    base = json.loads(_data.read_text("data/models/meta-llama--Llama-2-7b-hf.json"))
    gptq = {**base, "quantization_config": {"quant_method": "gptq", "bits": "4", "group_size": 128}}
    e = ridgeline.estimate(Model.from_dict(gptq, "llama2-gptq"), "A100_SXM_80GB")
    assert e.plan["weights"] == "gptq int4 g128" and e.plan["weights_source"] == "checkpoint quantization_config"
    ct = {
        **base,
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
                    "input_activations": {"num_bits": 8, "type": "float", "dynamic": True},
                }
            },
            "ignore": ["lm_head"],
        },
    }
    h = ridgeline.estimate(Model.from_dict(ct, "llama2-fp8-dynamic"), "H100_SXM")
    assert h.gemm_dtype == "fp8"
    a = ridgeline.estimate(Model.from_dict(ct, "llama2-fp8-dynamic"), "A100_SXM_80GB")
    assert a.gemm_dtype == "bf16" and any("no fp8 path" in w for w in a.warnings)
    for bad, key in (
        ({"quant_method": "mystery"}, "quant_method"),
        ({"quant_method": "gptq", "bits": "four"}, "bits"),
        ({"quant_method": "gptq", "bits": 4, "group_size": "big"}, "quantization_config"),
    ):
        with pytest.raises(ridgeline.ModelConfigError, match=key):
            ridgeline.estimate(Model.from_dict({**base, "quantization_config": bad}, "x"), "H100_SXM")


def test_name_hints_and_override_precedence():
    import json

    base = json.loads(_data.read_text("data/models/meta-llama--Llama-3.1-8B.json"))
    awq = ridgeline.estimate(Model.from_dict(base, "someone/Llama-3.1-8B-Instruct-AWQ"), "L40S")
    assert awq.plan["weights"] == "awq_int4_g128" and "hint" in awq.plan["weights_source"]
    forced = ridgeline.estimate(Model.from_dict(base, "someone/Llama-3.1-8B-Instruct-AWQ"), "L40S", weight_dtype="bf16")
    assert forced.plan["weights_source"] == "--weight-dtype"
    assert forced.memory["weights_bytes"] > 3 * awq.memory["weights_bytes"] / 2
    with pytest.raises(PlanError, match="unknown weight format"):
        ridgeline.estimate("meta-llama/Llama-3.1-8B", "L40S", weight_dtype="q3_weird")


def test_quantized_gemms_are_marked_for_their_own_efficiency():
    e = ridgeline.estimate("meta-llama/Llama-2-7b-hf", "RTX_4090", weight_dtype="q4_0", runtime="llamacpp-cuda",
                           calibrated=False)  # fmt: skip
    rows = {r["op"]: r["quantized"] for r in e.breakdown_rows() if r["phase"] == "prefill"}
    assert rows["qkv_proj"] and rows["ffn_up"] and rows["o_proj"]
    assert not rows["attention"] and not rows["norm"]
    assert e.gemm_dtype == "int8"  # llama.cpp's MMQ kernels (data/calibration/runtime_paths.csv)
    plain = ridgeline.estimate("meta-llama/Llama-2-7b-hf", "RTX_4090")
    assert not any(r["quantized"] for r in plain.breakdown_rows())


def test_mla_absorbed_gemms_are_quantized_with_their_weights():
    # DeepSeek-V3's absorbed decode products read kv_b_proj: fp8 blocks as shipped, bf16 on request
    for wd, quantized in ((None, True), ("bf16", False)):
        e = ridgeline.estimate("deepseek-ai/DeepSeek-V3", "H200_SXM", tp=8, batch=4, prompt=256, output=4,
                               weight_dtype=wd, allow_no_fit=True, calibrated=False)  # fmt: skip
        flags = {r["quantized"] for r in e.breakdown_rows() if r["op"] in ("q_absorb", "v_unabsorb")}
        assert flags == {quantized}, wd
