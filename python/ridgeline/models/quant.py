"""Weight storage formats: from a checkpoint's quantization_config, a model-name
hint, or the user's ``--weight-dtype``, one format per tensor role.

Formats and their sources are the rows of ``data/quant_formats.csv``; GGUF
mixtures (Q4_K_M, ...) are the rows of ``data/gguf_mixtures.csv``. The result
goes to the core as the plan's ``weights``.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import re
from collections.abc import Mapping
from typing import Any, Optional

from .. import _data, names
from ..errors import ModelConfigError, PlanError
from .keys import _flag

LINEAR_ROLES = ("attn_q", "attn_k", "attn_v", "attn_o", "ffn_up", "ffn_down", "expert_up", "expert_down")
ATTENTION_ROLES = ("attn_q", "attn_k", "attn_v", "attn_o")
EXPERT_ROLES = ("expert_up", "expert_down")
EMBED_ROLES = ("embedding", "lm_head")
ROLES = LINEAR_ROLES + EMBED_ROLES
FLOAT_DTYPES = {"fp32": 32, "bf16": 16, "fp16": 16}

# Names users and model ids write for the formats of the table.
ALIASES = {
    "float32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "fp8_e4m3": "fp8",
    "float8": "fp8",
    "w8a8": "int8",
    "w8a8_int8": "int8",
    "w8a8_fp8": "fp8",
    "int4": "int4_g128",
    "w4a16": "int4_g128",
    "gptq": "gptq_int4_g128",
    "awq": "awq_int4_g128",
    "nf4": "bnb_nf4",
}


@dataclasses.dataclass(frozen=True)
class WeightPlan:
    """One format per role, with where it came from."""

    label: str
    source: str
    formats: Mapping[str, Mapping[str, Any]]

    def core(self) -> dict[str, Any]:
        return {r: {k: v for k, v in f.items() if k != "name"} for r, f in self.formats.items()}

    def format_names(self) -> dict[str, str]:
        """The named format (data/quant_formats.csv) each role is stored in, where it has one."""
        return {r: str(f["name"]) for r, f in self.formats.items() if f.get("name")}


@functools.lru_cache(maxsize=1)
def formats_table() -> dict[str, dict[str, Any]]:
    out = {}
    for r in csv.DictReader(_data.read_text("data/quant_formats.csv").splitlines()):
        out[r["name"]] = {
            "name": r["name"],
            "bits": float(r["bits"]),
            "block_k": int(r["block_k"]),
            "block_n": int(r["block_n"]),
            "scale_bits": float(r["scale_bits"]),
            "compute": r["compute"] or None,
            "act_bits": float(r["act_bits"]) if r["act_bits"] else None,
        }
    return out


@functools.lru_cache(maxsize=1)
def mixtures_table() -> dict[str, dict[str, tuple[str, Optional[str]]]]:
    out: dict[str, dict[str, tuple[str, Optional[str]]]] = {}
    for r in csv.DictReader(_data.read_text("data/gguf_mixtures.csv").splitlines()):
        out.setdefault(r["mixture"], {})[r["role"]] = (r["format"], r["more_bits_format"] or None)
    return out


def accepted_names() -> list[str]:
    return sorted(set(formats_table()) | set(mixtures_table()) | set(ALIASES))


def _fmt(name: str) -> dict[str, Any]:
    return dict(formats_table()[name])


def use_more_bits_share(n_layers: int) -> float:
    """Share of layers llama.cpp's use_more_bits(i, n) picks (integer division as in llama.cpp)."""
    picked = sum(
        1 for i in range(n_layers) if i < n_layers // 8 or i >= 7 * n_layers // 8 or (i - n_layers // 8) % 3 == 2
    )
    return picked / n_layers


def _mixture(name: str, n_layers: int) -> dict[str, dict[str, Any]]:
    rules = mixtures_table()[name]
    base = rules["default"][0]
    out = {r: _fmt(base) for r in ROLES}
    share = use_more_bits_share(n_layers)
    for role, (fmt, more) in rules.items():
        if role == "default":
            continue
        targets = {"ffn_down": ("ffn_down", "expert_down")}.get(role, (role,))
        for t in targets:
            if t not in out:
                continue
            if more is None:
                out[t] = _fmt(fmt)
            else:  # the layer-average bits of a role stored in two formats
                a, b = formats_table()[fmt], formats_table()[more]
                out[t] = {**_fmt(fmt), "bits": (1 - share) * a["bits"] + share * b["bits"]}
    return out


def _gguf_pure(name: str) -> dict[str, dict[str, Any]]:
    """A pure GGUF type: every tensor in it, the output matrix in Q6_K unless the type has more bits
    (llama.cpp llama_tensor_get_type, the rule data/gguf_mixtures.csv quotes for the mixtures)."""
    out = {r: _fmt(name) for r in ROLES}
    q6 = formats_table()["q6_k"]
    if formats_table()[name]["bits"] < q6["bits"]:
        out["lm_head"] = dict(q6)
    return out


def _canonical(name: str) -> str:
    key = name.strip().lower().replace("-", "_")
    key = ALIASES.get(key, key)
    if key not in formats_table() and key not in mixtures_table():
        raise PlanError(f"weight_dtype: unknown weight format {name!r}; accepted: {', '.join(accepted_names())}")
    return key


def from_name(name: str, act_dtype: str, n_layers: int) -> dict[str, dict[str, Any]]:
    """Formats for a user override or a name hint."""
    key = _canonical(name)
    if key in mixtures_table():
        return _mixture(key, n_layers)
    if re.fullmatch(r"q\d_(\d|k)", key):
        return _gguf_pure(key)
    fmt = _fmt(key)
    if key in FLOAT_DTYPES:
        return {r: dict(fmt) for r in ROLES}
    # Quantised checkpoints keep the embedding table and the LM head in 16 bits.
    act = _fmt(act_dtype if act_dtype in FLOAT_DTYPES else "bf16")
    return {**{r: dict(fmt) for r in LINEAR_ROLES}, **{r: act for r in EMBED_ROLES}}


def _whole(key: str, v: Any) -> int:
    """A whole number from a quantization_config value: an int, a whole float, or its decimal
    text (published configs write `bits` as "4"); anything else is refused, never rounded."""
    if isinstance(v, str) and re.fullmatch(r"\s*-?\d+\s*", v):
        return int(v)
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ModelConfigError(f"model config key 'quantization_config.{key}': expected a whole number, got {v!r}")
    return v


def _qflag(q: Mapping[str, Any], key: str, default: bool) -> bool:
    return _flag(q, key, default, name=f"quantization_config.{key}")


def _bits(q: Mapping[str, Any], *keys: str) -> int:
    for k in keys:
        v = q.get(k)
        if v is not None:
            b = _whole(k, v)
            if not 1 <= b <= 32:
                raise ModelConfigError(f"model config key 'quantization_config.{k}': a bit width is 1..32, got {v!r}")
            return b
    raise ModelConfigError(f"model config key 'quantization_config.{keys[0]}': missing")


def _group(q: Mapping[str, Any], *keys: str) -> int:
    for k in keys:
        v = q.get(k)
        if v is not None:
            g = _whole(k, v)
            return 0 if g <= 0 else g  # -1: one group per output channel
    return int(formats_table()["int4_g128"]["block_k"])


def _block(key: str, v: Any) -> tuple[int, int]:
    """A [rows, columns] block of positive whole numbers."""
    if not isinstance(v, list) or len(v) != 2:
        raise ModelConfigError(f"model config key 'quantization_config.{key}': expected [rows, columns], got {v!r}")
    n, k = (_whole(key, x) for x in v)
    if n < 1 or k < 1:
        raise ModelConfigError(f"model config key 'quantization_config.{key}': block sizes must be >= 1, got {v!r}")
    return n, k


def _int_format(bits: int, group: int, zero_point: bool) -> dict[str, Any]:
    # scale in 16 bits per group, plus a packed zero point of `bits` when asymmetric
    return {
        "bits": float(bits),
        "block_k": group,
        "block_n": 1,
        "scale_bits": 16.0 + (bits if zero_point else 0),
        "compute": None,
    }


def _excluded(q: Mapping[str, Any]) -> set[str]:
    """Roles a method leaves unquantised (modules_to_not_convert / ignore)."""
    pats = [str(p) for p in (q.get("modules_to_not_convert") or q.get("ignore") or [])]
    out = set(EMBED_ROLES)  # embeddings and the head stay in 16 bits unless a method says otherwise
    for p in pats:
        if "self_attn" in p or "attn" in p.split(".")[-1]:
            out |= set(ATTENTION_ROLES)
    return out


def from_config(q: Mapping[str, Any], act_dtype: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """Formats from a checkpoint's quantization_config."""
    method = str(q.get("quant_method") or q.get("quant_type") or "").lower()
    act = _fmt(act_dtype if act_dtype in FLOAT_DTYPES else "bf16")
    if method == "gptq":
        fmt = _int_format(_bits(q, "bits"), _group(q, "group_size"), zero_point=True)
        label = f"gptq int{_bits(q, 'bits')} g{_group(q, 'group_size') or 'channel'}"
    elif method == "awq":
        fmt = _int_format(
            _bits(q, "bits", "w_bit"),
            _group(q, "group_size", "q_group_size"),
            zero_point=_qflag(q, "zero_point", True),
        )
        label = f"awq int{_bits(q, 'bits', 'w_bit')}"
    elif method == "fp8":
        block = q.get("weight_block_size")
        fmt = _fmt("fp8")
        label = "fp8 per-tensor"
        if block is not None:
            n, k = _block("weight_block_size", block)
            fmt.update(block_k=k, block_n=n)
            label = f"fp8 block {n}x{k}"
    elif method == "mxfp4":
        fmt, label = _fmt("mxfp4"), "mxfp4"
    elif method == "bitsandbytes":
        if _qflag(q, "load_in_4bit", False):
            fmt = _fmt("bnb_nf4_dq" if _qflag(q, "bnb_4bit_use_double_quant", False) else "bnb_nf4")
            label = "bitsandbytes 4-bit"
        else:
            fmt, label = _fmt("bnb_int8"), "bitsandbytes int8"
    elif method == "compressed-tensors":
        fmt, label = _compressed_tensors(q)
    else:
        raise ModelConfigError(
            f"model config key 'quantization_config.quant_method': {method!r} is not supported; "
            "accepted: gptq, awq, fp8, mxfp4, bitsandbytes, compressed-tensors"
        )
    keep = _excluded(q)
    return label, {r: (dict(act) if r in keep else dict(fmt)) for r in ROLES}


def _compressed_tensors(q: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    groups = q.get("config_groups") or {}
    if not isinstance(groups, Mapping) or not groups:
        raise ModelConfigError("model config key 'quantization_config.config_groups': missing")
    g = next(iter(groups.values()))
    w = g.get("weights") or {}
    a = g.get("input_activations") or None
    bits = _bits(w, "num_bits")
    strategy = str(w.get("strategy") or "tensor")
    block_k = _whole("group_size", w["group_size"]) if strategy == "group" and w.get("group_size") else 0
    block_n = 1 if strategy in ("channel", "group") else 0
    if strategy == "block" and w.get("block_structure") is not None:
        block_n, block_k = _block("block_structure", w["block_structure"])
    is_float = str(w.get("type") or "int") == "float"
    scale_bits = 32.0 if is_float else 16.0 + (0 if _qflag(w, "symmetric", True) else bits)
    compute = None
    if a and _whole("input_activations.num_bits", a.get("num_bits") or 16) == 8:
        compute = "fp8" if str(a.get("type") or "int") == "float" else "int8"
    # a W8A8 checkpoint's runtime quantises each GEMM's input per token (8 bits) in a kernel of its own
    fmt = {"bits": float(bits), "block_k": block_k, "block_n": block_n, "scale_bits": scale_bits, "compute": compute,
           "act_bits": 8.0 if compute else None}  # fmt: skip
    label = f"compressed-tensors {'fp' if is_float else 'int'}{bits} {strategy}" + (
        f" W8A8 {compute}" if compute else ""
    )
    return fmt, label


@functools.lru_cache(maxsize=1)
def runtime_paths() -> dict[tuple[str, str], tuple[str, str]]:
    """(runtime, weight format) -> (GEMM compute path, source), from data/calibration/runtime_paths.csv."""
    text = _data.read_text("data/calibration/runtime_paths.csv")
    return {(r["runtime"], r["weights"]): (r["compute"], r["source"]) for r in csv.DictReader(text.splitlines())}


@functools.lru_cache(maxsize=1)
def runtime_platforms() -> dict[str, frozenset[tuple[str, str]]]:
    """runtime -> the (vendor, kind) of devices it runs on, from data/calibration/runtime_platforms.csv
    (here, beside the runtimes' GEMM paths, for the benchmark importers below the runtimes)."""
    out: dict[str, set[tuple[str, str]]] = {}
    for r in csv.DictReader(_data.read_text("data/calibration/runtime_platforms.csv").splitlines()):
        out.setdefault(r["runtime"], set()).add((r["vendor"].lower(), r["kind"].lower()))
    return {k: frozenset(v) for k, v in out.items()}


def named_format(model: Any, named: Optional[str]) -> Optional[str]:
    """The weight format a model name's quantisation suffix states (``models.identify``), or None
    where it is the checkpoint's own: a quantised checkpoint whose name says its own format
    ("gpt-oss-20b MXFP4", an fp8 block checkpoint's "FP8") is priced by its quantization_config,
    not by the word (which would put gpt-oss's bf16 attention in MXFP4 too)."""
    if named is None or not model.quantization:
        return named
    own = _resolve(model, "bf16", None).format_names().values()
    return None if any(f == named or f.startswith(f"{named}_") for f in own) else named


def resolve(model: Any, act_dtype: str, override: Optional[str], runtime: Optional[str] = None) -> WeightPlan:
    """The weight formats of a plan: the user's override, else the checkpoint's
    quantization_config, else a hint in the model name, else the activation dtype;
    a runtime's own GEMM path for those weights (llama.cpp's int8 MMQ kernels) applies on top."""
    return on_runtime(_resolve(model, act_dtype, override), runtime)


def on_runtime(plan: WeightPlan, runtime: Optional[str]) -> WeightPlan:
    """The weights as ``runtime`` computes them: its own GEMM path for their format where
    data/calibration/runtime_paths.csv lists one (llama.cpp's int8 MMQ kernels), else as stored."""
    path = runtime_paths().get((str(runtime), plan.label)) if runtime else None
    if path is None:
        return plan
    formats = {r: ({**f, "compute": path[0]} if r in LINEAR_ROLES else dict(f)) for r, f in plan.formats.items()}
    return WeightPlan(plan.label, f"{plan.source}; {runtime} computes them as {path[0]}", formats)


def _resolve(model: Any, act_dtype: str, override: Optional[str]) -> WeightPlan:
    n = int(model.num_layers)
    if override:
        return WeightPlan(_canonical(override), "--weight-dtype", from_name(override, act_dtype, n))
    if model.quantization:
        try:
            label, formats = from_config(model.quantization, act_dtype)
        except (TypeError, ValueError, KeyError, AttributeError) as e:
            if isinstance(e, ModelConfigError):
                raise
            raise ModelConfigError(f"model config key 'quantization_config': malformed ({e!r})") from None
        return WeightPlan(label, "checkpoint quantization_config", formats)
    # a checkpoint without a quantization_config whose name says its format (the quantisation
    # suffixes of data/name_words.csv, as the model-name resolver reads them)
    hint = names.parse_model(str(model.name))
    if hint.weight_format:
        return WeightPlan(
            hint.weight_format, f"model-name hint '{hint.quant_word}'", from_name(hint.weight_format, act_dtype, n)
        )
    act = act_dtype if act_dtype in FLOAT_DTYPES else "fp32"
    return WeightPlan(act, "activation dtype", from_name(act, act_dtype, n))
