"""How a config's keys are read (one reader a kind: a count, a name, a flag, a list of layer indices),
and the tables of what each model family's keys mean where the keys alone do not say (gated FFNs,
biases, norms, sinks, class defaults), each with its source."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from .._checks import MAX_EXACT
from ..errors import ModelConfigError

_GATED_ACTIVATIONS = {"swiglu", "geglu", "reglu", "glu", "silu_and_mul", "gelu_and_mul", "swiglu_oai"}


# Step 2: the structural fact of each family's modeling code (an MLP with gate_proj or not),
# keyed by architectures[0] first, then model_type.
_GATED_BY_ARCH = {
    "LlamaForCausalLM": True,
    "MistralForCausalLM": True,
    "MixtralForCausalLM": True,
    "Qwen2ForCausalLM": True,
    "Qwen3ForCausalLM": True,
    "Qwen2MoeForCausalLM": True,
    "Qwen3MoeForCausalLM": True,
    "GptOssForCausalLM": True,
    "DeepseekV3ForCausalLM": True,
    "NemotronHForCausalLM": False,
    "GemmaForCausalLM": True,
    "Gemma2ForCausalLM": True,
    "Gemma3ForCausalLM": True,
    "Gemma3ForConditionalGeneration": True,
    "Phi3ForCausalLM": True,
    "GPT2LMHeadModel": False,
    "GPTNeoXForCausalLM": False,
    "GPTJForCausalLM": False,
    "OPTForCausalLM": False,
    "FalconForCausalLM": False,
    "BloomForCausalLM": False,
    "MPTForCausalLM": False,
    "PhiForCausalLM": False,
    "Starcoder2ForCausalLM": False,
    "NemotronForCausalLM": False,
}


_GATED_BY_TYPE = {
    "llama": True,
    "mistral": True,
    "mixtral": True,
    "qwen2": True,
    "qwen3": True,
    "qwen2_moe": True,
    "qwen3_moe": True,
    "gemma": True,
    "gemma2": True,
    "gemma3": True,
    "gemma3_text": True,
    "phi3": True,
    "deepseek_v2": True,
    "deepseek_v3": True,
    "olmo2": True,
    "cohere": True,
    "granite": True,
    "gpt_oss": True,
    "gpt2": False,
    "gpt_neox": False,
    "gptj": False,
    "opt": False,
    "falcon": False,
    "bloom": False,
    "mpt": False,
    "phi": False,
    "starcoder2": False,
    "nemotron": False,
    "nemotron_h": False,
    "nemotron-nas": True,  # DeciLM / Llama-Nemotron NAS: LlamaMLP blocks
    "llama4_text": True,
    "mimo_v2_flash": True,
    # the 2026 families (each one's modeling code: an MLP or experts with gate_proj)
    "kimi_k2": True,
    "deepseek_v32": True,
    "glm_moe_dsa": True,
    "minimax_m2": True,
    "qwen3_next": True,
    "qwen3_5_text": True,
    "qwen3_5_moe_text": True,
    "qwen3_vl_text": True,
    "qwen3_vl_moe_text": True,
    "step3p7": True,
    "mimo": True,
}


# Families with per-head q/k RMSNorm (q_norm, k_norm over head_dim).
_QK_NORM_TYPES = {
    "qwen3", "qwen3_moe", "gemma3", "gemma3_text", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text",
    "qwen3_vl_text", "qwen3_vl_moe_text",
}  # fmt: skip


# Families whose shared expert has a sigmoid gate (shared_expert_gate: hidden -> 1).
_SHARED_GATE_TYPES = {"qwen2_moe", "qwen3_next", "qwen3_5_moe_text"}


# Families whose attention output is always gated (q_proj 2 x heads x head_dim, the gate half
# sigmoid-multiplied into the output): transformers Qwen3NextAttention, whose config has no
# attn_output_gate key (Qwen3.5's states it).
_OUTPUT_GATE_TYPES = {"qwen3_next"}


# Families whose routers carry a per-expert score-correction bias (DeepSeek's noaux_tc routing).
# Not Nemotron-H: Nemotron-3's checkpoints hold no e_score_correction_bias (Super's safetensors
# total equals the count without it, to the parameter).
_NOAUX_TYPES = {"deepseek_v3", "kimi_k2", "deepseek_v32", "glm_moe_dsa", "mimo_v2_flash"}


# Config keys that change the architecture in a way the normaliser does not model yet: a config
# holding one (not null, not false) is refused, naming the feature, never counted with the part
# dropped. Keys the normaliser reads are not listed; generic checks below catch unknown
# per-layer lists and *_pattern keys.
_UNSUPPORTED_KEYS = {
    "compress_ratios": "DeepSeek-V4 compressed attention (compress_ratios)",
    "hc_mult": "hyper-connections (hc_mult)",
    "o_lora_rank": "a low-rank grouped output projection (o_lora_rank)",
    "num_hash_layers": "hash-routed MoE layers (num_hash_layers)",
    "attention_k_eq_v": "attention with shared keys and values (attention_k_eq_v)",
    "global_head_dim": "a separate head size for global layers (global_head_dim)",
    "num_global_key_value_heads": "separate KV heads for global layers (num_global_key_value_heads)",
    "num_kv_shared_layers": "KV caches shared across layers (num_kv_shared_layers)",
    "hidden_size_per_layer_input": "per-layer input embeddings (hidden_size_per_layer_input)",
    "enable_moe_block": "a MoE block beside the dense MLP (enable_moe_block)",
    "use_double_wide_mlp": "a double-wide MLP (use_double_wide_mlp)",
    "linear_attn_config": "Kimi linear attention (linear_attn_config)",
    "sparse_attention_config": "MiniMax sparse attention (sparse_attention_config)",
    "attention_output_gate": "a gated attention output (attention_output_gate)",
    "dense_intermediate_size": "separate dense-layer widths (dense_intermediate_size)",
    "attn_res_block_size": "block attention residuals (attn_res_block_size)",
    "routed_expert_hidden_size": "latent routed experts (routed_expert_hidden_size)",
    "mla_use_output_gate": "a gated MLA output (mla_use_output_gate)",
    "index_topk_pattern": "a per-layer top-k pattern (index_topk_pattern)",
}


# Per-layer lists and patterns the normaliser reads (any other one is refused).
_UNDERSTOOD_LAYER_KEYS = {
    "layer_types", "mlp_only_layers", "hybrid_override_pattern", "mlp_layer_types", "indexer_types",
    "attn_type_list", "block_configs", "no_rope_layers", "layers_block_type", "hybrid_layer_pattern",
    "moe_layer_freq", "decoder_sparse_step", "sliding_window_pattern",
}  # fmt: skip


# Layer intervals the normaliser reads (any other ``*_interval`` key is refused): Qwen3-Next's
# hybrid layout, Llama-4's NoPE layers.
_UNDERSTOOD_INTERVALS = {"full_attention_interval", "no_rope_layer_interval"}


# Keys that describe parts outside the text decoder: reported, never priced.
_TOWER_KEYS = ("vision_config", "audio_config")


# Families with a learned attention-sink logit per head, and with a router bias.
_SINK_TYPES = {"gpt_oss"}


_ROUTER_BIAS_TYPES = {"gpt_oss"}


# Families whose experts carry biases (gpt-oss: fused gate_up and down with biases).
_EXPERT_BIAS_TYPES = {"gpt_oss"}


# Families whose norms are LayerNorm (weight + bias); the rest use RMSNorm.
_LAYERNORM_TYPES = {"gpt2", "gpt_neox", "gptj", "opt", "falcon", "bloom", "mpt", "phi", "starcoder2"}


# Class defaults of tie_word_embeddings when the key is absent (transformers config classes).
_TIED_BY_DEFAULT = {"gpt2", "opt", "falcon", "starcoder2", "gemma", "gemma2", "gemma3", "gemma3_text", "bloom"}


# Families with learned absolute position embeddings: (key for the row count, extra rows).
_LEARNED_POSITIONS = {"gpt2": ("n_positions", 0), "opt": ("max_position_embeddings", 2)}


# Families whose attention and MLP carry biases everywhere (c_attn/c_proj/c_fc with bias).
_ALL_BIAS_TYPES = {"gpt2", "gpt_neox", "opt", "phi", "bloom"}


# rope_scaling types that extend the trained window; the others already report the extended length.
_EXTENDING_ROPE = {"yarn"}


# Config-class defaults that configs rely on by leaving keys out (transformers config classes:
# FalconConfig, Gemma3TextConfig, GPT2Config, GPTJConfig).
_CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "falcon": {"max_position_embeddings": 2048, "hidden_act": "gelu"},
    "gemma3_text": {
        "vocab_size": 262208,
        "max_position_embeddings": 131072,
        "hidden_activation": "gelu_pytorch_tanh",
        "sliding_window_pattern": 6,
    },
    "gpt2": {"n_positions": 1024, "activation_function": "gelu_new"},
    # Llama4TextConfig: every 4th layer (no_rope_layer_interval) is a global NoPE layer
    "llama4_text": {"no_rope_layer_interval": 4},
    "gptj": {"n_positions": 2048, "activation_function": "gelu_new"},
}


_ACTIVATIONS = {
    "silu": "silu",
    "swish": "silu",
    "swiglu": "silu",
    "silu_and_mul": "silu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_tanh": "gelu_tanh",
    "geglu": "gelu_tanh",
    "gelu_and_mul": "gelu_tanh",
    "relu": "relu",
    "reglu": "relu",
    "relu2": "relu2",
    "squared_relu": "relu2",
    "glu": "silu",
}


def _get(cfg: Mapping[str, Any], *keys: str) -> Any:
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    return None


def _count(
    cfg: Mapping[str, Any],
    keys: tuple[str, ...],
    *,
    required: bool = True,
    default: Optional[int] = None,
    allow_zero: bool = False,
    name: Optional[str] = None,
) -> int:
    """A whole-number config value (4096.0 reads as 4096; 1.5, "8" and true are refused)."""
    label = name or keys[0]
    v = _get(cfg, *keys)
    if v is None:
        if default is not None or not required:
            return default if default is not None else 0
        raise ModelConfigError(
            f"model config key '{label}': missing (also looked for {', '.join(keys[1:]) or 'no alias'})"
        )
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise ModelConfigError(f"model config key '{label}': expected a whole number, got {v!r}")
    v = int(v)
    if v < 0 or (v == 0 and not allow_zero):
        raise ModelConfigError(f"model config key '{label}': must be {'>= 0' if allow_zero else '> 0'}, got {v}")
    if v > MAX_EXACT:
        raise ModelConfigError(
            f"model config key '{label}': must be at most 2^53 (the counts the engine holds exactly), got {v}"
        )
    return v


def _layer_indices(cfg: Mapping[str, Any], key: str, n_layers: int) -> set[int]:
    """A list of layer indices (0 .. n_layers - 1), or the empty set when absent."""
    v = cfg.get(key)
    if v is None:
        return set()
    ok = isinstance(v, list) and all(
        not isinstance(i, bool)
        and (isinstance(i, int) or (isinstance(i, float) and i.is_integer()))
        and 0 <= i < n_layers
        for i in v
    )
    if not ok:
        raise ModelConfigError(
            f"model config key '{key}': expected a list of layer indices 0..{n_layers - 1}, got {v!r}"
        )
    return {int(i) for i in v}


def _name(cfg: Mapping[str, Any], key: str) -> Optional[str]:
    """A text config value (a family, a method, a dtype), or None when absent."""
    v = cfg.get(key)
    if v is not None and not isinstance(v, str):
        raise ModelConfigError(f"model config key '{key}': expected a name, got {v!r}")
    return v


def _flag(cfg: Mapping[str, Any], key: str, default: bool, *, name: Optional[str] = None) -> bool:
    """A boolean config value, ``default`` when absent; ``name`` labels it in the error (a
    nested key such as quantization_config.zero_point)."""
    v = cfg.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ModelConfigError(f"model config key '{name or key}': expected true or false, got {v!r}")
    return v
