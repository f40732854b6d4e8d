"""The normaliser and parameter counter against published counts."""

import csv
import json
import re

import pytest
from conftest import REPO
from ridgeline import Model, ModelConfigError, UnknownNameError, _data

INDEX = list(csv.DictReader(_data.read_text("data/models/INDEX.csv").splitlines()))

MOE_ACTIVE = list(csv.DictReader(_data.read_text("data/models/moe_active.csv").splitlines()))

# Every config of the current-models folder (shared/data/aic/model_configs, copied verbatim into
# tests/data/aic_model_configs but for one 3 MB file), counted or refused, with the publisher's figure.
AIC = list(csv.DictReader(_data.read_text("data/models/aic_configs.csv").splitlines()))
AIC_DIR = REPO / "tests" / "data" / "aic_model_configs"


def _published(row):
    """The exact/computed count in INDEX.csv's published_params."""
    m = re.search(r"(?:exact|computed(?: main model)?|text stack computed)\s+([\d,]{9,})", row["published_params"])
    assert m, row["published_params"]
    return int(m.group(1).replace(",", ""))


def _hf_id(row):
    return row["file"].rsplit("/", 1)[-1][: -len(".json")].replace("--", "/", 1)


@pytest.mark.parametrize("row", INDEX, ids=[r["file"] for r in INDEX])
def test_every_index_model_matches_its_published_count(row):
    total = Model.from_config(_hf_id(row)).total_params
    want = _published(row)
    assert abs(total - want) / want < 0.005, (row["file"], total, want)


def _within(got, published, precision):
    """Within 0.5% of the published figure, or within the figure's quoted precision (one unit of its
    last digit, as data/models/moe_active.csv): a figure quoted as 744B or 1T cannot say more."""
    want, p = float(published), float(precision)
    return abs(got - want) <= max(0.005 * want, p)


@pytest.mark.parametrize("row", AIC, ids=[r["config"] for r in AIC])
def test_every_current_config_is_counted_against_its_published_figure_or_refused(row):
    path = AIC_DIR / row["config"]
    if not path.exists():
        pytest.skip(f"{row['config']}: not copied (over 1 MB); see test_only_one_current_config_is_not_copied")
    if row["outcome"] == "refused":
        with pytest.raises(ModelConfigError, match=re.escape(f"model config key '{row['refused_key']}'")):
            Model.from_config(path)
        return
    m = Model.from_config(path)
    p = m.params
    assert (p["total"], p["active"]) == (int(row["total"]), int(row["active"]))  # the table is this code's count
    assert (m.unpriced is None) == (row["engine"] == "priced")
    if row["published_total"]:
        # a row outside its figure carries the reason found (data/models/aic_configs.csv miss)
        assert _within(p["total"], row["published_total"], row["total_precision"]) != bool(row["miss"]), row
    if row["published_active"]:
        conventions = {"with_embedding": ["active"], "non_embedding": ["active_non_embedding"]}
        keys = conventions.get(row["active_convention"], ["active", "active_non_embedding"])  # unstated: either
        assert any(_within(p[k], row["published_active"], row["active_precision"]) for k in keys), row


def test_only_one_current_config_is_not_copied():
    missing = {r["config"] for r in AIC if not (AIC_DIR / r["config"]).exists()}
    assert missing == {"nvidia--MiniMax-M3-NVFP4_config.json"}
    # it is refused for the keys MiniMax-M3 has too
    m3 = next(r for r in AIC if r["config"] == "MiniMaxAI--MiniMax-M3_config.json")
    assert m3["outcome"] == "refused" and m3["refused_key"] == "sparse_attention_config"


@pytest.mark.parametrize(
    "config,safetensors",
    [  # Hugging Face safetensors totals (the weights' own count): text + vision tower + MTP layers
        ("nvidia--Qwen3.6-27B-NVFP4_config.json", 27_781_427_952),  # Qwen/Qwen3.6-27B, all BF16
        ("Qwen--Qwen3.5-122B-A10B_config.json", 125_086_497_008),  # BF16 125,086,490,096 + F32 6,912
        ("nvidia--Qwen3.6-35B-A3B-NVFP4_config.json", 35_951_822_704),  # Qwen/Qwen3.6-35B-A3B, BF16
        # nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16: Mamba2, latent MoE, MTP "*E", no tower
        ("nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8_config.json", 123_611_012_096),
    ],
)
def test_hybrid_counts_equal_the_weights_to_the_parameter(config, safetensors):
    m = Model.from_config(AIC_DIR / config)
    assert m.mtp_layers == 1 and m.mtp_params is not None
    towers = sum(n or 0 for n in m.tower_params)
    assert m.towers in ((), ("vision tower",)) and None not in m.tower_params
    assert m.total_params + towers + m.mtp_params == safetensors


@pytest.mark.parametrize("row", MOE_ACTIVE, ids=[r["hf_id"] for r in MOE_ACTIVE])
def test_moe_active_parameters_match_the_published_figure(row):
    # Published active counts are quoted to a stated precision and under the
    # publisher's convention (with or without the embedding table): both recorded with their source.
    p = Model.from_config(row["hf_id"]).params
    got = p["active"] if row["convention"] == "with_embedding" else p["active_non_embedding"]
    want, precision = float(row["published_active"]), float(row["precision"])
    assert abs(got - want) <= max(0.005 * want, precision), (row["hf_id"], got, want)
    assert p["active"] < p["total"] / 3  # sparse: far fewer active than total


def test_headline_moe_counts():
    ds = Model.from_config("deepseek-ai/DeepSeek-V3")
    assert ds.total_params == 671_026_419_200  # 671B, the MTP module excluded
    assert abs(ds.active_params - 37e9) < 1e9  # 37B activated (DeepSeek-V3 report)
    assert Model.from_config("openai/gpt-oss-20b").total_params == 20_914_757_184
    assert Model.from_config("openai/gpt-oss-120b").total_params == 116_829_156_672


@pytest.mark.parametrize(
    "name,want",
    [
        ("openai-community/gpt2", 124.44e6),  # with the 0.79M learned position embeddings (stated convention)
        ("microsoft/phi-2", 2.779e9),
        ("bigcode/starcoder2-3b", 3.030e9),
        ("meta-llama/Meta-Llama-3-8B", 8.03e9),
        ("google/gemma-2-9b", 9.24e9),  # the classic bug counts 7.08B
        ("mistralai/Mixtral-8x7B-v0.1", 46.70e9),
    ],
)
def test_seed_panel_within_0_3_percent(name, want):
    assert abs(Model.from_config(name).total_params - want) / want < 0.003


def _cfg(name):
    return json.loads(_data.read_text(f"data/models/{name.replace('/', '--', 1)}.json"))


def test_mixtral_is_gated_without_hidden_act():
    cfg = _cfg("mistralai/Mixtral-8x7B-v0.1")
    cfg.pop("hidden_act")
    m = Model.from_dict(cfg)
    assert m.gated_ffn and "registry" in m.gated_by
    assert abs(m.total_params - 46.70e9) / 46.70e9 < 0.003
    assert abs(m.active_params - 12.9e9) / 12.9e9 < 0.005  # Mistral AI: 12.9B active


# A tiny config with every required key, for rules that do not depend on size.
_TINY = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "vocab_size": 100,
    "intermediate_size": 128,
}


def test_gated_cascade_for_unknown_families():
    base = {**_TINY, "max_position_embeddings": 512, "model_type": "newfam"}
    assert Model.from_dict({**base, "hidden_act": "silu"}).gated_ffn
    assert not Model.from_dict({**base, "hidden_act": "gelu"}).gated_ffn
    assert Model.from_dict({**base, "hidden_act": "swiglu"}).gated_ffn
    # the family registry wins over the activation name: phi uses gelu_new but Phi3 is gated
    assert Model.from_dict({**base, "hidden_act": "gelu", "model_type": "phi3"}).gated_ffn


def test_tied_defaults_and_head_bias():
    assert Model.from_config("openai-community/gpt2").tie_word_embeddings
    assert Model.from_config("bigcode/starcoder2-3b").tie_word_embeddings
    assert Model.from_config("Qwen/Qwen2.5-0.5B").tie_word_embeddings
    phi = Model.from_config("microsoft/phi-2")
    assert not phi.tie_word_embeddings and phi.params["lm_head"] == 51200 * 2560 + 51200


def test_gptj_counts_as_its_modules_do():
    # transformers modeling_gptj.py: one LayerNorm per block shared by the parallel attention and
    # MLP, q/k/v/out without bias, fc_in/fc_out and lm_head with bias; n_inner null => 4 d
    d, layers, vocab = 4096, 28, 50400
    f = 4 * d
    block = 2 * d + 4 * d * d + (d * f + f) + (f * d + d)
    want = vocab * d + layers * block + 2 * d + (d * vocab + vocab)
    m = Model.from_config("EleutherAI/gpt-j-6b")
    assert m.total_params == want == 6_050_882_784
    assert not m.tie_word_embeddings and m.params["lm_head"] == d * vocab + vocab


def test_windows_per_layer():
    g2 = Model.from_config("google/gemma-2-9b")
    assert sorted((g["count"], g["attention"]["window"] or 0) for g in g2.layer_groups) == [(21, 0), (21, 4096)]
    assert [g["attention"]["window"] for g in Model.from_config("mistralai/Mistral-7B-v0.1").layer_groups] == [4096]
    assert [g["attention"]["window"] for g in Model.from_config("Qwen/Qwen2.5-7B").layer_groups] == [None]
    g3 = Model.from_config("google/gemma-3-27b-it")
    assert sorted((g["count"], g["attention"]["window"] or 0) for g in g3.layer_groups) == [(10, 0), (52, 1024)]


GEMMA3_NON_EMBEDDING = [("google/gemma-3-4b-it", 3_209e6), ("google/gemma-3-27b-it", 25_600e6)]


@pytest.mark.parametrize("hf_id,non_embedding", GEMMA3_NON_EMBEDDING)
def test_gemma3_text_stacks_match_the_tech_report(hf_id, non_embedding):
    # Gemma 3 technical report, Table 1: non-embedding parameters (millions) of the text stack.
    m = Model.from_config(hf_id)
    assert abs(m.params["active_non_embedding"] - non_embedding) < 0.5e6
    assert sorted((g["count"], g["attention"]["window"] or 0) for g in m.layer_groups) == sorted(
        [(m.num_layers // 6, 0), (m.num_layers - m.num_layers // 6, 1024)]
    )


def test_kv_bytes_per_token_closed_form():
    # Llama-3.1-8B: 32 layers x 2 (K, V) x 8 kv heads x 128 x 2 bytes
    assert Model.from_config("meta-llama/Llama-3.1-8B").kv_bytes_per_token(2.0) == 32 * 2 * 8 * 128 * 2
    # Falcon-7B is multi-query: one KV head of 64
    assert Model.from_config("tiiuae/falcon-7b").kv_bytes_per_token(2.0) == 32 * 2 * 1 * 64 * 2


def test_max_model_len_rules():
    base = {**_TINY, "max_position_embeddings": 4096, "model_type": "llama"}
    assert Model.from_dict(base).max_model_len == 4096
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    assert Model.from_dict({**base, "rope_scaling": yarn}).max_model_len == 131072
    llama3 = {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}
    assert Model.from_dict({**base, "max_position_embeddings": 131072, "rope_scaling": llama3}).max_model_len == 131072
    assert Model.from_config("meta-llama/Llama-3.1-8B").max_model_len == 131072


@pytest.mark.parametrize(
    "patch,key",
    [
        ({"hidden_size": None}, "hidden_size"),
        ({"num_attention_heads": 7}, "num_attention_heads"),
        ({"num_hidden_layers": -2}, "num_hidden_layers"),
        ({"num_hidden_layers": "32"}, "num_hidden_layers"),
        ({"intermediate_size": 1.5}, "intermediate_size"),
        ({"num_key_value_heads": 3}, "num_key_value_heads"),
        ({"num_local_experts": 4, "num_experts_per_tok": 5}, "num_experts_per_tok"),
        ({"hidden_act": "mystery"}, "hidden_act"),
        ({"tie_word_embeddings": "yes"}, "tie_word_embeddings"),
    ],
)
def test_malformed_configs_name_the_key(patch, key):
    cfg = {**_cfg("meta-llama/Llama-3.1-8B"), **patch}
    cfg = {k: v for k, v in cfg.items() if v is not None}
    with pytest.raises(ModelConfigError, match=key):
        Model.from_dict(cfg)


def test_strict_and_lenient_json_paths():
    from ridgeline.models.config import read_json

    for name in [n for n in _data.list_files("data/models/") if n.endswith(".json")]:
        cfg, how = read_json(_data.read_text(name), name)
        if "Nemotron-H" in name or "Nemotron-3-Super" in name:  # hold the non-standard token Infinity
            assert how.startswith("lenient") and "Infinity" in how
        else:
            assert how == "strict JSON", name
        assert isinstance(cfg, dict)
    assert "lenient" in Model.from_config("nvidia/Nemotron-H-56B-Base-8K").source


def test_unknown_family_with_standard_keys_counts_like_llama():
    cfg = {**_cfg("meta-llama/Llama-3.1-8B"), "model_type": "mystery", "architectures": ["MysteryForCausalLM"]}
    m = Model.from_dict(cfg)
    assert m.gated_ffn and m.gated_by.startswith("unknown family")
    assert m.total_params == 8_030_261_248


def test_local_paths_and_nonstandard_json(tmp_path):
    d = tmp_path / "mymodel"
    d.mkdir()
    cfg = _cfg("meta-llama/Llama-3.2-1B")
    text = json.dumps(cfg)[:-1] + ', "some_limit": Infinity}'
    (d / "config.json").write_text(text)
    assert Model.from_config(d).total_params == Model.from_config("meta-llama/Llama-3.2-1B").total_params
    assert Model.from_config(d / "config.json").num_layers == 16
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ModelConfigError, match="bad.json"):
        Model.from_config(tmp_path / "bad.json")


def test_unknown_model_lists_closest():
    with pytest.raises(UnknownNameError, match="meta-llama/Llama-3.1-8B"):
        Model.from_config("meta-llama/Llama-3.1-8b-typo")
    assert Model.from_config("llama-3.1-8b").name == "meta-llama/Llama-3.1-8B"


def test_chunked_scan_flops_binding_is_the_engines_closed_form():
    import numpy as np
    from ridgeline import _core

    # one 64-token chunk of the gated delta rule, dk = dv = 128, one head:
    # 6 n^2 dk + 4 n^2 dv + 2 n^3 / 3 + 6 n dk dv + dk dv
    chunk64 = 3_145_728 + 2_097_152 + 524_288 / 3 + 6_291_456 + 16_384
    got = _core.chunked_scan_flops("gated_delta", np.array([64, 128, 0], dtype=np.uint64), 64.0, 1.0, 128.0, 128.0)
    assert got.tolist() == pytest.approx([chunk64, 2 * chunk64, 0.0], rel=1e-12)
    with pytest.raises(ValueError, match="scan must be"):
        _core.chunked_scan_flops("delta", np.array([1], dtype=np.uint64), 64.0, 1.0, 128.0, 128.0)
    with pytest.raises(ValueError, match="chunk must be finite"):
        _core.chunked_scan_flops("ssd", np.array([1], dtype=np.uint64), 0.0, 1.0, 128.0, 128.0)


def test_a_multimodal_estimate_says_its_tower_is_not_priced():
    import ridgeline

    e = ridgeline.estimate("Qwen/Qwen3-VL-8B-Instruct", "H100_SXM")
    assert any("vision tower (576,388,336 parameters) is not" in w for w in e.warnings)
    assert not any("tower" in w for w in ridgeline.estimate("Qwen/Qwen3-8B", "H100_SXM").warnings)


# not bundled (tests/data/model_configs/README.md: a bundled model enters the structure fingerprint)
QWEN3_NEXT = REPO / "tests" / "data" / "model_configs" / "Qwen--Qwen3-Next-80B-A3B-Instruct.json"


def _qwen3_next_config():
    return json.loads(QWEN3_NEXT.read_text())


def test_qwen3_next_states_its_hybrid_layout_by_interval_and_is_counted_as_one():
    # The Hub config has no layer_types: full_attention_interval 4 (transformers Qwen3NextConfig:
    # layer i is full attention when (i + 1) % 4 == 0) gives 12 gated attention layers and 36
    # Gated DeltaNet layers; read as dense, all 48 were counted as attention (issue 42).
    cfg = _qwen3_next_config()
    assert "layer_types" not in cfg and cfg["full_attention_interval"] == 4
    m = Model.from_config(QWEN3_NEXT)
    s = m.summary()
    groups = {("linear" if g["linear"] else "attention"): g for g in s["layer_groups"]}
    assert groups["linear"]["count"] == 36 and groups["attention"]["count"] == 12
    assert groups["attention"]["attention"]["output_gate"] is True  # q_proj 2 x heads x head_dim
    # published: 80B total (HF Transformers docs model_doc/qwen3_next), within 0.5%
    assert abs(m.total_params - 80e9) / 80e9 < 0.005
    # KV only on the 12 attention layers: 12 x 2 (K, V) x 2 KV heads x 256 x 2 bytes
    assert m.kv_bytes_per_token(2.0) == 12 * 2 * 2 * 256 * 2
    # the same model with its layout written out as a list counts the same, to the parameter
    listed = {**cfg, "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(48)]}
    del listed["full_attention_interval"]
    assert Model.from_dict(listed).params == m.params


def test_a_hybrid_layout_stated_twice_must_agree_and_an_interval_needs_its_linear_layers():
    cfg = _qwen3_next_config()
    both = {**cfg, "layer_types": ["full_attention" if i % 2 else "linear_attention" for i in range(48)]}
    with pytest.raises(ModelConfigError, match="key 'layer_types': disagrees with full_attention_interval"):
        Model.from_dict(both)
    dense = {k: v for k, v in cfg.items() if not k.startswith("linear_")}
    with pytest.raises(ModelConfigError, match="model config key 'full_attention_interval'"):
        Model.from_dict(dense)
    for bad in (0, -4, 2.5, "4"):
        with pytest.raises(ModelConfigError, match="full_attention_interval"):
            Model.from_dict({**cfg, "full_attention_interval": bad})


def test_an_unknown_layer_interval_is_refused_naming_it():
    cfg = json.loads(_data.read_text("data/models/meta-llama--Llama-3.1-8B.json"))
    with pytest.raises(ModelConfigError, match="model config key 'sliding_attention_interval'"):
        Model.from_dict({**cfg, "sliding_attention_interval": 2})
    # null or false says the feature is off: counted as before
    off = Model.from_dict({**cfg, "sliding_attention_interval": None})
    assert off.total_params == Model.from_dict(cfg).total_params
