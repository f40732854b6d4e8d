"""The one normaliser of raw Hugging Face config keys (spec 20): a config's keys read into the
fields of one ``Model``, block by block (the decoder's shape, attention, the FFN and its experts,
the layer kinds of a hybrid, the MTP modules), each from the keys the families that write it use.
A key that changes the architecture and is not understood is refused, never dropped."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Optional

from ..errors import ModelConfigError
from .blocks import (
    _MTP_KNOWN_TYPES,
    _check_supported,
    _check_understood,
    _gated,
    _gated_deltanet,
    _hybrid_interval,
    _layer_kinds,
    _llama4_chunks,
    _mamba,
    _max_model_len,
    _mimo_swa,
    _mla,
    _mtp_layers,
    _nas_blocks,
    _vision_params,
    _windows,
)
from .keys import (
    _ACTIVATIONS,
    _ALL_BIAS_TYPES,
    _CLASS_DEFAULTS,
    _EXPERT_BIAS_TYPES,
    _LAYERNORM_TYPES,
    _LEARNED_POSITIONS,
    _NOAUX_TYPES,
    _OUTPUT_GATE_TYPES,
    _QK_NORM_TYPES,
    _ROUTER_BIAS_TYPES,
    _SHARED_GATE_TYPES,
    _SINK_TYPES,
    _TIED_BY_DEFAULT,
    _TOWER_KEYS,
    _count,
    _flag,
    _get,
    _layer_indices,
    _name,
)


def normalise(raw: Mapping[str, Any], name: str, source: str) -> dict[str, Any]:
    """A raw config's ``Model`` fields, every key read through one rule per block."""
    cfg, model_type, arch, quant = _unwrap(raw, name)
    _check_supported(cfg)
    cfg, d, n_layers = _shape(cfg)
    heads, mla, hd, kv, new_decoder = _heads(cfg, d)
    vocab = _count(cfg, ("vocab_size",))
    # Llama-4: intermediate_size is the experts' (and the shared expert's) width, the dense
    # layers' is intermediate_size_mlp
    f = _count(
        cfg, ("intermediate_size_mlp", "intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size"), default=4 * d
    )
    act_name, gated, gated_by = _activation(cfg, arch, model_type)
    norm, norms_per_layer = _norms(cfg, model_type, new_decoder)
    qkv_bias, o_bias, mlp_bias = _biases(cfg, model_type)
    attn = _attention_options(cfg, model_type, mla, n_layers)
    tied = _flag(cfg, "tie_word_embeddings", model_type in _TIED_BY_DEFAULT)
    pos_rows = 0
    if model_type in _LEARNED_POSITIONS:
        key, extra = _LEARNED_POSITIONS[model_type]
        pos_rows = _count(cfg, (key, "max_position_embeddings", "n_positions")) + extra
    moe, moe_layers = _experts(cfg, model_type, n_layers, f, gated, act_name, mlp_bias)
    dense = {
        "kind": "dense",
        "intermediate_size": f,
        "gated": gated,
        "activation": _ACTIVATIONS[act_name],
        "bias": mlp_bias,
    }
    attn.update(heads=heads, kv_heads=heads if mla is not None else kv, head_dim=hd, qkv_bias=qkv_bias, o_bias=o_bias,
                mla=mla)  # fmt: skip
    groups, layer_group_of, kinds = _layer_groups(cfg, model_type, n_layers, d, attn, norms_per_layer, dense, moe,
                                                  moe_layers)  # fmt: skip
    n_mtp, mtp_groups = _mtp(cfg, model_type, groups, layer_group_of, kinds)

    max_len = _max_model_len(cfg)
    core = {
        "name": name,
        "hidden_size": d,
        "vocab_size": vocab,
        "layer_groups": groups,
        "norm": norm,
        "tie_word_embeddings": tied,
        "position_embeddings": pos_rows,
        "lm_head_bias": model_type in ("phi", "gptj"),
        "max_model_len": max_len,
    }
    return dict(
        name=name,
        model_type=model_type,
        architecture=arch,
        hidden_size=d,
        num_layers=n_layers,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=hd,
        vocab_size=vocab,
        intermediate_size=f,
        gated_ffn=gated,
        gated_by=gated_by,
        activation=_ACTIVATIONS[act_name],
        norm=norm,
        tie_word_embeddings=tied,
        max_model_len=max_len,
        is_moe=any(g["ffn"]["kind"] == "moe" for g in groups),
        layer_groups=tuple(groups),
        core_json=json.dumps(core),
        source=source,
        quantization=dict(quant) if quant else None,
        torch_dtype=_name(cfg, "torch_dtype") or _name(raw, "torch_dtype") or None,
        towers=tuple(k.removesuffix("_config") + " tower" for k in _TOWER_KEYS if raw.get(k) is not None),
        tower_params=tuple(
            _vision_params(raw[k]) if k == "vision_config" and isinstance(raw[k], Mapping) else None
            for k in _TOWER_KEYS
            if raw.get(k) is not None
        ),
        mtp_layers=n_mtp,
        mtp_groups=tuple(mtp_groups),
    )


def _unwrap(raw: Mapping[str, Any], name: str) -> tuple[Mapping[str, Any], str, str, Optional[Mapping[str, Any]]]:
    """The text decoder's config (a multimodal wrapper's ``text_config``, with its class's
    defaults), its model type, its architecture class and its quantization_config."""
    if not isinstance(raw, Mapping):
        raise ModelConfigError(f"{name}: a config must be a JSON object")
    wrapper_type = _name(raw, "model_type") or ""
    cfg: Mapping[str, Any] = raw
    text_config = raw.get("text_config")
    if text_config is not None and not isinstance(text_config, Mapping):
        raise ModelConfigError(f"model config key 'text_config': expected an object, got {text_config!r}")
    if text_config is not None:
        cfg = {**text_config}
        cfg.setdefault("model_type", wrapper_type)
    model_type = _name(cfg, "model_type") or wrapper_type
    defaults = _CLASS_DEFAULTS.get(model_type)
    if defaults:
        cfg = {**defaults, **{k: v for k, v in cfg.items() if v is not None}}
    for src in (raw, cfg):
        a = src.get("architectures")
        if a is not None and (not isinstance(a, list) or not all(isinstance(x, str) for x in a)):
            raise ModelConfigError(f"model config key 'architectures': expected a list of class names, got {a!r}")
    archs = raw.get("architectures") or cfg.get("architectures")
    arch = str(archs[0]) if archs else ""

    quant = cfg.get("quantization_config") or raw.get("quantization_config")
    if quant is not None and not isinstance(quant, Mapping):
        raise ModelConfigError(f"model config key 'quantization_config': expected an object, got {quant!r}")
    return cfg, model_type, arch, quant


def _shape(cfg: Mapping[str, Any]) -> tuple[Mapping[str, Any], int, int]:
    """The hidden size and the layer count (the config with a hybrid's interval read as its
    layer types)."""
    d = _count(cfg, ("hidden_size", "n_embd", "d_model"))
    if cfg.get("num_hidden_layers") is None and isinstance(cfg.get("layers_block_type"), list):
        cfg = {**cfg, "num_hidden_layers": len(cfg["layers_block_type"])}  # Nemotron-3 Ultra: the list is the count
    n_layers = _count(cfg, ("num_hidden_layers", "n_layer", "num_layers"))
    from .. import _core

    # the normaliser walks the layers one by one: the core's work bound before any of it
    if n_layers > _core.MAX_LAYERS:
        raise ModelConfigError(
            f"model config key 'num_hidden_layers': {n_layers} layers is more than the {_core.MAX_LAYERS} "
            "one estimate builds"
        )
    _check_understood(cfg, n_layers)
    return _hybrid_interval(cfg, n_layers), d, n_layers


def _heads(cfg: Mapping[str, Any], d: int) -> tuple[int, Optional[dict[str, Any]], int, int, bool]:
    """Attention heads, MLA's settings (or None), the head dim, the KV heads, and whether the
    config is Falcon's new decoder architecture."""
    heads = _count(cfg, ("num_attention_heads", "n_head"))
    mla = _mla(cfg)
    explicit_hd = _get(cfg, "head_dim", "attention_head_dim")
    if mla is not None:
        hd = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
    elif explicit_hd is not None:
        hd = _count(cfg, ("head_dim", "attention_head_dim"))
    else:
        if d % heads != 0:
            raise ModelConfigError(
                f"model config key 'num_attention_heads': {heads} heads do not divide hidden_size {d} "
                "and no head_dim is given"
            )
        hd = d // heads
    new_decoder = _flag(cfg, "new_decoder_architecture", False)
    if _flag(cfg, "multi_query", False) and not new_decoder:
        kv = 1
    else:
        kv = _count(cfg, ("num_key_value_heads", "num_kv_heads", "n_head_kv"), default=heads)
    if heads % kv != 0:
        raise ModelConfigError(f"model config key 'num_key_value_heads': {kv} does not divide {heads} attention heads")
    return heads, mla, hd, kv, new_decoder


def _activation(cfg: Mapping[str, Any], arch: str, model_type: str) -> tuple[str, bool, str]:
    """The FFN's activation name, whether the FFN is gated, and what said so."""
    act_raw = _get(cfg, "mlp_hidden_act", "hidden_activation", "hidden_act", "activation_function")
    if act_raw is None:
        act_raw = "silu"  # PretrainedConfig families without the key (Llama-style) use SiLU
    if not isinstance(act_raw, str):
        raise ModelConfigError(f"model config key 'hidden_act': expected a name, got {act_raw!r}")
    act_name = act_raw.lower()
    if act_name not in _ACTIVATIONS:
        raise ModelConfigError(
            f"model config key 'hidden_act': activation {act_raw!r} is not known; "
            f"known: {', '.join(sorted(_ACTIVATIONS))}"
        )
    gated, gated_by = _gated(cfg, act_name, arch, model_type)
    return act_name, gated, gated_by


def _norms(cfg: Mapping[str, Any], model_type: str, new_decoder: bool) -> tuple[str, int]:
    """The norm's kind (layer or rms) and how many a decoder layer has."""
    norm = "layer" if (model_type in _LAYERNORM_TYPES or _name(cfg, "norm_type") == "layer_norm") else "rms"
    if model_type in ("gemma2", "gemma3", "gemma3_text"):
        norms_per_layer = 4
    elif model_type in ("phi", "gptj") or (
        model_type == "falcon" and _flag(cfg, "parallel_attn", True) and not new_decoder
    ):
        norms_per_layer = 1
    else:
        norms_per_layer = 2
    return norm, norms_per_layer


def _biases(cfg: Mapping[str, Any], model_type: str) -> tuple[bool, bool, bool]:
    """Whether the q/k/v, the attention output and the MLP projections carry biases."""
    all_bias = (
        model_type in _ALL_BIAS_TYPES
        or _flag(cfg, "use_bias", False)
        or (model_type == "falcon" and _flag(cfg, "bias", False))
    )
    attn_bias = _flag(cfg, "attention_bias", False)
    qkv_bias = all_bias or attn_bias or _flag(cfg, "qkv_bias", model_type in ("qwen2", "qwen2_moe"))
    o_bias = all_bias or attn_bias
    # GPT-J: q/k/v/out without bias, fc_in/fc_out and lm_head with (transformers modeling_gptj.py)
    mlp_bias = all_bias or model_type == "gptj" or _flag(cfg, "mlp_bias", False)
    return qkv_bias, o_bias, mlp_bias


def _attention_options(
    cfg: Mapping[str, Any], model_type: str, mla: Optional[dict[str, Any]], n_layers: int
) -> dict[str, Any]:
    """What every attention layer of the model shares beyond its shape: QK norms, a sparse
    attention indexer (and which layers share one), sinks and rotary positions."""
    qk_norm = model_type in _QK_NORM_TYPES or _flag(cfg, "qk_layernorm", False) or _flag(cfg, "use_qk_norm", False)
    if model_type == "llama4_text":
        qk_norm = False  # Llama4TextL2Norm: an L2 norm without weights (its few FLOPs not priced)
    qk_norm_type = _name(cfg, "qk_norm_type")
    if qk_norm_type not in (None, "per_layer", "per_head"):
        raise ModelConfigError(
            f"model config key 'qk_norm_type': {qk_norm_type!r} is not known; known: per_layer, per_head"
        )
    attn_types = cfg.get("attn_type_list")
    if attn_types is not None and (not isinstance(attn_types, list) or any(t != 1 for t in attn_types)):
        raise ModelConfigError(
            "model config key 'attn_type_list': only softmax attention layers (1) are supported; "
            "lightning linear-attention layers (0) are not yet"
        )
    indexer = None
    if cfg.get("index_topk") is not None:
        if mla is None:
            raise ModelConfigError("model config key 'index_topk': sparse attention without MLA is not supported yet")
        indexer = {
            "heads": _count(cfg, ("index_n_heads",)),
            "head_dim": _count(cfg, ("index_head_dim",)),
            "topk": _count(cfg, ("index_topk",)),
        }
    indexer_types = cfg.get("indexer_types")
    if indexer_types is not None and (
        indexer is None
        or not isinstance(indexer_types, list)
        or len(indexer_types) != n_layers
        or set(indexer_types) - {"full", "shared"}
    ):
        raise ModelConfigError(
            f"model config key 'indexer_types': expected {n_layers} entries of 'full' or 'shared' with index_topk set"
        )
    return {
        "qk_norm": qk_norm,
        "qk_norm_type": qk_norm_type,
        "indexer": indexer,
        "indexer_types": indexer_types,
        "sinks": model_type in _SINK_TYPES,
        "rotary": model_type not in ("gpt2", "opt", "bloom", "mpt"),
    }


def _experts(
    cfg: Mapping[str, Any], model_type: str, n_layers: int, f: int, gated: bool, act_name: str, mlp_bias: bool
) -> tuple[dict[str, Any], list[bool]]:
    """MoE: the routed experts' FFN (empty for a dense model) and which layers have it, with dense
    layers where the config says so."""
    from .. import _core

    n_exp = _count(cfg, ("num_local_experts", "num_experts", "n_routed_experts"), required=False, allow_zero=True)
    if n_exp > _core.MAX_EXPERTS:
        raise ModelConfigError(
            f"model config key 'num_experts': {n_exp} experts is more than the {_core.MAX_EXPERTS} "
            "one estimate routes over"
        )
    moe_layers = [False] * n_layers
    moe: dict[str, Any] = {}
    routed = _count(cfg, ("num_experts_per_tok", "experts_per_token", "moe_topk"), required=False, allow_zero=True)
    if n_exp <= 1 and routed > 1:
        raise ModelConfigError(
            f"model config key 'num_experts_per_tok': routes each token to {routed} experts of {n_exp}; a config that "
            "routes over experts it does not have is neither counted nor priced (as dense it would drop the experts)"
        )
    if n_exp <= 1:
        return moe, moe_layers
    top_k = _count(cfg, ("num_experts_per_tok", "experts_per_token", "moe_topk"))
    if top_k > n_exp:
        raise ModelConfigError(f"model config key 'num_experts_per_tok': top-k {top_k} exceeds the {n_exp} experts")
    fe = _count(cfg, ("moe_intermediate_size",), default=f)
    if model_type == "llama4_text":  # Llama4TextMoe: experts and a shared expert of intermediate_size
        fe = _count(cfg, ("intermediate_size",))
    shared = _count(
        cfg,
        ("shared_expert_intermediate_size", "shared_intermediate_size", "moe_shared_expert_intermediate_size"),
        required=False,
        allow_zero=True,
    )
    share_dim = _count(cfg, ("share_expert_dim",), required=False, allow_zero=True)  # Step-3: per shared expert
    n_shared = _count(cfg, ("n_shared_experts",), required=False, allow_zero=True)
    if n_shared and not shared:
        shared = n_shared * (share_dim or fe)
    if model_type == "llama4_text":
        shared = fe
    _moe_layers(cfg, n_layers, moe_layers)
    moe = {
        "kind": "moe",
        "num_experts": n_exp,
        "top_k": top_k,
        "expert_intermediate_size": fe,
        "shared_intermediate_size": shared,
        "gated": gated,
        "activation": _ACTIVATIONS[act_name],
        "bias": mlp_bias or model_type in _EXPERT_BIAS_TYPES,
        "router_bias": model_type in _ROUTER_BIAS_TYPES
        or (model_type in _NOAUX_TYPES and _name(cfg, "topk_method") == "noaux_tc")
        or _flag(cfg, "use_routing_bias", False)
        or _flag(cfg, "use_moe_router_bias", False),
        "shared_gate": shared > 0 and model_type in _SHARED_GATE_TYPES,
        "latent": _count(cfg, ("moe_latent_size",), required=False) or None,
    }
    return moe, moe_layers


def _moe_layers(cfg: Mapping[str, Any], n_layers: int, moe_layers: list[bool]) -> None:
    """Marks the layers whose FFN is the routed experts: after first_k_dense_replace, every
    decoder_sparse_step-th, none of mlp_only_layers, and as a per-layer mask or list says."""
    first_dense = _count(cfg, ("first_k_dense_replace",), required=False, allow_zero=True)
    mask = cfg.get("moe_layer_freq")
    if isinstance(mask, list):  # MiMo-V2: a 0/1 per layer (1: MoE)
        if len(mask) != n_layers or any(x not in (0, 1) for x in mask) or any(isinstance(x, bool) for x in mask):
            raise ModelConfigError(f"model config key 'moe_layer_freq': expected {n_layers} entries of 0 or 1")
        step = 1
    else:
        mask = None
        step = _count(cfg, ("decoder_sparse_step", "moe_layer_freq", "interleave_moe_layer_step"), default=1)
    mlp_only = _layer_indices(cfg, "mlp_only_layers", n_layers)
    mlp_types = cfg.get("mlp_layer_types")
    if mlp_types is not None and (
        not isinstance(mlp_types, list) or len(mlp_types) != n_layers or set(mlp_types) - {"dense", "sparse"}
    ):
        raise ModelConfigError(
            f"model config key 'mlp_layer_types': expected {n_layers} entries of 'dense' or 'sparse'"
        )
    for i in range(n_layers):
        moe_layers[i] = i >= first_dense and (i + 1) % step == 0 and i not in mlp_only
        if mask is not None:
            moe_layers[i] = moe_layers[i] and mask[i] == 1
        if mlp_types is not None and moe_layers[i] != (mlp_types[i] == "sparse"):
            raise ModelConfigError(
                f"model config key 'mlp_layer_types': layer {i} is {mlp_types[i]!r} but first_k_dense_replace / "
                "the MoE settings say otherwise"
            )


def _layer_groups(
    cfg: Mapping[str, Any],
    model_type: str,
    n_layers: int,
    d: int,
    attn: Mapping[str, Any],
    norms_per_layer: int,
    dense: dict[str, Any],
    moe: dict[str, Any],
    moe_layers: list[bool],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """Each layer's structure (its attention, Mamba or linear-attention mixer, its FFN, its norms),
    and the groups of identical layers the core prices once each; with the layer kinds string."""
    windows = _windows(cfg, model_type, n_layers)
    chunks = _llama4_chunks(cfg, model_type, n_layers)
    kinds = _layer_kinds(cfg, n_layers)
    mamba = _mamba(cfg) if "M" in kinds else None
    linear = _gated_deltanet(cfg) if "L" in kinds else None
    nas = _nas_blocks(cfg, n_layers, attn["heads"], d)
    swa = _mimo_swa(cfg, n_layers)
    mla, hd, qk_norm = attn["mla"], attn["head_dim"], attn["qk_norm"]
    indexer, indexer_types = attn["indexer"], attn["indexer_types"]
    # a value head narrower than the query/key head (MiMo-V2), outside MLA
    v_dim = None
    if mla is None and cfg.get("v_head_dim") is not None:
        v_dim = _count(cfg, ("v_head_dim",))
        v_dim = None if v_dim == hd else v_dim
    groups: list[dict[str, Any]] = []
    layer_group_of: list[dict[str, Any]] = []  # each layer's structure (before grouping)
    for i in range(n_layers):
        attention = {
            "heads": attn["heads"],
            "kv_heads": attn["kv_heads"],
            "head_dim": hd,
            "window": windows[i],
            "qkv_bias": attn["qkv_bias"],
            "o_bias": attn["o_bias"],
            "qk_norm": qk_norm,
            # Llama-4's NoPE layers (global attention) have no rope
            "rotary": attn["rotary"] and (chunks is None or chunks[i] is not None),
            "chunk": None if chunks is None else chunks[i],
            "sinks": attn["sinks"],
            "mla": mla,
            "output_gate": _flag(cfg, "attn_output_gate", model_type in _OUTPUT_GATE_TYPES),
            "qk_norm_all_heads": qk_norm and attn["qk_norm_type"] == "per_layer",
            "indexer": None
            if indexer is None
            else {**indexer, "shared": indexer_types is not None and indexer_types[i] == "shared"},
            "v_head_dim": v_dim,
        }
        if swa is not None:  # MiMo-V2: full and sliding layers each with their own geometry
            attention.update(swa[i])
            attention["v_head_dim"] = (
                None if attention["v_head_dim"] == attention["head_dim"] else attention["v_head_dim"]
            )
        kind = kinds[i]
        if kind == "E" and not moe:
            raise ModelConfigError("model config key 'hybrid_override_pattern': MoE layers (E) need expert settings")
        ffn: dict[str, Any] = {"kind": "none"}
        if kind in ("T", "L", "-", "E"):
            ffn = moe if (kind == "E" or (kind in ("T", "L") and moe_layers[i])) else dense
        g = {
            "attention": attention if kind in ("T", "*") else None,
            "mamba": mamba if kind == "M" else None,
            "linear": linear if kind == "L" else None,
            "ffn": ffn,
            "norms": norms_per_layer if kind in ("T", "L") else 1,
        }
        if nas is not None:  # each block its own attention (or none) and FFN width (or none)
            nas_kv, width = nas[i]
            g["attention"] = None if nas_kv is None else {**attention, "kv_heads": nas_kv}
            g["ffn"] = {"kind": "none"} if width is None else {**dense, "intermediate_size": width}
            g["norms"] = int(nas_kv is not None) + int(width is not None)
        layer_group_of.append(g)
        for existing in groups:
            if all(existing[k] == g[k] for k in g):
                existing["count"] += 1
                break
        else:
            groups.append({"count": 1, **g})
    return groups, layer_group_of, kinds


def _mtp(
    cfg: Mapping[str, Any],
    model_type: str,
    groups: list[dict[str, Any]],
    layer_group_of: list[dict[str, Any]],
    kinds: str,
) -> tuple[int, list[dict[str, Any]]]:
    """The MTP modules' layer count, and their layers where their structure is known."""
    mtp_groups: list[dict[str, Any]] = []
    n_mtp = _mtp_layers(cfg)
    if n_mtp and model_type in _MTP_KNOWN_TYPES:
        last = next((g for g in reversed(groups) if g["attention"]), None)
        if last is not None:
            mtp_groups = [{**last, "count": n_mtp}]
    elif n_mtp and model_type == "nemotron_h":
        mtp_pattern = cfg.get("mtp_hybrid_override_pattern")
        mtp_blocks = cfg.get("mtp_layers_block_type")
        if mtp_pattern is None and isinstance(mtp_blocks, list):
            mtp_pattern = "".join(
                {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}.get(b, "?") for b in mtp_blocks
            )
        # each letter a layer like the model's own of that kind
        like: dict[str, dict[str, Any]] = {}
        for g, k in zip(layer_group_of, kinds):
            like.setdefault(k, g)
        if isinstance(mtp_pattern, str) and all(k in like for k in mtp_pattern):
            mtp_groups = [{**like[k], "count": n_mtp} for k in mtp_pattern]
    return n_mtp, mtp_groups
