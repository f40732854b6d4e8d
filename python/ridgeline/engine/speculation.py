"""Speculative decoding as a plan setting: a method (an EAGLE-3 head, the model's MTP module, a
draft model, or n-gram lookup), its draft depth k, and the acceptance length at that depth read
from an acceptance curve (data/speculation/acceptance_curves.csv, or the user's own file in that
format), never fitted per run. What the core prices from it (the drafter's passes, the
verification of k + 1 tokens, the rejected drafts' work) is ``rust/src/plan.rs``'s ``Speculation``.

>>> parse_method("draft:meta-llama/Llama-3.2-1B")
('draft', 'meta-llama/Llama-3.2-1B')
"""

from __future__ import annotations

import csv
import functools
import io
import json
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from .. import _checks, _data
from .._io import load_json, read_text
from ..errors import ModelConfigError, PlanError
from ..models.config import Model

#: The methods ``--speculative`` takes ("draft" and "eagle3" with ``:`` and a model or config).
METHODS = ("eagle3", "eagle", "mtp", "ngram", "draft")
_CURVES = "data/speculation/acceptance_curves.csv"
_CURVE_MODELS = "data/speculation/curve_models.csv"
_DRAFTERS = "data/speculation/drafters.csv"
#: The columns an acceptance file may have (acceptance_curves.csv's); depth and one value needed.
CURVE_COLUMNS = ("source", "source_url", "model", "method", "runtime", "hardware", "dataset", "sampling",
                 "thinking_mode", "depth", "acceptance_length", "acceptance_rate_at_position", "notes")  # fmt: skip


@dataclass(frozen=True)
class Speculation:
    """A plan's speculative decoding, resolved: what the core prices and what the result says."""

    method: str
    draft_tokens: int
    acceptance_length: float
    #: Where the acceptance length comes from, in words.
    acceptance: str
    #: The curve was measured on another model of the same family (borrowed, labelled).
    borrowed: bool
    #: The drafter, in words (None: n-gram lookup on the host).
    drafter: Optional[str]
    core: Mapping[str, Any]

    def label(self) -> str:
        """One line: method, depth, acceptance and its source.

        >>> Speculation("ngram", 3, 2.0, "file a.csv", False, None, {}).label()
        'ngram, 3 draft tokens, acceptance length 2 (file a.csv)'
        """
        by = f" by {self.drafter}" if self.drafter else ""
        return (f"{self.method}{by}, {self.draft_tokens} draft tokens, acceptance length "
                f"{self.acceptance_length:.3g} ({self.acceptance})")  # fmt: skip

    def summary(self) -> dict[str, Any]:
        return {"method": self.method, "draft_tokens": self.draft_tokens,
                "acceptance_length": self.acceptance_length, "acceptance": self.acceptance,
                "borrowed": self.borrowed, "drafter": self.drafter}  # fmt: skip


def parse_method(text: Any) -> tuple[str, Optional[str]]:
    """``--speculative``'s value as (method, argument): ``eagle3``, ``eagle3:CONFIG`` (a head of
    one's own), ``eagle`` (an EAGLE-1/2 head), ``mtp``, ``ngram``, ``draft:MODEL``."""
    s = _checks.text("speculative", text)
    method, _, arg = s.partition(":")
    arg = arg.strip()
    method = method.strip().lower()
    if method not in METHODS:
        raise PlanError(f"speculative: {s!r} is not a method; use one of eagle3, eagle3:CONFIG, eagle, mtp, ngram, "
                        "draft:MODEL")  # fmt: skip
    if method == "draft" and not arg:
        raise PlanError("speculative: draft needs its model: draft:MODEL (a bundled id or a config.json)")
    if method in ("mtp", "ngram", "eagle") and arg:
        raise PlanError(f"speculative: {method} takes no argument, got {s!r}")
    return method, arg or None


def resolve(
    speculative: Any, draft_tokens: Any, acceptance: Any, m: Model, target_weights: Mapping[str, Any],
    weights_of: Callable[[Model], Mapping[str, Any]],
) -> Optional[Speculation]:  # fmt: skip
    """The plan's speculation against target ``m`` (None without one): its drafter as the core
    takes it (``target_weights``: the target's weight formats, which its MTP module shares;
    ``weights_of``: a draft model's stored formats) and its acceptance length at the depth given."""
    if speculative is None:
        for name, v in (("draft_tokens", draft_tokens), ("acceptance", acceptance)):
            if v is not None:
                raise PlanError(f"{name}: given without --speculative (speculative=); name the method")
        return None
    method, arg = parse_method(speculative)
    if draft_tokens is None:
        raise PlanError("draft_tokens: speculative decoding needs its draft depth k (--draft-tokens)")
    k = _checks.whole("draft_tokens", draft_tokens, 1)
    drafter_name, core_drafter = _drafter(method, arg, m, target_weights, weights_of)
    al, where, borrowed, kept = acceptance_length(method, k, m, acceptance)
    core = {"draft_tokens": k, "acceptance_length": al, "drafter": core_drafter, "accepted": kept}
    return Speculation(method, k, al, where, borrowed, drafter_name, core)


def _drafter(
    method: str, arg: Optional[str], m: Model, target_weights: Mapping[str, Any],
    weights_of: Callable[[Model], Mapping[str, Any]],
) -> tuple[Optional[str], Optional[dict[str, Any]]]:  # fmt: skip
    """The drafter of ``method`` for target ``m``: (its name, the core's Drafter)."""
    if method == "ngram":
        return None, None
    if method == "mtp":
        if not m.mtp_layers:
            raise PlanError(f"speculative: {m.name} has no MTP layers; use eagle3, ngram or draft:MODEL")
        if not m.mtp_groups:
            raise ModelConfigError(
                f"{m.name}: its MTP module's structure is not known to ridgeline; it cannot be priced"
            )
        if m.mtp_layers > 1:
            raise PlanError(f"speculative: {m.name} has {m.mtp_layers} MTP modules; MTP is priced for one module")
        core = json.loads(m.core_json)
        # one module a pass (vLLM runs module step % n): its layers once each, with the
        # module's two input norms (enorm, hnorm) beside the layer's own; its final norm is the
        # shared head's norm
        core["layer_groups"] = [{**g, "count": 1, "norms": int(g["norms"]) + 2} for g in m.mtp_groups]
        drafter = {"model": core, "fused_inputs": 2, "fuse_first_pass_only": False,
                   "weights": dict(target_weights), "shares_embedding": True, "shares_head": True}  # fmt: skip
        return f"{m.name}'s MTP module", drafter
    if method == "eagle":
        return f"an EAGLE head for {m.name}", _eagle1(m)
    if method == "draft":
        assert arg is not None
        d = Model.from_config(arg)
        drafter = {"model": json.loads(d.core_json), "fused_inputs": 0, "fuse_first_pass_only": False,
                   "weights": dict(weights_of(d)), "shares_embedding": False, "shares_head": False}  # fmt: skip
        return f"draft model {d.name}", drafter
    head, name = (_read_head(arg), arg) if arg else _bundled_head(m)
    return name, _eagle3(head, name, m)


def _eagle1(m: Model) -> dict[str, Any]:
    """The core's Drafter for an EAGLE-1/2 head (the EAGLE paper: one decoder layer over the
    features; vLLM ``llama_eagle.py``): one layer like the target's dense layer, an fc from the
    token's embedding and the feature side by side (2 x hidden) to the hidden size on every pass,
    and the target's embedding and LM head. A MoE target's head is not made of its layers."""
    if m.is_moe:
        raise PlanError(f"speculative: an EAGLE-1 head for the MoE model {m.name} is not one of its layers; give an "
                        "EAGLE-3 head's config: eagle3:CONFIG")  # fmt: skip
    core = json.loads(m.core_json)
    attention = [g for g in core["layer_groups"] if g.get("attention")]
    if not attention:
        raise ModelConfigError(f"{m.name}: no attention layer to make an EAGLE head of")
    core["layer_groups"] = [{**attention[-1], "count": 1}]
    return {"model": core, "fused_inputs": 2, "fuse_first_pass_only": False, "weights": {},
            "shares_embedding": True, "shares_head": True}  # fmt: skip


def _bundled_head(m: Model) -> tuple[Mapping[str, Any], str]:
    """The bundled EAGLE-3 head for ``m`` (data/speculation/drafters.csv)."""
    for r in csv.DictReader(io.StringIO(_data.read_text(_DRAFTERS))):
        if r["method"] == "eagle3" and r["target"] == m.name:
            path = f"data/speculation/{r['head']}"
            cfg = json.loads(_data.read_text(path))
            return cfg, r["head"].rsplit("/", 1)[-1].removesuffix(".json").replace("--", "/")
    raise PlanError(f"speculative: no EAGLE-3 head is bundled for {m.name}; give its config: eagle3:CONFIG "
                    "(the head's config.json)")  # fmt: skip


def _read_head(path: str) -> Mapping[str, Any]:
    what = f"EAGLE-3 head config {path}"
    cfg = load_json(read_text(path, what="EAGLE-3 head config", error=ModelConfigError), what=what,
                    error=ModelConfigError)  # fmt: skip
    if not isinstance(cfg, dict):
        raise ModelConfigError(f"{path}: an EAGLE-3 head's config.json is a JSON object")
    return cfg


def _eagle3(cfg: Mapping[str, Any], name: str, m: Model) -> dict[str, Any]:
    """The core's Drafter for an EAGLE-3 head (vLLM ``llama_eagle3.py``): one Llama layer whose
    q/k/v take the token's embedding and the hidden state side by side (2 x hidden in), with a
    third RMSNorm (hidden_norm); an fc from three target layers' states (3 x hidden) to the
    hidden size, run once a step; an LM head over the draft vocabulary; the target's embedding."""
    arch = cfg.get("architectures")
    if arch != ["LlamaForCausalLMEagle3"]:
        raise ModelConfigError(f"{name}: an EAGLE-3 head of architecture LlamaForCausalLMEagle3 is priced, "
                               f"got {arch!r}")  # fmt: skip
    if "draft_vocab_size" not in cfg:
        raise ModelConfigError(f"{name}: an EAGLE-3 head's config gives draft_vocab_size (its LM head's rows)")
    base = {k: v for k, v in cfg.items() if k not in ("architectures", "draft_vocab_size")}
    base["architectures"] = ["LlamaForCausalLM"]
    base["vocab_size"] = _checks.whole("draft_vocab_size", cfg["draft_vocab_size"], 1)
    head = Model.from_dict(base, name=name)
    if head.num_layers != 1:
        raise ModelConfigError(f"{name}: an EAGLE-3 head has one layer, this config gives {head.num_layers}")
    if head.hidden_size != m.hidden_size:
        raise ModelConfigError(f"{name}: the head's hidden size {head.hidden_size} is not {m.name}'s "
                               f"{m.hidden_size}")  # fmt: skip
    core = json.loads(head.core_json)
    for g in core["layer_groups"]:
        g["attention"] = {**g["attention"], "input_dim": 2 * head.hidden_size}
        g["norms"] = int(g["norms"]) + 1
    return {"model": core, "fused_inputs": 3, "fuse_first_pass_only": True, "weights": {},
            "shares_embedding": True, "shares_head": False}  # fmt: skip


def acceptance_length(
    method: str, k: int, m: Model, path: Optional[str]
) -> tuple[float, str, bool, list[float]]:  # fmt: skip
    """Tokens a verification step emits on average at depth ``k`` for ``method`` on ``m``, where
    it comes from, whether it was measured on another model of the family, and P(the first i
    drafts kept) for i = 1 ..= k where the curve gives it (``_kept``): from the user's
    file (its rows for the method), else the bundled curves measured on ``m`` (a checkpoint of
    its weights), else on a bundled model of its family (same model_type). Per-position rates
    give 1 + the sum of the first k. Several curves: their median, with their range said."""
    if path is not None:
        rows = _curve_rows(read_text(_checks.text("acceptance", path), what="acceptance curve", error=PlanError), path)
        rows = [r for r in rows if not r.get("method") or _method_of(r["method"]) == method]
        if not rows:
            raise PlanError(f"acceptance: {path} has no rows for {method}")
        al, where, kept = _at_depth(rows, k, f"{path}", method)
        return al, where, False, kept
    rows = [r for r in _bundled_curves() if _method_of(r["method"]) == method]
    own = [r for r in rows if _curve_model(r["model"]) == m.name]
    if own:
        al, where, kept = _at_depth(own, k, f"curve measured on {m.name}", method)
        return al, where, False, kept
    family = [r for r in rows if _family(_curve_model(r["model"])) == m.model_type]
    if family:
        names = sorted({_curve_model(r["model"]) or "" for r in family})
        al, where, kept = _at_depth(
            family, k, f"borrowed from {', '.join(names)} (same family, {m.model_type})", method
        )
        return al, where, True, kept
    raise PlanError(f"acceptance: no bundled acceptance curve for {method} on {m.name} or its family "
                    f"({m.model_type}) in {_CURVES}; give your own: --acceptance FILE (columns depth and "
                    "acceptance_length, as that file has them)")  # fmt: skip


def _method_of(text: str) -> str:
    """A curve's method as --speculative names it (its first word: 'mtp (autoregressive ...)')."""
    return text.strip().split(" ", 1)[0].split("(", 1)[0].lower()


def _at_depth(rows: Sequence[Mapping[str, str]], k: int, where: str, method: str) -> tuple[float, str, list[float]]:
    """The acceptance length at depth ``k`` from ``rows`` (their median where several give one),
    where it comes from, and P(the first i drafts kept) for i = 1 ..= k where the rows give every
    depth up to k (the curve's increments) or per-position rates (empty where they do not)."""
    values, depths = [], set()
    for r in rows:
        rates = _rates(r)
        depth = int(r["depth"]) if (r.get("depth") or "").strip() else None
        if depth is not None:
            depths.add(depth)
        if depth == k and (r.get("acceptance_length") or "").strip():
            values.append(_checks.number("acceptance_length", float(r["acceptance_length"]), positive=True))
        elif len(rates) >= k and (depth is None or depth >= k):
            values.append(1.0 + sum(rates[:k]))
    if not values:
        have = ", ".join(str(d) for d in sorted(depths)) or "none"
        raise PlanError(f"draft_tokens: the {method} acceptance curve ({where}) has no value at depth {k} "
                        f"(depths: {have}); nothing is extrapolated")  # fmt: skip
    for v in values:
        if not 1.0 <= v <= k + 1:
            raise PlanError(f"acceptance: {v:g} at depth {k} ({where}) is outside 1 ..= {k + 1}")
    al = statistics.median(values)
    if len(values) > 1:
        where += f"; median of {len(values)} curves, {min(values):.3g}-{max(values):.3g}"
    kept = _kept(rows, k)
    if kept and abs(1.0 + sum(kept) - al) > 1e-9 * al:
        kept = []  # the curve's depths and its rates disagree: the mean alone is known
    return al, where, kept


def _rates(r: Mapping[str, str]) -> list[float]:
    return [float(x) for x in (r.get("acceptance_rate_at_position") or "").split(";") if x.strip()]


def _kept(rows: Sequence[Mapping[str, str]], k: int) -> list[float]:
    """P(the first i drafts kept), i = 1 ..= k: the increments of the median acceptance length
    over depths 0 ..= k (AL(0) = 1) where every depth is given, else the median per-position rate
    (a chain's position i is kept only with the ones before it); empty where neither is given
    or they are not probabilities falling with the position."""
    by_depth: dict[int, list[float]] = {}
    for r in rows:
        if (r.get("depth") or "").strip() and (r.get("acceptance_length") or "").strip():
            by_depth.setdefault(int(r["depth"]), []).append(float(r["acceptance_length"]))
    if all(d in by_depth for d in range(1, k + 1)):
        curve = [1.0] + [statistics.median(by_depth[d]) for d in range(1, k + 1)]
        kept = [curve[i] - curve[i - 1] for i in range(1, k + 1)]
    else:
        long = [x for x in (_rates(r) for r in rows) if len(x) >= k]
        kept = [statistics.median(x[i] for x in long) for i in range(k)] if long else []
    ok = all(0.0 <= p <= 1.0 for p in kept) and all(b <= a for a, b in zip(kept, kept[1:]))
    return kept if ok else []


def _curve_rows(text: str, origin: str) -> list[dict[str, str]]:
    reader = csv.DictReader(io.StringIO(text))
    cols = reader.fieldnames or []
    unknown = [c for c in cols if c not in CURVE_COLUMNS]
    if unknown:
        raise PlanError(f"acceptance: {origin}: unknown column(s) {', '.join(unknown)}; the columns are "
                        f"{', '.join(CURVE_COLUMNS)}")  # fmt: skip
    if "depth" not in cols or not ({"acceptance_length", "acceptance_rate_at_position"} & set(cols)):
        raise PlanError(f"acceptance: {origin}: needs a depth column and acceptance_length (or "
                        "acceptance_rate_at_position)")  # fmt: skip
    return list(reader)


@functools.lru_cache(maxsize=1)
def _bundled_curves() -> tuple[dict[str, str], ...]:
    return tuple(_curve_rows(_data.read_text(_CURVES), _CURVES))


@functools.lru_cache(maxsize=1)
def _curve_models() -> dict[str, str]:
    return {r["curve_model"]: r["hf_id"] for r in csv.DictReader(io.StringIO(_data.read_text(_CURVE_MODELS)))}


def _curve_model(name: str) -> Optional[str]:
    """The bundled model a curve was measured on (curve_models.csv), None where none is."""
    return _curve_models().get(name)


@functools.cache
def _family(hf_id: Optional[str]) -> Optional[str]:
    return None if hf_id is None else Model.from_config(hf_id).model_type
