"""The blocks a family states its own way, each read from its keys: sliding windows and chunked
attention, MLA, Gated DeltaNet and Mamba mixers, a hybrid's layer kinds, NAS blocks, MTP modules,
the vision tower's size, and the checks that refuse a key that changes the architecture unread."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Optional

from ..errors import ModelConfigError
from .keys import (
    _EXTENDING_ROPE,
    _GATED_ACTIVATIONS,
    _GATED_BY_ARCH,
    _GATED_BY_TYPE,
    _UNDERSTOOD_INTERVALS,
    _UNDERSTOOD_LAYER_KEYS,
    _UNSUPPORTED_KEYS,
    _count,
    _flag,
    _name,
)


def _gated(cfg: Mapping[str, Any], act_name: str, arch: str, model_type: str) -> tuple[bool, str]:
    if act_name in _GATED_ACTIVATIONS:
        return True, f"activation '{act_name}' is gated-only"
    if arch in _GATED_BY_ARCH:
        return _GATED_BY_ARCH[arch], f"family registry ({arch})"
    if model_type in _GATED_BY_TYPE:
        return _GATED_BY_TYPE[model_type], f"family registry ({model_type})"
    gated = act_name in ("silu", "swish")
    return gated, f"unknown family: activation '{act_name}' -> {'gated' if gated else 'plain'}"


def _windows(cfg: Mapping[str, Any], model_type: str, n_layers: int) -> list[Optional[int]]:
    """Per-layer attention window (None = full causal)."""
    sw = cfg.get("sliding_window")
    # null or false: no window (configs write either); else a whole token count, never rounded
    w = None if sw is None or sw is False else _count(cfg, ("sliding_window",))
    layer_types = cfg.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list):
            raise ModelConfigError(
                f"model config key 'layer_types': expected a list of 'full_attention' or 'sliding_attention', "
                f"got {layer_types!r}"
            )
        if len(layer_types) != n_layers:
            raise ModelConfigError(f"model config key 'layer_types': {len(layer_types)} entries for {n_layers} layers")
        out: list[Optional[int]] = []
        for i, t in enumerate(layer_types):
            if t == "sliding_attention":
                if w is None:
                    raise ModelConfigError(
                        "model config key 'sliding_window': layer_types names sliding layers but no window size"
                    )
                out.append(w)
            elif (
                t == "full_attention"
                or (t == "linear_attention" and _is_gated_deltanet(cfg))
                or (t == "deepseek_sparse_attention" and cfg.get("index_topk") is not None)
            ):
                out.append(None)  # a linear-attention layer has no window (`_layer_kinds`: L)
            elif isinstance(t, str):
                raise ModelConfigError(f"model config key 'layer_types': layer type {t!r} is not supported yet")
            else:
                raise ModelConfigError(
                    f"model config key 'layer_types': entry {i} is {t!r}; entries are 'full_attention' or "
                    "'sliding_attention'"
                )
        return out
    if w is None:
        return [None] * n_layers
    if "use_sliding_window" in cfg:  # Qwen2/2.5/3: windows only when switched on, from max_window_layers
        if not _flag(cfg, "use_sliding_window", False):
            return [None] * n_layers
        start = _count(cfg, ("max_window_layers",), required=False, allow_zero=True)
        return [w if i >= start else None for i in range(n_layers)]
    if model_type in ("gemma2",):  # even layers slide (Gemma2DecoderLayer: not layer_idx % 2)
        return [w if i % 2 == 0 else None for i in range(n_layers)]
    pattern = _count(cfg, ("sliding_window_pattern",), required=False)
    if pattern:  # Gemma 3: every pattern-th layer is global
        return [None if (i + 1) % pattern == 0 else w for i in range(n_layers)]
    return [w] * n_layers


def _max_model_len(cfg: Mapping[str, Any]) -> int:
    base = _count(cfg, ("max_position_embeddings", "n_positions", "n_ctx", "seq_length", "max_seq_len"))
    rs = cfg.get("rope_scaling")
    if rs is None:
        return base
    if not isinstance(rs, Mapping):
        raise ModelConfigError(f"model config key 'rope_scaling': expected an object, got {rs!r}")
    for k in ("rope_type", "type"):
        if rs.get(k) is not None and not isinstance(rs[k], str):
            raise ModelConfigError(f"model config key 'rope_scaling.{k}': expected a name, got {rs[k]!r}")
    kind = rs.get("rope_type") or rs.get("type")
    factor = rs.get("factor")
    if factor is not None and (
        isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor) or factor <= 0
    ):
        raise ModelConfigError(
            f"model config key 'rope_scaling.factor': expected a finite positive number, got {factor!r}"
        )
    if kind in _EXTENDING_ROPE and factor:
        orig = _count(
            rs,
            ("original_max_position_embeddings",),
            default=base,
            name="rope_scaling.original_max_position_embeddings",
        )
        try:
            extended = math.floor(orig * factor)
        except OverflowError:  # beyond a float: the core's bounds say what a context may be
            raise ModelConfigError(
                f"model config key 'rope_scaling.factor': {orig} x {factor} positions is beyond any context length"
            ) from None
        return max(base, extended)
    return base


def _mla(cfg: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """Multi-head latent attention settings (DeepSeek-V2/V3), or None."""
    if cfg.get("kv_lora_rank") is None:
        return None
    q_lora = cfg.get("q_lora_rank")
    return {
        "q_lora_rank": None if q_lora is None else _count(cfg, ("q_lora_rank",)),
        "kv_lora_rank": _count(cfg, ("kv_lora_rank",)),
        "qk_nope_head_dim": _count(cfg, ("qk_nope_head_dim",)),
        "qk_rope_head_dim": _count(cfg, ("qk_rope_head_dim",)),
        "v_head_dim": _count(cfg, ("v_head_dim",)),
    }


def _is_gated_deltanet(cfg: Mapping[str, Any]) -> bool:
    """The config describes Gated DeltaNet linear-attention layers (Qwen3-Next, Qwen3.5)."""
    return cfg.get("linear_num_value_heads") is not None


def _gated_deltanet(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The Gated DeltaNet mixer of a Qwen3-Next / Qwen3.5 linear-attention layer."""
    return {
        "num_k_heads": _count(cfg, ("linear_num_key_heads",)),
        "num_v_heads": _count(cfg, ("linear_num_value_heads",)),
        "head_k_dim": _count(cfg, ("linear_key_head_dim",)),
        "head_v_dim": _count(cfg, ("linear_value_head_dim",)),
        "conv_kernel": _count(cfg, ("linear_conv_kernel_dim",)),
        "state_bytes": _state_bytes(cfg, "mamba_ssm_dtype"),
    }


# Families whose MTP layers the counter knows (Model.mtp_params): each module's layer is like the
# model's last (Qwen3-Next / Qwen3.5: a full-attention layer; DeepSeek-V3 and R1: an MoE layer, the
# "transformer block" of its technical report's section 2.2, model.layers.61 of the checkpoint).
# DeepSeek-V3.2 and GLM-5 (glm_moe_dsa) carry the same module on their sparse-attention layer: vLLM's
# SpeculativeConfig runs all three as deepseek_mtp ('if hf_config.model_type in ("deepseek_v3",
# "deepseek_v32", "glm_moe_dsa"): hf_config.model_type = "deepseek_mtp"'), and GLM-5's checkpoint
# holds it as model.layers.78 (self_attn.indexer, mlp.gate, eh_proj, shared_head).
_MTP_KNOWN_TYPES = {"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "deepseek_v3", "deepseek_v32", "glm_moe_dsa"}


# Vision towers whose structure the counter knows: Qwen3-VL's ViT (HF Qwen3VLVisionModel), which
# Qwen3.5 / 3.6 reuse.
_QWEN3_VL_VISION = {"qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "qwen3_5_vision", "qwen3_5_moe_vision"}


def _vision_params(v: Mapping[str, Any]) -> Optional[int]:
    """Parameters of a vision tower whose structure is known (None: not known, reported only).

    Qwen3-VL's ViT: a Conv3d patch embedding with bias (in_channels x temporal_patch x patch^2
    per output channel), learned position embeddings, `depth` blocks of two LayerNorms, a fused
    qkv and an output projection with biases and a plain (fc1, fc2) MLP with biases; a patch
    merger (LayerNorm over the hidden size, then fc1 on the spatial_merge^2 x hidden concatenation
    to itself and fc2 to the text width, with biases) and one more merger per deepstack index
    (its LayerNorm after the shuffle, over the concatenation)."""
    if v.get("model_type") not in _QWEN3_VL_VISION:
        return None
    h = _count(v, ("hidden_size",), name="vision_config.hidden_size")
    f = _count(v, ("intermediate_size",), name="vision_config.intermediate_size")
    depth = _count(v, ("depth",), name="vision_config.depth")
    cin = _count(v, ("in_channels",), name="vision_config.in_channels")
    tp = _count(v, ("temporal_patch_size",), name="vision_config.temporal_patch_size")
    p = _count(v, ("patch_size",), name="vision_config.patch_size")
    pos = _count(v, ("num_position_embeddings",), name="vision_config.num_position_embeddings")
    out = _count(v, ("out_hidden_size",), name="vision_config.out_hidden_size")
    merge = _count(v, ("spatial_merge_size",), name="vision_config.spatial_merge_size")
    deep = v.get("deepstack_visual_indexes") or []
    if not isinstance(deep, list):
        raise ModelConfigError(
            f"model config key 'vision_config.deepstack_visual_indexes': expected a list, got {deep!r}"
        )
    block = 2 * 2 * h + (h * 3 * h + 3 * h) + (h * h + h) + (h * f + f) + (f * h + h)
    hm = h * merge * merge
    merger = (hm * hm + hm) + (hm * out + out)
    return (
        h * cin * tp * p * p + h  # patch embedding
        + pos * h
        + depth * block
        + merger + 2 * h  # merger, its norm over the hidden size
        + len(deep) * (merger + 2 * hm)  # deepstack mergers, their norms after the shuffle
    )  # fmt: skip


def _nas_blocks(cfg: Mapping[str, Any], n_layers: int, heads: int, d: int) -> Optional[list[tuple[Any, Any]]]:
    """Per-layer (KV heads or None, FFN width or None) of a NAS model (DeciLM / Llama-Nemotron
    ``block_configs``): an attention block is skipped (``no_op``) or has heads / n_heads_in_group
    KV heads; an FFN is skipped or gated with width ``_find_multiple(int(2 ffn_mult d / 3), 256)``
    (DeciLM ``_ffn_mult_to_intermediate_size``). Linear replacements, sinks, windows and
    sparsity are refused. None without block_configs."""
    blocks = cfg.get("block_configs")
    if blocks is None:
        return None
    if not isinstance(blocks, list) or len(blocks) != n_layers or not all(isinstance(b, Mapping) for b in blocks):
        raise ModelConfigError(f"model config key 'block_configs': expected {n_layers} block objects")
    out: list[tuple[Any, Any]] = []
    for i, b in enumerate(blocks):
        a, f = b.get("attention"), b.get("ffn")
        if not isinstance(a, Mapping) or not isinstance(f, Mapping):
            raise ModelConfigError(f"model config key 'block_configs[{i}]': expected 'attention' and 'ffn' objects")
        refused = ("replace_with_linear", "sparsify", "num_sink_tokens", "window_length", "unshifted_sink")
        for part, keys in ((a, refused), (f, refused[:2])):
            used = [k for k in keys if part.get(k) not in (None, False)]
            if used:
                raise ModelConfigError(
                    f"model config key 'block_configs[{i}]': {used[0]} blocks are not supported yet; this model is "
                    "neither counted nor priced"
                )
        kv = None
        if not _flag(a, "no_op", False, name=f"block_configs[{i}].attention.no_op"):
            group = _count(a, ("n_heads_in_group",), name=f"block_configs[{i}].attention.n_heads_in_group")
            if heads % group:
                raise ModelConfigError(
                    f"model config key 'block_configs[{i}].attention.n_heads_in_group': {group} does not divide "
                    f"{heads} heads"
                )
            kv = heads // group
        width = None
        if not _flag(f, "no_op", False, name=f"block_configs[{i}].ffn.no_op"):
            mult = f.get("ffn_mult")
            if isinstance(mult, bool) or not isinstance(mult, (int, float)) or not math.isfinite(mult) or mult <= 0:
                raise ModelConfigError(
                    f"model config key 'block_configs[{i}].ffn.ffn_mult': expected a positive number, got {mult!r}"
                )
            width = -(-int(2 * mult * d / 3) // 256) * 256
        out.append((kv, width))
    return out


def _mtp_layers(cfg: Mapping[str, Any]) -> int:
    """Multi-token-prediction layers the config declares (DeepSeek num_nextn_predict_layers,
    Qwen3.5 mtp_num_hidden_layers, MiniMax num_mtp_modules when use_mtp)."""
    n = _count(cfg, ("num_nextn_predict_layers", "mtp_num_hidden_layers"), required=False, allow_zero=True)
    if _flag(cfg, "use_mtp", False):
        n = max(n, _count(cfg, ("num_mtp_modules",), required=False, allow_zero=True))
    return n


def _check_supported(cfg: Mapping[str, Any]) -> None:
    """Refuses a config that holds an architecture-changing key the normaliser does not model
    (``_UNSUPPORTED_KEYS``), naming the feature."""
    for key, feature in _UNSUPPORTED_KEYS.items():
        v = cfg.get(key)
        if v is not None and v is not False:
            raise ModelConfigError(
                f"model config key '{key}': {feature} is not supported yet; this model is neither counted nor priced"
            )


def _llama4_chunks(cfg: Mapping[str, Any], model_type: str, n_layers: int) -> Optional[list[Optional[int]]]:
    """Per-layer chunk of Llama-4's chunked local attention: its rope layers attend within chunks
    of attention_chunk_size, its NoPE layers (no_rope_layers 0, by default every
    no_rope_layer_interval-th layer: Llama4TextConfig) globally. None without the key."""
    if cfg.get("attention_chunk_size") is None:
        return None
    if model_type == "mimo_v2_flash":
        # MiMo-V2's attention takes sliding_window_size (vLLM MiMoV2Attention has no chunk argument);
        # its attention_chunk_size, equal to the window, is not read by its modeling code
        return None
    if model_type != "llama4_text":
        raise ModelConfigError(
            "model config key 'attention_chunk_size': chunked local attention is supported for Llama-4 "
            f"(llama4_text) only, not {model_type!r}; this model is neither counted nor priced"
        )
    chunk = _count(cfg, ("attention_chunk_size",))
    rope = cfg.get("no_rope_layers")
    if rope is None:
        every = _count(cfg, ("no_rope_layer_interval",))
        rope = [int((i + 1) % every != 0) for i in range(n_layers)]
    if not isinstance(rope, list) or len(rope) != n_layers or any(r not in (0, 1) for r in rope):
        raise ModelConfigError(f"model config key 'no_rope_layers': expected {n_layers} entries of 0 or 1")
    return [chunk if r else None for r in rope]


def _mimo_swa(cfg: Mapping[str, Any], n_layers: int) -> Optional[list[dict[str, Any]]]:
    """Per-layer attention geometry of MiMo-V2 (``hybrid_layer_pattern``: 0 a full-attention
    layer with num_attention_heads, num_key_value_heads, head_dim, v_head_dim; 1 a sliding-window
    layer of sliding_window_size with the swa_* geometry; each with a learned sink per head where
    add_full/swa_attention_sink_bias). None without the key."""
    pattern = cfg.get("hybrid_layer_pattern")
    if pattern is None:
        return None
    if not isinstance(pattern, list) or len(pattern) != n_layers or any(p not in (0, 1) for p in pattern):
        raise ModelConfigError(f"model config key 'hybrid_layer_pattern': expected {n_layers} entries of 0 or 1")
    heads = _count(cfg, ("num_attention_heads",))
    full = {
        "heads": heads,
        "kv_heads": _count(cfg, ("num_key_value_heads",)),
        "head_dim": _count(cfg, ("head_dim",)),
        "v_head_dim": _count(cfg, ("v_head_dim", "head_dim")),
        "window": None,
        "sinks": _flag(cfg, "add_full_attention_sink_bias", False),
    }
    sliding = {
        "heads": _count(cfg, ("swa_num_attention_heads",)),
        "kv_heads": _count(cfg, ("swa_num_key_value_heads",)),
        "head_dim": _count(cfg, ("swa_head_dim",)),
        "v_head_dim": _count(cfg, ("swa_v_head_dim", "swa_head_dim")),
        "window": _count(cfg, ("sliding_window_size", "sliding_window")),
        "sinks": _flag(cfg, "add_swa_attention_sink_bias", False),
    }
    return [sliding if p == 1 else full for p in pattern]


def _check_understood(cfg: Mapping[str, Any], n_layers: int) -> None:
    """Refuses a config with a per-layer list or ``*_pattern`` key the normaliser does not read."""
    for key, v in cfg.items():
        if key in _UNDERSTOOD_LAYER_KEYS:
            continue
        per_layer = isinstance(v, list) and n_layers > 3 and len(v) == n_layers
        pattern = key.endswith("_pattern") and v is not None and not key.startswith("mtp_")
        if key.endswith("_interval") and key not in _UNDERSTOOD_INTERVALS and v is not None and v is not False:
            raise ModelConfigError(
                f"model config key '{key}': a layer interval ridgeline does not understand yet; it may change the "
                "architecture, so this model is neither counted nor priced"
            )
        if per_layer or pattern:
            raise ModelConfigError(
                f"model config key '{key}': a per-layer {'pattern' if pattern else 'list'} ridgeline does not "
                "understand yet; it may change the architecture, so this model is neither counted nor priced"
            )


def _hybrid_interval(cfg: Mapping[str, Any], n_layers: int) -> Mapping[str, Any]:
    """A Gated DeltaNet hybrid's layout stated by ``full_attention_interval`` (Qwen3-Next's config
    has no ``layer_types``): every interval-th layer full attention, the others linear attention,
    as transformers' Qwen3NextConfig derives them (``"linear_attention" if (i + 1) % interval else
    "full_attention"``). Where ``layer_types`` is given too it must say the same; an interval
    without the linear-attention settings it selects between is refused, never read as dense."""
    if cfg.get("full_attention_interval") is None:
        return cfg
    every = _count(cfg, ("full_attention_interval",))
    if not _is_gated_deltanet(cfg):
        raise ModelConfigError(
            "model config key 'full_attention_interval': a hybrid layout without the linear-attention settings "
            "(linear_num_value_heads, ...) ridgeline reads; this model is neither counted nor priced"
        )
    derived = ["linear_attention" if (i + 1) % every else "full_attention" for i in range(n_layers)]
    given = cfg.get("layer_types")
    if given is None:
        return {**cfg, "layer_types": derived}
    if given != derived:
        raise ModelConfigError(
            f"model config key 'layer_types': disagrees with full_attention_interval {every} (every {every}th "
            "layer full attention); the config states two layouts"
        )
    return cfg


def _layer_kinds(cfg: Mapping[str, Any], n_layers: int) -> str:
    """One letter a layer: T = a transformer block (attention + FFN), L = a Gated DeltaNet block
    (linear attention + FFN, from layer_types); from a hybrid_override_pattern (Nemotron-H):
    M = Mamba2, * = attention, - = MLP, E = MoE."""
    pattern = cfg.get("hybrid_override_pattern")
    blocks = cfg.get("layers_block_type")
    if pattern is None and blocks is not None:  # Nemotron-3: the same pattern, in words
        letters = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
        if not isinstance(blocks, list) or len(blocks) != n_layers or any(b not in letters for b in blocks):
            raise ModelConfigError(
                f"model config key 'layers_block_type': expected {n_layers} entries of "
                f"{', '.join(repr(k) for k in letters)}; got {blocks!r}"
            )
        pattern = "".join(letters[b] for b in blocks)
    if pattern is None:
        types = cfg.get("layer_types")
        if isinstance(types, list) and _is_gated_deltanet(cfg):
            return "".join("L" if t == "linear_attention" else "T" for t in types)
        return "T" * n_layers
    if not isinstance(pattern, str) or len(pattern) != n_layers or set(pattern) - set("M*-E"):
        raise ModelConfigError(
            f"model config key 'hybrid_override_pattern': expected {n_layers} letters from M, *, -, E; got {pattern!r}"
        )
    return pattern


def _state_bytes(cfg: Mapping[str, Any], key: str) -> Optional[float]:
    """Bytes per recurrent-state value from a dtype key (None when absent: the activation dtype)."""
    dtype = _name(cfg, key)
    known = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}
    if dtype is None or dtype == "auto":
        return None
    if dtype not in known:
        raise ModelConfigError(f"model config key '{key}': {dtype!r} is not known; known: {', '.join(known)}, auto")
    return known[dtype]


def _mamba(cfg: Mapping[str, Any]) -> dict[str, Any]:
    heads, groups = _count(cfg, ("mamba_num_heads",)), _count(cfg, ("n_groups",))
    if heads % groups:
        # Mamba2's B and C projections are shared by groups of heads (vLLM MambaMixer2: num_heads % n_groups == 0)
        raise ModelConfigError(f"model config key 'n_groups': {groups} groups do not divide the {heads} Mamba2 heads")
    return {
        "chunk": _count(cfg, ("chunk_size", "mamba_chunk_size"), required=False),
        "state_bytes": _state_bytes(cfg, "mamba_ssm_cache_dtype"),
        "num_heads": _count(cfg, ("mamba_num_heads",)),
        "head_dim": _count(cfg, ("mamba_head_dim",)),
        "n_groups": _count(cfg, ("n_groups",)),
        "state_size": _count(cfg, ("ssm_state_size",)),
        "conv_kernel": _count(cfg, ("conv_kernel",)),
        "proj_bias": _flag(cfg, "mamba_proj_bias", False),
        "conv_bias": _flag(cfg, "use_conv_bias", True),
    }
