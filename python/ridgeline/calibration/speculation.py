"""The published speculative speed-ups (data/speculation/speculative_pairs.csv: the same rig with
and without speculation) against ridgeline's speculation physics (issue 45, item 3): each row
priced as ``estimate`` prices the plan with and without its drafter, or listed with why not.

A row's acceptance length is its own where it publishes one, else the bundled curve for its model
and method (as ``estimate`` takes it). A batch ladder that publishes none (the EAGLE-3 paper's
Tables 3 and 5) takes it from its first point, which then matches by construction and is not
counted: the ladder's other points test how the step's cost grows with the batch, the physics.
The rows' runtimes, devices and models are mapped to ridgeline's in data/speculation/pair_rigs.csv
and pair_targets.csv; their prompt and output lengths, where a source does not state them, are
the constants.csv assumptions ``speculation_replay_prompt_tokens`` and ``..._output_tokens``."""

from __future__ import annotations

import csv
import io
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from .. import _data
from ..errors import RidgelineError

PAIRS = "data/speculation/speculative_pairs.csv"
_RIGS = "data/speculation/pair_rigs.csv"
_TARGETS = "data/speculation/pair_targets.csv"
#: The pair file's methods as --speculative names them (the others are not priced).
_METHODS = {"eagle3": "eagle3", "eagle": "eagle", "mtp": "mtp", "ngram": "ngram"}


def _table(path: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(_data.read_text(path))))


def _int(text: str) -> Optional[int]:
    t = (text or "").strip()
    return int(t) if t.isdigit() else None


def priced_pairs(rows: Optional[Sequence[Mapping[str, str]]] = None) -> list[dict[str, Any]]:
    """Every pair row (default: the shipped file) as a record: published and predicted speed-up
    where it is priced, else the reason; ``counted``: whether it enters the statistics (a ladder's
    first point, which set its acceptance, does not)."""
    from ..catalog.store import default_catalog

    rows = list(rows) if rows is not None else _table(PAIRS)
    rigs = {(r["runtime"], r["hardware"]): r for r in _table(_RIGS)}
    targets = {r["target_model"]: r for r in _table(_TARGETS)}
    cat = default_catalog()
    lengths = (int(cat.constant("speculation_replay_prompt_tokens")),
               int(cat.constant("speculation_replay_output_tokens")))  # fmt: skip
    ladders: dict[tuple[str, ...], list[Mapping[str, str]]] = {}
    for r in rows:
        if not (r.get("mean_acceptance_length") or "").strip():
            key = (r["source_url"], r["runtime"], r["hardware"], r["target_model"], r["method"], r["draft_tokens"],
                   r["dataset"], r["metric"])  # fmt: skip
            ladders.setdefault(key, []).append(r)
    first_of: dict[int, Mapping[str, str]] = {}
    for group in ladders.values():
        batched = [r for r in group if _int(r["batch_or_concurrency"]) is not None]
        if len(batched) > 1:
            head = min(batched, key=lambda r: _int(r["batch_or_concurrency"]) or 0)
            for r in batched:
                first_of[id(r)] = head
    out = []
    for r in rows:
        rec: dict[str, Any] = {"id": r["id"], "published": _float(r.get("speedup")), "predicted": None,
                               "acceptance": None, "counted": True, "reason": None}  # fmt: skip
        try:
            plan, why = _plan(r, rigs, targets, lengths)
            if plan is None:
                rec["reason"] = why
            else:
                lead = first_of.get(id(r))
                rec.update(_price(r, plan, lead, rigs, targets, lengths))
        except RidgelineError as e:
            rec["reason"] = str(e).splitlines()[0]
        out.append(rec)
    return out


def _float(text: Optional[str]) -> Optional[float]:
    try:
        return float(text) if text and text.strip() else None
    except ValueError:
        return None


def _plan(
    r: Mapping[str, str], rigs: Mapping[tuple[str, str], Mapping[str, str]], targets: Mapping[str, Mapping[str, str]],
    lengths: tuple[int, int],
) -> tuple[Optional[dict[str, Any]], str]:  # fmt: skip
    """The estimate keywords of a row's plan (its speculation aside), or why it cannot be priced."""
    method = _METHODS.get(r["method"])
    if method is None:
        return None, f"method {r['method']} is not priced (eagle3, eagle, mtp and ngram are)"
    rig = rigs.get((r["runtime"], r["hardware"]))
    if rig is None:
        return None, "its runtime and device are not mapped to ridgeline's (pair_rigs.csv)"
    target = targets.get(r["target_model"])
    if target is None:
        return None, "its model is not mapped to a bundled one (pair_targets.csv)"
    k, batch = _int(r["draft_tokens"]), _int(r["batch_or_concurrency"])
    if k is None:
        return None, "no draft depth stated (a dynamic tree, or not given)"
    if batch is None:
        return None, "no batch stated as a number"
    if _float(r.get("speedup")) is None:
        return None, "no speed-up published"
    prompt = _int(r.get("prompt_tokens", "")) or lengths[0]
    output = _int(r.get("output_tokens", "")) or lengths[1]
    tp = _int(r.get("tp", "")) or 1
    plan = {"model": target["hf_id"], "hardware": rig["device"], "runtime": rig["ridgeline_runtime"], "batch": batch,
            "prompt": prompt, "output": output, "tp": tp, "speculative": method, "draft_tokens": k}  # fmt: skip
    return plan, ""


def _speed_up(plan: Mapping[str, Any], al: Optional[float], metric: str) -> tuple[float, str]:
    """The predicted speed-up of ``plan`` (with acceptance length ``al``; None: the bundled curve's)
    in the row's metric: end to end for throughput and latency ratios, else decode speed."""
    from ..engine.estimate import estimate

    kw = {k: v for k, v in plan.items() if k not in ("model", "hardware", "speculative", "draft_tokens")}
    base = estimate(plan["model"], plan["hardware"], **kw)
    with tempfile.NamedTemporaryFile("w", suffix=".csv") as f:
        if al is not None:
            f.write(f"depth,acceptance_length\n{plan['draft_tokens']},{al}\n")
            f.flush()
        spec = estimate(plan["model"], plan["hardware"], speculative=plan["speculative"],
                        draft_tokens=plan["draft_tokens"], acceptance=None if al is None else f.name, **kw)  # fmt: skip
    m = metric.lower()
    end_to_end = any(w in m for w in ("throughput ratio", "latency", "e2e", "output throughput"))
    ratio = base.e2e_s / spec.e2e_s if end_to_end else (base.tpot_s or 0.0) / (spec.tpot_s or 1.0)
    return ratio, spec.plan["speculation"]["acceptance"]


def _price(
    r: Mapping[str, str], plan: dict[str, Any], head: Optional[Mapping[str, str]],
    rigs: Mapping[tuple[str, str], Mapping[str, str]], targets: Mapping[str, Mapping[str, str]],
    lengths: tuple[int, int],
) -> dict[str, Any]:  # fmt: skip
    from scipy.optimize import brentq  # type: ignore[import-untyped]

    al = _float(r.get("mean_acceptance_length"))
    if al is not None:
        pred, _ = _speed_up(plan, al, r["metric"])
        return {"predicted": pred, "acceptance": f"{al:g}, the row's own"}
    if head is None:  # a lone row: the bundled curve, as estimate takes it
        pred, where = _speed_up(plan, None, r["metric"])
        return {"predicted": pred, "acceptance": where}
    hp, _ = _plan(head, rigs, targets, lengths)
    assert hp is not None
    want, k = float(head["speedup"]), int(hp["draft_tokens"])
    al = brentq(lambda x: _speed_up(hp, x, head["metric"])[0] - want, 1.0, k + 1.0)
    pred, _ = _speed_up(plan, al, r["metric"])
    return {
        "predicted": pred,
        "acceptance": f"{al:.3g}, from the ladder's first point ({head['id']})",
        "counted": head is not r,
    }


def summary(recs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The counted rows' agreement: MedAPE of the speed-up, the share within 1.5x, and how the
    published slow-downs (speed-up < 1) are predicted; the others counted by reason."""
    counted = [r for r in recs if r["predicted"] is not None and r["counted"]]
    ratios = [r["predicted"] / r["published"] for r in counted]
    slow = [r for r in counted if r["published"] < 1]
    reasons: dict[str, int] = {}
    for r in recs:
        if r["reason"]:
            reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
    return {
        "rows": len(recs), "counted": len(counted),
        "medape": statistics.median(abs(x - 1) for x in ratios) if ratios else None,
        "within_1_5x": sum(1 for x in ratios if 1 / 1.5 <= x <= 1.5) / len(ratios) if ratios else None,
        "slowdowns": len(slow), "slowdowns_below_1_1": sum(1 for r in slow if r["predicted"] < 1.1),
        "set_acceptance": sum(1 for r in recs if r["predicted"] is not None and not r["counted"]),
        "not_priced": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
    }  # fmt: skip


def report(recs: Sequence[Mapping[str, Any]]) -> str:
    """The priced rows, one a line, and the summary."""
    s = summary(recs)
    lines = ["  row                                          published  predicted  pred/pub  acceptance"]
    for r in recs:
        if r["predicted"] is None:
            continue
        mark = "" if r["counted"] else "  (sets the ladder's acceptance)"
        lines.append(f"  {r['id'][:44]:44s} {r['published']:9.3g}  {r['predicted']:9.3g}  "
                     f"{r['predicted'] / r['published']:8.2f}  {r['acceptance']}{mark}")  # fmt: skip
    pct = "-" if s["medape"] is None else f"{s['medape']:.1%}"
    share = "-" if s["within_1_5x"] is None else f"{s['within_1_5x']:.0%}"
    lines.append(f"{s['counted']} of {s['rows']} rows counted: speed-up MedAPE {pct}, {share} within 1.5x; "
                 f"{s['set_acceptance']} set their ladder's acceptance; published slow-downs {s['slowdowns']}, "
                 f"{s['slowdowns_below_1_1']} predicted below 1.1")  # fmt: skip
    lines += [f"  not priced: {n:4d} rows: {why}" for why, n in s["not_priced"].items()]
    return "\n".join(lines)
