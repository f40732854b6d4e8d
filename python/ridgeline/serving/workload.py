"""The workload a simulation replays: request lengths as a number or a distribution, a trace file of
arrivals, and the bounds the arrivals are checked against."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import _checks
from ..errors import PlanError

_LENGTH_KINDS = {
    "fixed": ("value",),
    "uniform": ("lo", "hi"),
    "normal": ("mean", "std"),
    "lognormal": ("mean", "sigma"),
}


def parse_lengths(name: str, v: Any, hi: int) -> dict[str, Any]:
    """A length distribution from what a user writes: a whole number (fixed), ``"uniform:LO:HI"``,
    ``"normal:MEAN:STD[:LO:HI]"``, ``"lognormal:MEAN:SIGMA[:LO:HI]"`` (MEAN of the lengths, SIGMA of
    their logarithm) or a mapping with ``kind``. Clamps default to 1 and ``hi``.

    >>> parse_lengths("output", "lognormal:300:0.8", 4096)
    {'kind': 'lognormal', 'mean': 300.0, 'sigma': 0.8, 'lo': 1, 'hi': 4096}
    """
    if isinstance(v, Mapping):
        spec = dict(v)
        kind = spec.get("kind")
        if kind not in _LENGTH_KINDS:
            raise PlanError(f"{name}: kind must be one of {', '.join(_LENGTH_KINDS)}, got {kind!r}")
        if kind != "fixed":
            spec.setdefault("lo", 1)
            spec.setdefault("hi", hi)
        # every field checked here, each named (the core's parser would name only its position)
        fields = {*_LENGTH_KINDS[kind], *(("lo", "hi") if kind != "fixed" else ())}
        unknown = sorted(str(k) for k in spec if k != "kind" and k not in fields)
        if unknown or any(f not in spec for f in fields):
            raise PlanError(f"{name}: a {kind} distribution has {', '.join(sorted(fields))}; got "
                            f"{', '.join(sorted(str(k) for k in spec if k != 'kind')) or 'none'}")  # fmt: skip
        for f in fields:
            counts = f in ("value", "lo", "hi")
            spec[f] = _checks.whole(f"{name} {f}", spec[f], 1) if counts else _checks.number(f"{name} {f}", spec[f])
        return spec
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return {"kind": "fixed", "value": _checks.whole(name, v, 1)}
    text = _checks.text(name, v).strip()
    parts = text.split(":")
    kind = parts[0].lower()
    usage = (
        f"{name}: expected a whole number or one of uniform:LO:HI, normal:MEAN:STD[:LO:HI], "
        f"lognormal:MEAN:SIGMA[:LO:HI], got {v!r}"
    )
    if len(parts) == 1:
        try:
            return {"kind": "fixed", "value": _checks.whole(name, int(text), 1)}
        except ValueError:
            raise PlanError(usage) from None
    if (
        kind not in _LENGTH_KINDS
        or kind == "fixed"
        or len(parts) not in (3, 5)
        or (kind == "uniform" and len(parts) != 3)
    ):
        raise PlanError(usage)
    try:
        nums = [float(p) for p in parts[1:]]
    except ValueError:
        raise PlanError(usage) from None
    if kind == "uniform":
        return {
            "kind": "uniform",
            "lo": _checks.whole(f"{name} lo", nums[0], 1),
            "hi": _checks.whole(f"{name} hi", nums[1], 1),
        }
    a, b = _LENGTH_KINDS[kind]
    lo, top = (nums[2], nums[3]) if len(nums) == 4 else (1, hi)
    return {"kind": kind, a: nums[0], b: nums[1], "lo": _checks.whole(f"{name} lo", lo, 1),
            "hi": _checks.whole(f"{name} hi", top, 1)}  # fmt: skip


def read_trace(path: Any) -> list[dict[str, Any]]:
    """Rows of a trace file (CSV or JSONL): ``arrival_s, prompt_tokens, output_tokens``, optional
    ``max_tokens``, ``prefix_id`` and ``prefix_tokens`` (requests with one id start with the same
    that many tokens: a prefix cache may hold them)."""
    import polars as pl

    p = Path(_checks.text("trace", str(path)))
    if not p.is_file():
        raise PlanError(
            f"trace: {p} is not a readable file (a CSV or JSONL of arrival_s, prompt_tokens, output_tokens)"
        )
    try:
        df = pl.read_ndjson(p) if p.suffix.lower() in (".jsonl", ".ndjson", ".json") else pl.read_csv(p)
    except Exception as e:  # polars raises several types for a malformed file
        raise PlanError(
            f"trace: {p} could not be read as {'JSONL' if p.suffix.lower() != '.csv' else 'CSV'}: {e}"
        ) from None
    need = ("arrival_s", "prompt_tokens", "output_tokens")
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise PlanError(f"trace: {p} lacks column(s) {', '.join(missing)} (it has {', '.join(df.columns)})")
    if ("prefix_id" in df.columns) != ("prefix_tokens" in df.columns):
        raise PlanError(f"trace: {p} needs prefix_id and prefix_tokens together (requests with one id share "
                        "their first prefix_tokens tokens)")  # fmt: skip
    rows = []
    optional = [c for c in ("max_tokens", "prefix_id", "prefix_tokens") if c in df.columns]
    cols = [*need, *optional]
    for i, r in enumerate(df.select(cols).iter_rows(named=True)):
        try:
            row = {"arrival_s": _checks.number("arrival_s", r["arrival_s"]),
                   "prompt_tokens": _checks.whole("prompt_tokens", r["prompt_tokens"], 1),
                   "output_tokens": _checks.whole("output_tokens", r["output_tokens"], 1)}  # fmt: skip
            if r.get("max_tokens") is not None:
                row["max_tokens"] = _checks.whole("max_tokens", r["max_tokens"], 1)
            if r.get("prefix_id") is not None:
                row["prefix_id"] = _checks.whole("prefix_id", r["prefix_id"], 0)
                row["prefix_tokens"] = _checks.whole("prefix_tokens", r["prefix_tokens"], 0)
        except PlanError as e:
            raise PlanError(f"trace: {p} row {i + 1}: {e}") from None
        rows.append(row)
    if not rows:
        raise PlanError(f"trace: {p} holds no requests")
    return rows


def length_text(d: Mapping[str, Any]) -> str:
    """A length distribution (``parse_lengths``) in words: ``1024``, ``lognormal(mean 300, ...)``."""
    if d["kind"] == "fixed":
        return str(d["value"])
    args = ", ".join(f"{k} {v:g}" for k, v in d.items() if k != "kind")
    return f"{d['kind']}({args})"


def length_bounds(d: Mapping[str, Any]) -> tuple[float, int]:
    """A length distribution's mean (before its clamps) and its longest length (its upper clamp)."""
    if d["kind"] == "fixed":
        return float(d["value"]), int(d["value"])
    mean = (d["lo"] + d["hi"]) / 2 if d["kind"] == "uniform" else float(d["mean"])
    return mean, int(d["hi"])
