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

from . import _data
from ._checks import MAX_EXACT
from .errors import ModelConfigError, UnknownNameError

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
}
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
        from . import _core

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
        """Layer types the engine refuses to price (None when every layer is priced)."""
        return "Mamba2 (M) layers" if any(g.get("mamba") for g in self.layer_groups) else None

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "family": self.model_type,
            "architecture": self.architecture,
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
    from ._io import read_text

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
    if name in bundled:
        return name
    low = {k.lower(): k for k in bundled}
    short = {k.split("/", 1)[1].lower(): k for k in bundled}
    for table in (low, short):
        if name.lower() in table:
            return table[name.lower()]
    close = difflib.get_close_matches(name.lower(), list(low) + list(short), n=3, cutoff=0.4)
    names = [low.get(c) or short[c] for c in close]
    hint = f"; closest: {', '.join(dict.fromkeys(names))}" if names else ""
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
            elif t == "full_attention":
                out.append(None)
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


def _layer_kinds(cfg: Mapping[str, Any], n_layers: int) -> str:
    """One letter a layer: T = a transformer block (attention + FFN); from a
    hybrid_override_pattern (Nemotron-H): M = Mamba2, * = attention, - = MLP, E = MoE."""
    pattern = cfg.get("hybrid_override_pattern")
    if pattern is None:
        return "T" * n_layers
    if not isinstance(pattern, str) or len(pattern) != n_layers or set(pattern) - set("M*-E"):
        raise ModelConfigError(
            f"model config key 'hybrid_override_pattern': expected {n_layers} letters from M, *, -, E; got {pattern!r}"
        )
    return pattern


def _mamba(cfg: Mapping[str, Any]) -> dict[str, Any]:
    return {
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

    d = _count(cfg, ("hidden_size", "n_embd", "d_model"))
    n_layers = _count(cfg, ("num_hidden_layers", "n_layer", "num_layers"))
    from . import _core

    # the normaliser walks the layers one by one: the core's work bound before any of it
    if n_layers > _core.MAX_LAYERS:
        raise ModelConfigError(
            f"model config key 'num_hidden_layers': {n_layers} layers is more than the {_core.MAX_LAYERS} "
            "one estimate builds"
        )
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
    f = _count(cfg, ("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size"), default=4 * d)

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
    qk_norm = model_type in ("qwen3", "qwen3_moe", "gemma3", "gemma3_text") or _flag(cfg, "qk_layernorm", False)
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
    if n_exp > 1:
        top_k = _count(cfg, ("num_experts_per_tok", "experts_per_token", "moe_topk"))
        if top_k > n_exp:
            raise ModelConfigError(f"model config key 'num_experts_per_tok': top-k {top_k} exceeds the {n_exp} experts")
        fe = _count(cfg, ("moe_intermediate_size",), default=f)
        shared = _count(cfg, ("shared_expert_intermediate_size",), required=False, allow_zero=True)
        n_shared = _count(cfg, ("n_shared_experts",), required=False, allow_zero=True)
        if n_shared and not shared:
            shared = n_shared * fe
        first_dense = _count(cfg, ("first_k_dense_replace",), required=False, allow_zero=True)
        step = _count(cfg, ("decoder_sparse_step", "moe_layer_freq"), default=1)
        mlp_only = _layer_indices(cfg, "mlp_only_layers", n_layers)
        for i in range(n_layers):
            moe_layers[i] = i >= first_dense and (i + 1) % step == 0 and i not in mlp_only
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
            or (model_type == "deepseek_v3" and _name(cfg, "topk_method") == "noaux_tc"),
        }

    windows = _windows(cfg, model_type, n_layers)
    dense = {
        "kind": "dense",
        "intermediate_size": f,
        "gated": gated,
        "activation": _ACTIVATIONS[act_name],
        "bias": mlp_bias,
    }
    kinds = _layer_kinds(cfg, n_layers)
    mamba = _mamba(cfg) if "M" in kinds else None
    groups: list[dict[str, Any]] = []
    for i in range(n_layers):
        attention = {
            "heads": heads,
            "kv_heads": heads if mla is not None else kv,
            "head_dim": hd,
            "window": windows[i],
            "qkv_bias": qkv_bias,
            "o_bias": o_bias,
            "qk_norm": qk_norm,
            "rotary": rotary,
            "sinks": sinks,
            "mla": mla,
        }
        kind = kinds[i]
        if kind == "E" and not moe:
            raise ModelConfigError("model config key 'hybrid_override_pattern': MoE layers (E) need expert settings")
        ffn: dict[str, Any] = {"kind": "none"}
        if kind in ("T", "-", "E"):
            ffn = moe if (kind == "E" or (kind == "T" and moe_layers[i])) else dense
        g = {
            "attention": attention if kind in ("T", "*") else None,
            "mamba": mamba if kind == "M" else None,
            "ffn": ffn,
            "norms": norms_per_layer if kind == "T" else 1,
        }
        for existing in groups:
            if all(existing[k] == g[k] for k in g):
                existing["count"] += 1
                break
        else:
            groups.append({"count": 1, **g})

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
    )
    _ = m._core  # validate in the core now, not at the first estimate
    return m
