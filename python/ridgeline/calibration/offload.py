"""The published offload measurements (data/speculation/offload_pairs.csv: llama.cpp's
``--n-cpu-moe`` and ``-ot exps=CPU`` runs) against ridgeline's offload physics (issue 45, items 2
and 3), and the fit of its two free host terms.

A row's decode time per token is priced as ``estimate`` prices the plan: the device's operators,
the host's share of the routed experts read from host memory, and a round trip of the hidden
state to the host and back per offloaded layer. Its host-memory and round-trip terms enter it
affinely, so each row is priced once into ``device + host_bytes / eta + trips x t_round_trip``
and the terms are fitted on those parts: ``eta`` (the share of the host's memory bandwidth its
expert kernels reach) and ``t_round_trip`` (the fixed time of one round trip: the device's
synchronisation, the copies' latency, the host's threads waking). Each device is held out in
turn: fitted on the others' rows, predicted on its own.

The rows' models, weight formats, devices, runtimes, placements and hosts are mapped to
ridgeline's in data/speculation/offload_rows.csv, with a reason for every row left out; the
lengths a source does not state are the constants.csv assumptions ``offload_replay_*``."""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from .. import _data

PAIRS = "data/speculation/offload_pairs.csv"
_ROWS = "data/speculation/offload_rows.csv"
FITS = "data/calibration/offload_fits.csv"
#: The search of the terms: eta from 1/50 to 1, the round trip from 0 to 5 ms (every bound said).
_ETA = [0.02 * (50.0 ** (i / 199)) for i in range(200)]
_RT_US = [5.0 * i for i in range(1001)]
#: The terms' probes: the parts are the differences of three prices (the terms enter affinely).
_PROBE_ETA, _PROBE_RT_US = 0.5, 1000.0


def _table(path: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(_data.read_text(path))))


def parts(rows: Optional[Sequence[Mapping[str, str]]] = None) -> list[dict[str, Any]]:
    """Every offload row as a record: its measured seconds per token and, where it is priced, the
    parts of the predicted one (``device_s``, ``host_s`` at eta 1, ``trips`` a token), else why not."""
    from ..catalog.store import default_catalog
    from ..errors import RidgelineError

    pairs = {r["id"]: r for r in _table(PAIRS)}
    mapped = {r["id"]: r for r in (rows if rows is not None else _table(_ROWS))}
    cat = default_catalog()
    lengths = (int(cat.constant("offload_replay_prompt_tokens")), int(cat.constant("offload_replay_output_tokens")))
    out = []
    for pid, p in pairs.items():
        m = mapped.get(pid)
        rec: dict[str, Any] = {"id": pid, "device": None, "offload": None, "measured_s": None, "reason": None}
        tg = float(p["tg_tok_s"]) if (p.get("tg_tok_s") or "").strip() else None
        if m is None:
            rec["reason"] = f"not mapped in {_ROWS}"
        elif m["reason"]:
            rec["reason"] = m["reason"]
        elif tg is None:
            rec["reason"] = "no decode speed published"
        if rec["reason"]:
            out.append(rec)
            continue
        assert m is not None and tg is not None
        rec.update(device=m["device"], offload=m["offload"], measured_s=1.0 / tg, model=m["model"])
        try:
            rec.update(_parts(m, lengths))
        except RidgelineError as e:
            rec["reason"] = str(e).splitlines()[0].split(";")[0]
        out.append(rec)
    return out


def _parts(m: Mapping[str, str], lengths: tuple[int, int]) -> dict[str, Any]:
    """A mapped row's priced parts: seconds a token on the device, on the host at eta 1, and the
    round trips a token; whether the device part is calibrated (not the bound)."""
    from ..engine.estimate import estimate

    host = {"name": f"{m['id']} host", "memory_bw_gbs": float(m["host_memory_bw_gbs"]),
            "tflops_fp32": float(m["host_tflops"]), "memory_gb": float(m["host_memory_gb"])}  # fmt: skip
    prompt, output = int(m["prompt"] or lengths[0]), int(m["output"] or lengths[1])
    basis = []

    def tpot(eta: float, rt_us: float) -> float:
        e = estimate(m["model"], m["device"], host={**host, "eta_mem": eta, "t_round_trip_us": rt_us},
                     runtime=m["runtime"], weight_dtype=m["weight_dtype"], prompt=prompt, output=output,
                     offload=m["offload"], breakdown=False)  # fmt: skip
        basis.append(e.basis)
        return float(e.tpot_s or 0.0)

    t0 = tpot(1.0, 0.0)
    host_s = (tpot(_PROBE_ETA, 0.0) - t0) / (1.0 / _PROBE_ETA - 1.0)
    trips = (tpot(1.0, _PROBE_RT_US) - t0) / (_PROBE_RT_US * 1e-6)
    return {"device_s": t0 - host_s, "host_s": host_s, "trips": trips, "calibrated": basis[0] != "bound"}


def predict(rec: Mapping[str, Any], eta: float, rt_us: float) -> float:
    """A priced record's seconds per token at host terms ``eta`` and ``rt_us``."""
    return float(rec["device_s"] + rec["host_s"] / eta + rec["trips"] * rt_us * 1e-6)


def fit(recs: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    """The (eta, round trip in us) that minimise the squared log error over the priced ``recs``
    whose device part is calibrated (a device priced at the bound would push its runtime's slowness
    into the host terms), on the search grid (a term at its grid's edge is reported so)."""
    priced = [r for r in recs if r.get("host_s") is not None and r["calibrated"]]
    best = (math.inf, 1.0, 0.0)
    for eta in _ETA:
        for rt in _RT_US:
            err = sum(math.log(predict(r, eta, rt) / r["measured_s"]) ** 2 for r in priced)
            if err < best[0]:
                best = (err, eta, rt)
    return best[1], best[2]


def held_out(recs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each priced record predicted with the terms fitted on the other devices' rows."""
    priced = [r for r in recs if r.get("host_s") is not None]
    out = []
    for dev in sorted({r["device"] for r in priced}):
        eta, rt = fit([r for r in priced if r["device"] != dev])
        for r in priced:
            if r["device"] == dev:
                out.append({**r, "eta": eta, "rt_us": rt, "predicted_s": predict(r, eta, rt)})
    return out


def _stats(recs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    ratios = [r["measured_s"] / r["predicted_s"] for r in recs]  # predicted / measured speed
    return {"rows": len(ratios),
            "medape": statistics.median(abs(x - 1) for x in ratios) if ratios else None,
            "within_1_5x": sum(1 for x in ratios if 1 / 1.5 <= x <= 1.5) / len(ratios) if ratios else None}  # fmt: skip


def ladders(recs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each ``--n-cpu-moe`` ladder (a source's model and device at several placements): whether
    the predicted speed falls with the experts on the host wherever the measured one does."""
    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for r in recs:
        groups.setdefault((r["device"], r["model"], r["id"].rsplit("_", 1)[0]), []).append(r)
    out = []
    for (dev, model, _), rs in groups.items():
        if len(rs) < 2:
            continue
        rs = sorted(rs, key=lambda r: int(r["offload"].split(":")[1]))
        steps = list(zip(rs, rs[1:]))
        agree = sum(1 for a, b in steps
                    if (b["measured_s"] > a["measured_s"]) == (b["predicted_s"] > a["predicted_s"]))  # fmt: skip
        out.append({"device": dev, "model": model, "points": len(rs), "steps_agreeing": agree, "steps": len(steps)})
    return out


def summary(recs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The in-sample fit, the held-out figures and the rows not priced, by reason."""
    priced = [r for r in recs if r.get("host_s") is not None]
    eta, rt = fit(priced)
    inside = [{**r, "predicted_s": predict(r, eta, rt)} for r in priced if r["calibrated"]]
    out = held_out(priced)
    reasons: dict[str, int] = {}
    for r in recs:
        if r["reason"]:
            reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
    return {"eta_mem": eta, "t_round_trip_us": rt,
            "devices": sorted({r["device"] for r in priced if r["calibrated"]}),
            "uncalibrated_devices": sorted({r["device"] for r in priced if not r["calibrated"]}),
            "in_sample": _stats(inside), "held_out": _stats(out), "ladders": ladders(out), "held_out_rows": out,
            "rows": len(recs), "not_priced": dict(sorted(reasons.items(), key=lambda kv: -kv[1]))}  # fmt: skip


def fits_csv(s: Mapping[str, Any]) -> str:
    """offload_fits.csv's text for the summary ``s`` (llama.cpp's row; the link is not fitted)."""
    cols = ["runtime", "eta_mem", "eta_link", "t_round_trip_us", "rows", "devices", "medape", "held_out_medape",
            "held_out_within_1_5x", "source"]  # fmt: skip
    row = {"runtime": "llamacpp", "eta_mem": f"{s['eta_mem']:.4g}", "eta_link": "1",
           "t_round_trip_us": f"{s['t_round_trip_us']:g}", "rows": s["in_sample"]["rows"],
           "devices": " ".join(s["devices"]), "medape": f"{s['in_sample']['medape']:.4f}",
           "held_out_medape": f"{s['held_out']['medape']:.4f}",
           "held_out_within_1_5x": f"{s['held_out']['within_1_5x']:.4f}",
           "source": f"ridgeline calibrate --offload: least squares in log seconds a token over {PAIRS} as mapped "
                     f"in {_ROWS}; eta_link is not fitted (no row streams weights in decode): the link at full "
                     "bandwidth"}  # fmt: skip
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    w.writerow(row)
    return buf.getvalue()


def report(s: Mapping[str, Any]) -> str:
    """The held-out rows, one a line, the ladders and the figures."""
    lines = ["  row (held out by device)                        placement     measured  predicted  pred/meas"]
    for r in s["held_out_rows"]:
        meas, pred = 1 / r["measured_s"], 1 / r["predicted_s"]
        lines.append(f"  {r['id'][:46]:46s}  {r['offload']:12s} {meas:7.1f}    {pred:7.1f}    {pred / meas:6.2f}")
    for lad in s["ladders"]:
        lines.append(f"  ladder {lad['model']} on {lad['device']}: {lad['steps_agreeing']} of {lad['steps']} steps "
                     "move as measured")  # fmt: skip
    terms = (("eta_mem", s["eta_mem"], _ETA), ("t_round_trip_us", s["t_round_trip_us"], _RT_US))
    edge = [name for name, v, grid in terms if v in (grid[0], grid[-1])]
    ins, out = s["in_sample"], s["held_out"]
    if ins["rows"]:
        bound = f" ({', '.join(edge)} at the search's bound)" if edge else ""
        lines.append(f"fit on all {ins['rows']} rows ({', '.join(s['devices'])}): eta_mem {s['eta_mem']:.3g}, "
                     f"round trip {s['t_round_trip_us']:g} us{bound}; in sample MedAPE {ins['medape']:.1%}, "
                     f"{ins['within_1_5x']:.0%} within 1.5x")  # fmt: skip
        unfit = s["uncalibrated_devices"]
        lines.append(f"held out by device: MedAPE {out['medape']:.1%}, {out['within_1_5x']:.0%} of {out['rows']} rows "
                     "within 1.5x (tok/s)" + (f"; {', '.join(unfit)}: device part at the bound (no calibrated "
                     "runtime), predicted but not fitted on" if unfit else ""))  # fmt: skip
    lines += [f"  not priced: {n:3d} rows: {why}" for why, n in s["not_priced"].items()]
    return "\n".join(lines)
