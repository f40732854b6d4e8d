"""Model configs: the one normalised structure a Hugging Face config is read into (spec 20).

``Model.from_config(name_or_path)`` reads a bundled config (by its Hugging Face
id) or any local ``config.json`` / model folder, and turns it into one typed
structure. The engine and the parameter counter read only that structure.
"""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .. import _data, names
from ..errors import ModelConfigError, UnknownNameError
from .normalise import normalise

# Step 1 of the gated-FFN cascade: activation names that only ever mean a gated MLP.


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
        full-attention layer like the model's; DeepSeek-V3: an MoE layer like its last; Nemotron-H:
        the layers of its MTP pattern, "*E"),
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
                    + (
                        "structure not known (not in the counts, not priced)"
                        if self.mtp_params is None
                        else f"{self.mtp_params:,} parameters (not in the counts; priced with --speculative mtp)"
                    )
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
    if name.endswith(".json") or name.startswith((".", "/", "~")) or "\\" in name:
        # written as a path: say it is missing, not that it is an unknown name
        raise UnknownNameError(f"model '{name}': file not found (a config.json, or a model folder holding one)")
    close = difflib.get_close_matches(name.lower(), list(low) + list(short), n=3, cutoff=0.4)
    closest = [*candidates, *(low.get(c) or short[c] for c in close)]
    hint = f"; closest: {', '.join(dict.fromkeys(closest))}" if closest else ""
    hf = (f"; to price {name}, download its config.json from the Hugging Face Hub and give its path "
          "(-m path/to/config.json)" if name.count("/") == 1 and " " not in name else "")  # fmt: skip
    raise UnknownNameError(
        f"unknown model '{name}': not a bundled model nor a path to a config.json{hint}{hf} "
        "(see `ridgeline model list`)"
    )


def _normalise(raw: Mapping[str, Any], name: str, source: str) -> Model:
    m = Model(**normalise(raw, name, source))
    _ = m._core  # validate in the core now, not at the first estimate
    return m
