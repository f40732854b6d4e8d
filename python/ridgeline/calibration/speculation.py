"""The published speculative speed-ups (data/speculation/speculative_pairs.csv: the same rig with
and without speculation) against ridgeline's speculation physics (issue 45, item 3): each row
priced as ``estimate`` prices the plan with and without its drafter, or listed with why not.

A row's acceptance length is its own where it publishes one, else the bundled curve for its model
and method (as ``estimate`` takes it). A batch ladder that publishes none (the EAGLE-3 paper's
Tables 3 and 5) takes it from its first point, which then matches by construction and is not
counted: the ladder's other points test how the step's cost grows with the batch, the physics.
The rows' runtimes, devices and models are mapped to ridgeline's in data/speculation/pair_rigs.csv
and pair_targets.csv; their prompt and output lengths, where a source does not state them, are
the constants.csv assumptions ``speculation_replay_prompt_tokens`` and ``..._output_tokens``.

A rig whose runtime turns its overlap scheduler off under speculation (pair_rigs.csv
``spec_overlap`` off, with its source: SGLang 0.4.4 under EAGLE) pays in its speculating arm the
host's work that the overlap hides in plain decode (where SGLang's fitted step overhead on H100 is
0): ``host_seq_us`` a running sequence a step (the scheduler's and the verification's per-request
bookkeeping), passed to estimate as its step overhead. That term is fitted on the ladders
(``calibrate --speculation``, data/calibration/speculation_fits.csv), each method held out in turn;
a per-step constant beside it is not fitted: with a ladder's acceptance set by its first point it
trades one for one with the acceptance length, so the ladders cannot tell it. ridgeline's own
SGLang (0.5.14) keeps the overlap under speculation (its EAGLE worker v2), so estimate and simulate
price no such term."""

from __future__ import annotations

import csv
import io
import math
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from .. import _data
from ..errors import RidgelineError

PAIRS = "data/speculation/speculative_pairs.csv"
_RIGS = "data/speculation/pair_rigs.csv"
_TARGETS = "data/speculation/pair_targets.csv"
FITS = "data/calibration/speculation_fits.csv"
#: The search of the host's time a running sequence a speculating step: 0 to 1 ms by 1 us.
_HOST_SEQ_US = [float(i) for i in range(1001)]
#: The probes of a row's affine parts (acceptance lengths, host time a step in us).
_PROBE_AL, _PROBE_HOST_US = (1.0, 2.0), 1000.0
#: The pair file's methods as --speculative names them (the others are not priced).
_METHODS = {"eagle3": "eagle3", "eagle": "eagle", "mtp": "mtp", "ngram": "ngram"}


def _table(path: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(_data.read_text(path))))


def _int(text: str) -> Optional[int]:
    t = (text or "").strip()
    return int(t) if t.isdigit() else None


def priced_pairs(
    rows: Optional[Sequence[Mapping[str, str]]] = None, host_seq_us: Optional[Mapping[str, float]] = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """Every pair row (default: the shipped file) as a record: published and predicted speed-up
    where it is priced, else the reason; ``counted``: whether it enters the statistics (a ladder's
    first point, which set its acceptance, does not). ``host_seq_us``: by ridgeline runtime, the host's
    time a running sequence a speculating step where the rig turns its overlap off (default: the
    shipped fits, speculation_fits.csv)."""
    rows = list(rows) if rows is not None else _table(PAIRS)
    ctx = _context(host_seq_us)
    first_of = _ladder_heads(rows)
    out = []
    for r in rows:
        rec: dict[str, Any] = {"id": r["id"], "published": _float(r.get("speedup")), "predicted": None,
                               "acceptance": None, "counted": True, "reason": None}  # fmt: skip
        try:
            plan, why = _plan(r, ctx)
            if plan is None:
                rec["reason"] = why
            else:
                lead = first_of.get(id(r))
                rec.update(_price(r, plan, lead, ctx))
        except RidgelineError as e:
            rec["reason"] = str(e).splitlines()[0]
        out.append(rec)
    return out


def _context(host_seq_us: Optional[Mapping[str, float]]) -> dict[str, Any]:
    """The mappings, the assumed lengths and the host terms a row is priced with."""
    from ..catalog.store import default_catalog

    cat = default_catalog()
    if host_seq_us is None:
        host_seq_us = shipped_host_terms()
    return {"rigs": {(r["runtime"], r["hardware"]): r for r in _table(_RIGS)},
            "targets": {r["target_model"]: r for r in _table(_TARGETS)},
            "lengths": (int(cat.constant("speculation_replay_prompt_tokens")),
                        int(cat.constant("speculation_replay_output_tokens"))),
            "host_seq_us": dict(host_seq_us)}  # fmt: skip


def shipped_host_terms() -> dict[str, float]:
    """By ridgeline runtime, the shipped host time a running sequence a speculating step where a
    rig turns its overlap off (speculation_fits.csv)."""
    return {r["runtime"]: float(r["host_seq_us"]) for r in _table(FITS) if r["spec_overlap"] == "off"}


def _ladder_heads(rows: Sequence[Mapping[str, str]]) -> dict[int, Mapping[str, str]]:
    """Each row of a batch ladder that publishes no acceptance (by id()) to the ladder's first point."""
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
    return first_of


def _float(text: Optional[str]) -> Optional[float]:
    try:
        return float(text) if text and text.strip() else None
    except ValueError:
        return None


def _plan(r: Mapping[str, str], ctx: Mapping[str, Any]) -> tuple[Optional[dict[str, Any]], str]:
    """The estimate keywords of a row's plan (its speculation aside; ``spec_step_overhead_us``: the
    host's step time its speculating arm pays, None where its rig keeps the overlap), or why it
    cannot be priced."""
    method = _METHODS.get(r["method"])
    if method is None:
        return None, (f"method {r['method']} is not priced here (eagle3, eagle, mtp and ngram are)"
                      + ("; the pairs' draft models are not bundled and their depths are dynamic"
                         if r["method"] == "draft_model" else ""))  # fmt: skip
    rig = ctx["rigs"].get((r["runtime"], r["hardware"]))
    if rig is None:
        return None, "its runtime and device are not mapped to ridgeline's (pair_rigs.csv)"
    target = ctx["targets"].get(r["target_model"])
    if target is None:
        return None, "its model is not mapped to a bundled one (pair_targets.csv)"
    k, batch = _int(r["draft_tokens"]), _int(r["batch_or_concurrency"])
    if k is None:
        return None, "no draft depth stated (a dynamic tree, or not given)"
    if batch is None:
        return None, "no batch stated as a number"
    if _float(r.get("speedup")) is None:
        return None, "no speed-up published"
    host = None
    if rig["spec_overlap"] == "off":
        per_seq = ctx["host_seq_us"].get(rig["ridgeline_runtime"])
        if per_seq is None:
            return None, (f"{rig['ridgeline_runtime']} turns its overlap off under speculation and its host time is "
                          "not fitted (ridgeline calibrate --speculation)")  # fmt: skip
        host = per_seq * batch
    prompt = _int(r.get("prompt_tokens", "")) or ctx["lengths"][0]
    output = _int(r.get("output_tokens", "")) or ctx["lengths"][1]
    tp = _int(r.get("tp", "")) or 1
    plan = {"model": target["hf_id"], "hardware": rig["device"], "runtime": rig["ridgeline_runtime"], "batch": batch,
            "prompt": prompt, "output": output, "tp": tp, "speculative": method, "draft_tokens": k,
            "spec_step_overhead_us": host}  # fmt: skip
    return plan, ""


def _end_to_end(metric: str) -> bool:
    """Whether a row's metric compares whole runs (throughput, latency) rather than decode speed."""
    m = metric.lower()
    return any(w in m for w in ("throughput ratio", "latency", "e2e", "output throughput"))


def _arms(plan: Mapping[str, Any], al: Optional[float], host_us: Optional[float]) -> tuple[Any, Any]:
    """``plan`` estimated without and with its speculation (acceptance length ``al``, None: the
    bundled curve's; ``host_us``: the speculating arm's step overhead, None: the calibration's)."""
    from ..engine.estimate import estimate

    skip = ("model", "hardware", "speculative", "draft_tokens", "spec_step_overhead_us")
    kw = {k: v for k, v in plan.items() if k not in skip}
    base = estimate(plan["model"], plan["hardware"], breakdown=False, **kw)
    with tempfile.NamedTemporaryFile("w", suffix=".csv") as f:
        if al is not None:
            f.write(f"depth,acceptance_length\n{plan['draft_tokens']},{al}\n")
            f.flush()
        spec = estimate(plan["model"], plan["hardware"], speculative=plan["speculative"],
                        draft_tokens=plan["draft_tokens"], acceptance=None if al is None else f.name,
                        step_overhead_us=host_us, breakdown=False, **kw)  # fmt: skip
    return base, spec


def _speed_up(plan: Mapping[str, Any], al: Optional[float], metric: str) -> tuple[float, str]:
    """The predicted speed-up of ``plan`` (with acceptance length ``al``; None: the bundled curve's)
    in the row's metric: end to end for throughput and latency ratios, else decode speed."""
    base, spec = _arms(plan, al, plan.get("spec_step_overhead_us"))
    ratio = base.e2e_s / spec.e2e_s if _end_to_end(metric) else (base.tpot_s or 0.0) / (spec.tpot_s or 1.0)
    return ratio, spec.plan["speculation"]["acceptance"]


def _price(
    r: Mapping[str, str], plan: dict[str, Any], head: Optional[Mapping[str, str]], ctx: Mapping[str, Any]
) -> dict[str, Any]:
    from scipy.optimize import brentq  # type: ignore[import-untyped]

    al = _float(r.get("mean_acceptance_length"))
    if al is not None:
        pred, _ = _speed_up(plan, al, r["metric"])
        return {"predicted": pred, "acceptance": f"{al:g}, the row's own"}
    if head is None:  # a lone row: the bundled curve, as estimate takes it
        pred, where = _speed_up(plan, None, r["metric"])
        return {"predicted": pred, "acceptance": where}
    hp, _ = _plan(head, ctx)
    assert hp is not None
    want, k = float(head["speedup"]), int(hp["draft_tokens"])
    try:
        al = brentq(lambda x: _speed_up(hp, x, head["metric"])[0] - want, 1.0, k + 1.0)
    except ValueError:  # no acceptance length 1 ..= k + 1 gives the first point's speed-up
        return {"reason": f"no acceptance length from 1 to {k + 1} gives its ladder's first point ({head['id']})"}
    pred, _ = _speed_up(plan, al, r["metric"])
    return {
        "predicted": pred,
        "acceptance": f"{al:.3g}, from the ladder's first point ({head['id']})",
        "counted": head is not r,
    }


def host_parts(rows: Optional[Sequence[Mapping[str, str]]] = None) -> list[dict[str, Any]]:
    """The ladder rows of rigs that turn their overlap off under speculation, each priced into the
    affine parts of its speculating arm: in the row's metric (seconds end to end, or a token),
    ``a + b / AL + h (c + d / AL)`` at acceptance length AL and host time h a step, beside its plain
    arm ``base`` (the parts are the differences of four estimates: the terms enter affinely)."""
    rows = list(rows) if rows is not None else _table(PAIRS)
    # every rig's runtime at no host time: the probes below set it
    ctx = _context({r["ridgeline_runtime"]: 0.0 for r in _table(_RIGS)})
    first_of = _ladder_heads(rows)
    out = []
    for r in rows:
        head = first_of.get(id(r))
        rig = ctx["rigs"].get((r["runtime"], r["hardware"]))
        if head is None or rig is None or rig["spec_overlap"] != "off":
            continue
        plan, _ = _plan(r, ctx)
        if plan is None:
            continue
        e2e = _end_to_end(r["metric"])

        def value(al: float, host_us: float, plan: Mapping[str, Any] = plan, e2e: bool = e2e) -> tuple[float, float]:
            base, spec = _arms(plan, al, host_us)
            return (base.e2e_s, spec.e2e_s) if e2e else (base.tpot_s or 0.0, spec.tpot_s or 0.0)

        (lo, hi), h = _PROBE_AL, _PROBE_HOST_US * 1e-6
        base, x00 = value(lo, 0.0)
        x10, x01, x11 = value(hi, 0.0)[1], value(lo, _PROBE_HOST_US)[1], value(hi, _PROBE_HOST_US)[1]
        b = (x00 - x10) / (1 / lo - 1 / hi)
        d = ((x01 - x00) - (x11 - x10)) / h / (1 / lo - 1 / hi)
        out.append({"id": r["id"], "method": r["method"], "runtime": rig["ridgeline_runtime"], "head": head["id"],
                    "batch": plan["batch"], "k": plan["draft_tokens"], "published": float(r["speedup"]),
                    "base": base, "a": x00 - b / lo, "b": b, "c": (x01 - x00) / h - d / lo, "d": d})  # fmt: skip
    return out


def predict_host(recs: Sequence[Mapping[str, Any]], host_seq_us: float) -> list[dict[str, Any]]:
    """Each ladder's rows (``host_parts``) at ``host_seq_us``, its acceptance length set by its first
    point: the predicted speed-up and that length (None where no length 1 ..= k + 1 gives it)."""
    by = {r["id"]: r for r in recs}
    out = []
    for r in recs:
        hd = by.get(r["head"])
        if hd is None:
            continue
        h = host_seq_us * 1e-6 * hd["batch"]
        spare = hd["base"] / hd["published"] - hd["a"] - h * hd["c"]
        al = (hd["b"] + h * hd["d"]) / spare if spare > 0 else None
        if al is None or not 1.0 <= al <= hd["k"] + 1:
            out.append({**r, "predicted": None, "acceptance_length": None})
            continue
        h = host_seq_us * 1e-6 * r["batch"]
        pred = r["base"] / (r["a"] + r["b"] / al + h * (r["c"] + r["d"] / al))
        out.append({**r, "predicted": pred, "acceptance_length": al})
    return out


def fit_host(recs: Sequence[Mapping[str, Any]]) -> float:
    """The host time a running sequence a step (us) that minimises the squared log error of the
    ladders' counted rows (their first points set their acceptance), on the search grid."""
    best = (math.inf, 0.0)
    for h in _HOST_SEQ_US:
        preds = [p for p in predict_host(recs, h) if p["id"] != p["head"]]
        if any(p["predicted"] is None for p in preds):
            continue
        err = sum(math.log(p["predicted"] / p["published"]) ** 2 for p in preds)
        if err < best[0]:
            best = (err, h)
    return best[1]


def host_summary(recs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The host term fitted on every ladder, and each method held out in turn (fitted on the other
    methods' ladders, predicted on its own)."""
    h = fit_host(recs)
    inside = [p for p in predict_host(recs, h) if p["id"] != p["head"]]
    held: list[dict[str, Any]] = []
    by_method: dict[str, float] = {}
    for m in sorted({r["method"] for r in recs}):
        others = [r for r in recs if r["method"] != m]
        hm = fit_host(others)
        by_method[m] = hm
        held += [{**p, "fitted_without": m, "host_seq_us": hm}
                 for p in predict_host([r for r in recs if r["method"] == m], hm) if p["id"] != p["head"]]  # fmt: skip
    return {"host_seq_us": h, "runtimes": sorted({r["runtime"] for r in recs}), "in_sample": _ratios(inside),
            "held_out": _ratios(held), "held_out_by_method": by_method, "rows": inside,
            "held_out_rows": held}  # fmt: skip


def _ratios(preds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    ratios = [p["predicted"] / p["published"] for p in preds if p["predicted"] is not None]
    return {"rows": len(ratios),
            "medape": statistics.median(abs(x - 1) for x in ratios) if ratios else None,
            "within_1_5x": sum(1 for x in ratios if 1 / 1.5 <= x <= 1.5) / len(ratios) if ratios else None}  # fmt: skip


def fits_csv(s: Mapping[str, Any]) -> str:
    """speculation_fits.csv's text for ``host_summary``'s ``s``."""
    cols = ["runtime", "spec_overlap", "host_seq_us", "rows", "medape", "held_out_medape", "held_out_within_1_5x",
            "held_out_by_method", "source"]  # fmt: skip
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for rt in s["runtimes"]:
        w.writerow({"runtime": rt, "spec_overlap": "off", "host_seq_us": f"{s['host_seq_us']:g}",
                    "rows": s["in_sample"]["rows"], "medape": f"{s['in_sample']['medape']:.4f}",
                    "held_out_medape": f"{s['held_out']['medape']:.4f}",
                    "held_out_within_1_5x": f"{s['held_out']['within_1_5x']:.4f}",
                    "held_out_by_method": " ".join(f"{m}:{v:g}" for m, v in s["held_out_by_method"].items()),
                    "source": f"ridgeline calibrate --speculation: least squares in log speed-up over the batch "
                              f"ladders of {PAIRS} whose rig turns its overlap off under speculation "
                              f"(data/speculation/pair_rigs.csv), each ladder's acceptance set by its first point; "
                              "held_out_by_method: the term fitted without each method's ladders"})  # fmt: skip
    return buf.getvalue()


def host_report(s: Mapping[str, Any]) -> str:
    """The held-out rows, one a line, and the figures."""
    lines = ["  row (its method held out)                    published  predicted  pred/pub  host us/seq"]
    for p in s["held_out_rows"]:
        pred = "-" if p["predicted"] is None else f"{p['predicted']:9.3g}"
        ratio = "-" if p["predicted"] is None else f"{p['predicted'] / p['published']:8.2f}"
        lines.append(f"  {p['id'][:44]:44s} {p['published']:9.3g}  {pred:>9}  {ratio:>8}  {p['host_seq_us']:g}")
    ins, out = s["in_sample"], s["held_out"]
    bound = " (at its search bound)" if s["host_seq_us"] >= _HOST_SEQ_US[-1] else ""
    lines.append(f"{', '.join(s['runtimes'])} with its overlap off under speculation: {s['host_seq_us']:g} us a "
                 f"running sequence a step{bound}; in sample MedAPE {ins['medape']:.1%} over {ins['rows']} rows; each "
                 f"method held out: MedAPE {out['medape']:.1%}, {out['within_1_5x']:.0%} within 1.5x")  # fmt: skip
    return "\n".join(lines)


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
        "host_seq_us": shipped_host_terms(),
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
    lines += [f"  {rt}'s rigs that turn the overlap off under speculation pay {us:g} us a running sequence a "
              f"speculating step on the host ({FITS})" for rt, us in sorted(s["host_seq_us"].items())]  # fmt: skip
    return "\n".join(lines)
