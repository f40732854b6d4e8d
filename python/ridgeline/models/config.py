"""Model configs: the one normaliser of raw Hugging Face keys (spec 20).

``Model.from_config(name_or_path)`` reads a bundled config (by its Hugging Face
id) or any local ``config.json`` / model folder, and turns it into one typed
structure. The engine and the parameter counter read only that structure.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .. import _data, names
from .._checks import MAX_EXACT
from ..errors import ModelConfigError, UnknownNameError

# Step 1 of the gated-FFN cascade: activation names that only ever mean a gated MLP.
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


@dataclass(frozen=True)
class Model:
    """A normalised model. Build with ``Model.from_config``.

    >>> m = Model.from_config("meta-llama/Llama-3.1-8B")
    >>> m.total_params
    8030261248
    """

    name: str
    model_type: str
    architecture: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int
    gated_ffn: bool
    gated_by: str
    activation: str
    norm: str
    tie_word_embeddings: bool
    max_model_len: int
    is_moe: bool
    layer_groups: tuple[Mapping[str, Any], ...]
    core_json: str = field(repr=False)
    source: str = ""
    #: The checkpoint's quantization_config, as published (None: unquantised).
    quantization: Optional[Mapping[str, Any]] = None
    torch_dtype: Optional[str] = None
    #: Parts of the checkpoint outside the text decoder (a vision or audio tower): reported, never
    #: counted in the parameters nor priced.
    towers: tuple[str, ...] = ()
    #: Parameters of each tower, where its structure is known (None: present, not counted).
    tower_params: tuple[Optional[int], ...] = ()
    #: Multi-token-prediction (draft) layers the checkpoint carries beside the decoder: not counted
    #: (the publishers' totals leave them out: DeepSeek-V3 671B) nor priced.
    mtp_layers: int = 0
    #: The MTP modules' decoder layer groups where their structure is known (``mtp_params``).
    mtp_groups: tuple[Mapping[str, Any], ...] = ()

    @staticmethod
    def from_config(name_or_path: str | Path) -> Model:
        """Loads a bundled model by Hugging Face id, or a local config.json / folder.

        >>> Model.from_config("openai-community/gpt2").num_layers
        12
        """
        return _load(str(name_or_path))

    @staticmethod
    def from_dict(cfg: Mapping[str, Any], name: str = "custom") -> Model:
        """Normalises an already-parsed config dict."""
        return _normalise(cfg, name, source="dict")

    @functools.cached_property
    def _core(self) -> Any:
        from .. import _core

        try:
            return _core.CoreModel(self.core_json)
        except ValueError as e:  # the core's own checks (ModelConfigError is a ValueError)
            raise ModelConfigError(f"{self.name}: {e}") from None

    @functools.cached_property
    def params(self) -> dict[str, int]:
        """Parameter counts by tensor class, plus ``total`` and ``active``."""
        return dict(self._core.params())

    @property
    def total_params(self) -> int:
        return self.params["total"]

    @property
    def active_params(self) -> int:
        return self.params["active"]

    def kv_bytes_per_token(self, kv_bytes: float = 2.0) -> float:
        """KV-cache bytes one token adds across all layers: 2 x kv_heads x head_dim per
        layer, or the MLA latent plus rope key (window caps not applied)."""
        return float(sum(n * values for n, values, _ in self._core.kv_layers(1)) * kv_bytes)

    def kv_bytes(self, context: int, kv_bytes: float = 2.0, tp: int = 1) -> float:
        """KV-cache bytes of one sequence at ``context`` tokens on one of ``tp`` ranks;
        sliding-window layers hold at most their window."""
        return float(
            sum(n * values * (context if w is None else min(context, w)) for n, values, w in self._core.kv_layers(tp))
            * kv_bytes
        )

    @property
    def unpriced(self) -> Optional[str]:
        """Layer types the engine refuses to price (None when every layer is priced: every layer
        kind the normaliser accepts is priced at present; a config with one that is not is refused
        when it is read)."""
        what: Optional[str] = self._core.unpriced_layers()
        return what

    @functools.cached_property
    def mtp_params(self) -> Optional[int]:
        """Parameters of the checkpoint's MTP modules where their structure is known; None when
        unknown or absent. Each module: its decoder layers (Qwen3-Next / Qwen3.5 ``mtp.*``: a
        full-attention layer like the model's; Nemotron-H: the layers of its MTP pattern, "*E"),
        an fc from the concatenated embedding and hidden state (2 hidden x hidden, no bias) and
        three RMSNorms. Not in ``params``: the decoder does not run them."""
        if not self.mtp_layers or not self.mtp_groups:
            return None
        core = json.loads(self.core_json)
        core["layer_groups"] = [dict(g) for g in self.mtp_groups]
        from .. import _core

        p = dict(_core.CoreModel(json.dumps(core)).params())
        d = self.hidden_size
        layers = p["total"] - p["embedding"] - p["lm_head"] - d  # the final norm is not the module's
        return layers + self.mtp_layers * (2 * d * d + 3 * d)

    @property
    def architecture_class(self) -> str:
        """The layer kinds of the decoder in a few words ("MoE, MLA, sparse attention (DSA)")."""
        attn = [g["attention"] for g in self.layer_groups if g.get("attention")]
        parts = []
        if any(g.get("linear") for g in self.layer_groups):
            parts.append("Gated DeltaNet hybrid")
        if any(g.get("mamba") for g in self.layer_groups):
            parts.append("Mamba2 hybrid")
        if self.is_moe:
            parts.append("MoE")
        if any(a.get("mla") for a in attn):
            parts.append("MLA")
        elif attn:
            kv, h = attn[0]["kv_heads"], attn[0]["heads"]
            parts.append("MHA" if kv == h else "MQA" if kv == 1 else "GQA")
        if any(a.get("indexer") for a in attn):
            parts.append("sparse attention (DSA)")
        if any(a.get("window") for a in attn):
            parts.append("sliding window")
        if any(a.get("output_gate") for a in attn):
            parts.append("gated attention")
        return ", ".join(parts) or "dense"

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "family": self.model_type,
            "architecture": self.architecture,
            "architecture_class": self.architecture_class,
            "total_params": self.total_params,
            "active_params": self.active_params,
            "layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "heads": self.num_heads,
            "kv_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "vocab_size": self.vocab_size,
            "intermediate_size": self.intermediate_size,
            "gated_ffn": self.gated_ffn,
            "gated_by": self.gated_by,
            "activation": self.activation,
            "norm": self.norm,
            "tie_word_embeddings": self.tie_word_embeddings,
            "max_model_len": self.max_model_len,
            "kv_bytes_per_token_bf16": self.kv_bytes_per_token(2.0),
            "moe": self.is_moe,
            "engine": "priced" if self.unpriced is None else f"not priced yet: {self.unpriced}",
            "not_counted": [
                f"{t}: {'structure not known' if n is None else f'{n:,} parameters'} (not in the counts, not priced)"
                for t, n in zip(self.towers, self.tower_params)
            ]
            + (
                [
                    f"{self.mtp_layers} MTP layer(s): "
                    f"{'structure not known' if self.mtp_params is None else f'{self.mtp_params:,} parameters'} "
                    "(not in the counts, not priced)"
                ]
                if self.mtp_layers
                else []
            ),
            "quantization": dict(self.quantization) if self.quantization else None,
            "layer_groups": [dict(g) for g in self.layer_groups],
            "params": self.params,
            "source": self.source,
        }


def bundled_names() -> list[str]:
    """Hugging Face ids of the bundled configs."""
    return sorted(_bundled().keys())


@functools.lru_cache(maxsize=1)
def _bundled() -> dict[str, str]:
    out = {}
    for path in _data.list_files("data/models/"):
        if path.endswith(".json"):
            stem = path.rsplit("/", 1)[1][: -len(".json")]
            out[stem.replace("--", "/", 1)] = path
    return out


def _load(name: str) -> Model:
    """A config path is read each time (the file may change); a bundled config once."""
    from .._io import read_text

    if not name.strip():
        raise ModelConfigError(
            "model: an empty name; give a bundled Hugging Face id (see `ridgeline model list`) "
            "or a path to a config.json or a model folder"
        )
    try:
        p = Path(name).expanduser()
    except RuntimeError:  # '~user' of no such user: not a home directory, so not a path
        p = Path(name)
    try:
        is_dir = p.is_dir()
        is_file = is_dir or p.is_file()
        if is_dir:
            p = p / "config.json"
            if not p.is_file():
                raise ModelConfigError(f"model folder {p.parent}: holds no config.json")
    except OSError:  # a name no file system holds (too long, ...): a model name, not a path
        is_file = False
    if is_file:
        cfg, how = read_json(read_text(p, what="model config", error=ModelConfigError), str(p))
        return _normalise(cfg, str(p), source=f"{p} ({how})")
    return _load_bundled(name)


@functools.lru_cache(maxsize=256)
def _load_bundled(name: str) -> Model:
    bundled = _bundled()
    key = _resolve_bundled(name, bundled)
    cfg, how = read_json(_data.read_text(bundled[key]), bundled[key])
    return _normalise(cfg, key, source=f"bundled {bundled[key]} ({how})")


def _reject_constant(token: str) -> Any:
    raise ValueError(f"non-standard JSON token {token}")


def read_json(text: str, origin: str) -> tuple[Any, str]:
    """Parses a config strictly (RFC 8259); configs with the non-standard tokens
    Infinity/NaN that Python's json writes (Nemotron-H) load on the lenient path."""
    if not text.strip():
        raise ModelConfigError(f"{origin}: empty; a config.json holds one JSON object")
    try:
        return json.loads(text, parse_constant=_reject_constant), "strict JSON"
    except RecursionError:
        raise ModelConfigError(f"{origin}: not a JSON config (nested too deeply)") from None
    except ValueError as strict_error:
        try:
            return json.loads(text), f"lenient JSON: {strict_error}"
        except ValueError as e:
            raise ModelConfigError(f"{origin}: not a JSON config ({e})") from None


def _resolve_bundled(name: str, bundled: Mapping[str, str]) -> str:
    return identify(name, bundled)[0]


def identify(name: str, bundled: Optional[Mapping[str, str]] = None) -> tuple[str, Optional[str]]:
    """The bundled model a name as people write it names, and the weight format its
    quantisation suffix states (None: none): a bundled id, in any case, with or without its
    organisation; else the one bundled model whose name is the same once version punctuation,
    case, organisation words and instruct/chat/base and quantisation suffixes are set aside
    (``names.parse_model``; the words are data/name_words.csv). A name several bundled models
    fit is an UnknownNameError listing them; one none fits lists the closest.

    >>> identify("LLaMA 3.1 70B")
    ('meta-llama/Llama-3.1-70B', None)
    >>> identify("Meta-Llama-3.1-8B-FP8")
    ('meta-llama/Llama-3.1-8B', 'fp8')
    """
    bundled = _bundled() if bundled is None else bundled
    if name in bundled:
        return name, None
    low = {k.lower(): k for k in bundled}
    short = {k.split("/", 1)[1].lower(): k for k in bundled}
    for table in (low, short):
        if name.lower() in table:
            return table[name.lower()], None
    parsed = names.parse_model(name)
    if parsed.conflict:
        raise UnknownNameError(f"model '{name}': {parsed.conflict}; name one (see `ridgeline model list`)")
    hit, candidates = names.match_model(parsed, bundled)
    if hit is not None:
        # a format the bundled checkpoint's own name states is its own (its quantization_config)
        own = names.parse_model(hit).weight_format
        return hit, None if parsed.weight_format == own else parsed.weight_format
    if len(candidates) > 1:
        raise UnknownNameError(
            f"model '{name}' is ambiguous: it names {len(candidates)} bundled models: {', '.join(candidates)}; "
            f"name one (see `ridgeline model list`)"
        )
    close = difflib.get_close_matches(name.lower(), list(low) + list(short), n=3, cutoff=0.4)
    closest = [*candidates, *(low.get(c) or short[c] for c in close)]
    hint = f"; closest: {', '.join(dict.fromkeys(closest))}" if closest else ""
    raise UnknownNameError(
        f"unknown model '{name}': not a bundled model nor a path to a config.json{hint} (see `ridgeline model list`)"
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


# Families whose MTP layers the counter knows (Model.mtp_params).
_MTP_KNOWN_TYPES = {"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"}
# (nemotron_h: its MTP pattern's layers, mtp_hybrid_override_pattern / mtp_layers_block_type)

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


def _normalise(raw: Mapping[str, Any], name: str, source: str) -> Model:
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

    _check_supported(cfg)
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
    cfg = _hybrid_interval(cfg, n_layers)
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
    vocab = _count(cfg, ("vocab_size",))
    # Llama-4: intermediate_size is the experts' (and the shared expert's) width, the dense
    # layers' is intermediate_size_mlp
    f = _count(
        cfg, ("intermediate_size_mlp", "intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size"), default=4 * d
    )

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

    norm = "layer" if (model_type in _LAYERNORM_TYPES or _name(cfg, "norm_type") == "layer_norm") else "rms"
    if model_type in ("gemma2", "gemma3", "gemma3_text"):
        norms_per_layer = 4
    elif model_type in ("phi", "gptj") or (
        model_type == "falcon" and _flag(cfg, "parallel_attn", True) and not new_decoder
    ):
        norms_per_layer = 1
    else:
        norms_per_layer = 2

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
    sinks = model_type in _SINK_TYPES
    rotary = model_type not in ("gpt2", "opt", "bloom", "mpt")

    tied = _flag(cfg, "tie_word_embeddings", model_type in _TIED_BY_DEFAULT)
    pos_rows = 0
    if model_type in _LEARNED_POSITIONS:
        key, extra = _LEARNED_POSITIONS[model_type]
        pos_rows = _count(cfg, (key, "max_position_embeddings", "n_positions")) + extra

    # MoE: routed experts per layer, with dense layers where the config says so.
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
    if n_exp > 1:
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

    windows = _windows(cfg, model_type, n_layers)
    chunks = _llama4_chunks(cfg, model_type, n_layers)
    dense = {
        "kind": "dense",
        "intermediate_size": f,
        "gated": gated,
        "activation": _ACTIVATIONS[act_name],
        "bias": mlp_bias,
    }
    kinds = _layer_kinds(cfg, n_layers)
    mamba = _mamba(cfg) if "M" in kinds else None
    linear = _gated_deltanet(cfg) if "L" in kinds else None
    nas = _nas_blocks(cfg, n_layers, heads, d)
    swa = _mimo_swa(cfg, n_layers)
    # a value head narrower than the query/key head (MiMo-V2), outside MLA
    v_dim = None
    if mla is None and cfg.get("v_head_dim") is not None:
        v_dim = _count(cfg, ("v_head_dim",))
        v_dim = None if v_dim == hd else v_dim
    groups: list[dict[str, Any]] = []
    layer_group_of: list[dict[str, Any]] = []  # each layer's structure (before grouping)
    for i in range(n_layers):
        attention = {
            "heads": heads,
            "kv_heads": heads if mla is not None else kv,
            "head_dim": hd,
            "window": windows[i],
            "qkv_bias": qkv_bias,
            "o_bias": o_bias,
            "qk_norm": qk_norm,
            # Llama-4's NoPE layers (global attention) have no rope
            "rotary": rotary and (chunks is None or chunks[i] is not None),
            "chunk": None if chunks is None else chunks[i],
            "sinks": sinks,
            "mla": mla,
            "output_gate": _flag(cfg, "attn_output_gate", model_type in _OUTPUT_GATE_TYPES),
            "qk_norm_all_heads": qk_norm and qk_norm_type == "per_layer",
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

    # the MTP modules' layers where their structure is known
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
    m = Model(
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
    _ = m._core  # validate in the core now, not at the first estimate
    return m
