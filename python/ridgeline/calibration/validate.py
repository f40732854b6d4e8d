"""Validation reports: predictions of measured rows next to the rows.

``comm_report`` (``ridgeline validate --comm``) compares every measured
communication row with two predictions: the link-rate bound (protocol
efficiency 1, no latency) and the protocol model (the NCCL beta table and the
catalog's latencies). Fitting a comm efficiency is calibration's job; this is
the raw structural agreement.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np

from .. import _core
from ..catalog.store import Catalog, default_catalog
from ..engine.collectives import bus_factor, protocol_json
from ..engine.fitted import formats_of, lookup, shipped_fits
from .acceptance import BOUND_TOLERANCE, within_share
from .calibrate import SKEW, UNCALIBRATED, Batch, _memtech, _profile_rows, fit_all, params_of
from .decompose import MODEL_METRICS, Decomposed, decompose, decompose_all

# Protocol efficiencies of the link-rate bound: every protocol at the full link rate.
_BOUND_PROTO = {"beta_ll": 1.0, "beta_ll128": 1.0, "beta_simple": 1.0}
# Rows whose measurement used in-switch reduction (NVLink SHARP / NVLS) beat a ring's link bound legitimately.
_IN_SWITCH_MARKERS = ("nvls", "sharp", "in-switch")

SIZE_BUCKETS = ((64 * 2**10, "<64KiB"), (2**20, "64KiB-1MiB"), (64 * 2**20, "1MiB-64MiB"), (math.inf, ">=64MiB"))


def size_bucket(size: Optional[float]) -> str:
    if size is None or (isinstance(size, float) and math.isnan(size)):
        return "unstated"
    return next(label for limit, label in SIZE_BUCKETS if size < limit)


def _collective_bw(cat: Catalog, row: dict[str, Any], bound: bool) -> Optional[float]:
    """Predicted busBW (GB/s) of an all-reduce or send/recv row."""
    dev = cat.get(row["hardware"])
    proto = json.loads(protocol_json(cat))
    if bound:
        proto.update(_BOUND_PROTO)
    op = "sendrecv" if row["metric"] == "sendrecv_busbw_gbs" else row["op"]
    ranks = int(row["ranks"] or 2)
    size = float(row["size_bytes"])
    link = dev.scaleup_bw_gbs or dev.host_link_bw_gbs
    if link is None:
        return None
    latency = 0.0 if bound else (dev.scaleup_latency_us or 0.0)
    links = [] if bound else dev.collective_links("nccl")
    r = _core.collective(
        op, ranks, np.array([size]), link, latency, json.dumps(proto),
        row["devices_per_node"], dev.scaleout_bw_gbs, None if bound else dev.scaleout_latency_us, json.dumps(links),
    )  # fmt: skip
    t = float(r["time_s"][0])
    return size / t * bus_factor(op, ranks) / 1e9


def _link_bw(cat: Catalog, row: dict[str, Any], bound: bool) -> Optional[float]:
    """Predicted GB/s of a copy or link row (a single transfer at the link or memory rate)."""
    dev = cat.get(row["hardware"])
    beta = 1.0 if bound else cat.constant("nccl_beta_simple")
    metric = row["metric"]
    if metric == "copy_gbs":  # bandwidthTest device-to-device counts read + write bytes
        return float(dev.memory_bw_gbs)
    if metric == "host_link_gbs":
        return None if dev.host_link_bw_gbs is None else dev.host_link_bw_gbs / 2  # one direction
    if metric == "link_unidirectional_gbs" and dev.scaleup_bw_gbs:
        return dev.scaleup_bw_gbs / 2 * beta
    if metric == "copy_bidirectional_gbs" and dev.scaleup_bw_gbs:
        return dev.scaleup_bw_gbs * beta
    return None


def kernel_comm_rows(kernels: str, cat: Catalog) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The runtimes' measured collectives under ``kernels`` (``kernels.comm_rows``) as comm rows:
    busBW observed and predicted with the device's own link measurements of that library, and
    ``held_out``: predicted with the median of the other measured devices of its vendor and
    fabric (what a device without measurements gets). Returns the rows and how many were left
    out for each reason (eager launches, devices the catalog does not name, unreadable cells)."""
    from . import comm_fit
    from .kernels import comm_rows as read

    fits = [
        {**x, "name": name}
        for name in cat.names()
        for x in cat.get(name).links
        if cat.get(name).links_source_is_measured
    ]
    every = read(kernels)
    rows = [r for r in every if r["excluded"] is None]
    left_out: dict[str, int] = {}
    for r in every:
        if r["excluded"] is not None:
            left_out[r["excluded"]] = left_out.get(r["excluded"], 0) + 1
    out = []
    groups: dict[tuple[str, str, str, int], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["hardware"], r["library"], r["op"], r["ranks"]), []).append(r)
    for (hw, lib, op, n), g in sorted(groups.items()):
        dev = cat.get(hw)
        sizes = [r["size_bytes"] for r in g]
        mine = [x for x in dev.links if x["library"] == lib and x["op"] == op]
        peers = comm_fit.peers(fits, dev, lib, op, cat)
        pred = comm_fit.predict(op, n, sizes, dev, mine, cat)
        bound = _core.collective(op, n, np.asarray(sizes, dtype=float), comm_fit.fabric(dev)[1], 0.0,
                                 json.dumps({**json.loads(protocol_json(cat)), **_BOUND_PROTO}))["time_s"]  # fmt: skip
        held = comm_fit.predict(op, n, sizes, dev, peers, cat) if peers else [None] * len(g)
        f = bus_factor(op, n)
        for r, tp, tb, th in zip(g, pred, bound, held):
            size, t = r["size_bytes"], r["time_s"]
            out.append({
                "id": r["id"], "hardware": hw, "file_hardware": f"{r['file_hardware']} ({lib} {r['version']})",
                "metric": f"{op.replace('_', '')}_busbw_gbs", "op": op, "ranks": n, "nodes": 1, "size_bytes": size,
                "bucket": size_bucket(size), "observed": size / t * f / 1e9, "unit": "GB/s", "source": r["file"],
                "bound": size / tb * f / 1e9, "predicted": size / tp * f / 1e9, "reason": None,
                "held_out": None if th is None else size / th * f / 1e9, "library": lib,
                "obs_over_bound": tb / t, "obs_over_pred": tp / t,
                "obs_over_held_out": None if th is None else th / t,
                "beats_bound": tb / t > BOUND_TOLERANCE, "in_switch_reduction": False,
            })  # fmt: skip
    return out, left_out


#: The metrics of communication and link rows (benchmarks._allreduce, _memory_link): priced by
#: the collective model and the catalog's links, never by a model plan.
COMM_METRICS = ("allreduce_busbw_gbs", "sendrecv_busbw_gbs", "copy_gbs", "host_link_gbs", "link_unidirectional_gbs",
                "copy_bidirectional_gbs")  # fmt: skip


def comm_rows(catalog: Optional[Catalog] = None) -> list[dict[str, Any]]:
    """Every communication and link row with its observed value and both predictions."""
    cat = catalog or default_catalog()
    marks = ", ".join("?" for _ in COMM_METRICS)
    rows = cat.sql(f"SELECT * FROM benchmarks WHERE metric IN ({marks}) ORDER BY id", list(COMM_METRICS)).to_dicts()
    return [comm_record(cat, r) for r in rows]


def comm_record(cat: Catalog, r: Mapping[str, Any]) -> dict[str, Any]:
    """A communication or link row (``COMM_METRICS``) with its observed value, the link-rate bound
    and the protocol model's prediction (None with the reason where it is not priced)."""
    rec = {
        "id": r["id"], "hardware": r["hardware"], "file_hardware": r["file_hardware"], "metric": r["metric"],
        "op": r["op"], "ranks": r["ranks"], "nodes": r["nodes"], "size_bytes": r["size_bytes"],
        "bucket": size_bucket(r["size_bytes"]), "observed": r["value"], "unit": r["unit"], "source": r["source"],
        "bound": None, "predicted": None, "reason": r["not_priced"],
    }  # fmt: skip
    if r["not_priced"] is None:
        price = _collective_bw if r["metric"] in ("allreduce_busbw_gbs", "sendrecv_busbw_gbs") else _link_bw
        rec["bound"] = price(cat, dict(r), True)
        rec["predicted"] = price(cat, dict(r), False)
        if rec["bound"] is None:
            rec["reason"] = f"{r['hardware']} has no catalog figure for this link"
    if rec["bound"]:
        rec["obs_over_bound"] = rec["observed"] / rec["bound"]
        rec["obs_over_pred"] = rec["observed"] / rec["predicted"]
        rec["beats_bound"] = rec["obs_over_bound"] > BOUND_TOLERANCE
        notes = f"{r['notes'] or ''} {r['runtime'] or ''}".lower()
        rec["in_switch_reduction"] = any(k in notes for k in _IN_SWITCH_MARKERS)
    else:
        rec.update(obs_over_bound=None, obs_over_pred=None, beats_bound=False, in_switch_reduction=False)
    return rec


def _median(xs: list[float]) -> Optional[float]:
    return float(np.median(xs)) if xs else None


def comm_report(catalog: Optional[Catalog] = None, kernels: Optional[str] = None) -> dict[str, Any]:
    """Medians of observed/predicted per size bucket and per setup, and the bound violations;
    with ``kernels``, the runtimes' measured collectives under that folder too (with the
    leave-one-device-out prediction beside the device's own)."""
    cat = catalog or default_catalog()
    rows = comm_rows(cat)
    left_out: dict[str, int] = {}
    if kernels is not None:
        extra, left_out = kernel_comm_rows(kernels, cat)
        rows += extra
    priced = [r for r in rows if r["bound"]]
    groups: dict[str, dict[str, list[dict[str, Any]]]] = {"size_bucket": {}, "setup": {}, "metric": {}}
    for r in priced:
        setup = f"{r['file_hardware']} / {r['ranks'] or '-'} ranks / {r['nodes'] or 1} node(s)"
        groups["size_bucket"].setdefault(f"{r['metric']} {r['bucket']}", []).append(r)
        groups["setup"].setdefault(f"{r['metric']}: {setup}", []).append(r)
        groups["metric"].setdefault(r["metric"], []).append(r)
    summary = {
        kind: {
            key: {
                "rows": len(v),
                "median_obs_over_pred": _median([x["obs_over_pred"] for x in v]),
                "median_obs_over_bound": _median([x["obs_over_bound"] for x in v]),
                "median_obs_over_held_out": _median(
                    [x["obs_over_held_out"] for x in v if x.get("obs_over_held_out") is not None]
                ),
                "within_1_5x": within_share([x["obs_over_pred"] for x in v]),
                "max_obs_over_bound": max(x["obs_over_bound"] for x in v),
            }
            for key, v in sorted(g.items())
        }
        for kind, g in groups.items()
    }
    violations = [
        {k: r[k] for k in ("id", "hardware", "metric", "size_bytes", "observed", "bound", "in_switch_reduction")}
        for r in priced
        if r["beats_bound"]
    ]
    return {
        "rows": len(rows),
        "priced": len(priced),
        "kernel_rows_left_out": sum(left_out.values()),
        "kernel_rows_left_out_by_reason": left_out,
        "not_priced": [{"id": r["id"], "reason": r["reason"]} for r in rows if not r["bound"]],
        "violations": violations,
        "unexplained_violations": [v for v in violations if not v["in_switch_reduction"]],
        "summary": summary,
        "per_row": rows,
    }


def rows_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (runtime, hardware, metric): rows priced, median absolute percentage error, median
    observed/predicted and the share within 1.5x; and the rows not priced, counted by reason
    (the reason's text up to its first colon: the runs it names differ only in their numbers)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    reasons: dict[str, int] = {}
    for r in records:
        if r["predicted"] is None:
            key = str(r.get("reason") or "not priced")
            key = key.split(":")[0] if ":" in key else key
            reasons[key] = reasons.get(key, 0) + 1
            continue
        mode = f" / {r['mode']}" if r.get("mode") else ""
        groups.setdefault(f"{r['runtime']} / {r['hardware']} / {r['metric']}{mode}", []).append(r)
    out = {}
    for key, g in sorted(groups.items()):
        obs = np.array([x["observed"] for x in g], dtype=float)
        pred = np.array([x["predicted"] for x in g], dtype=float)
        ratio = obs / pred
        out[key] = {
            "rows": len(g),
            "medape": float(np.median(np.abs(pred - obs) / obs)),
            "median_obs_over_pred": float(np.median(ratio)),
            "within_1_5x": within_share(ratio),
        }
    return {"groups": out, "not_priced": dict(sorted(reasons.items(), key=lambda kv: -kv[1]))}


#: Why a serving run waited for the simulator (benchmarks._silicon): such rows are priced here.
_NEEDS_SIMULATOR = "needs the serving simulator"

#: How the engine's warning of a link latency left out of a plan's collectives begins
#: (rust/src/engine.rs): a run priced so is not fitted to.
OMITTED_LATENCY = "scale-out latency unknown"


def _disagg_shape(x: dict[str, str], dev: Any) -> tuple[dict[str, Any], int, Optional[str]]:
    """A disaggregated run's pools (workers, TP, EP, attention DP each), its concurrency (the
    source's silicon_concurrency) and why it cannot be replayed, if so: a blank worker count is a
    run whose shape is not stated (simulated as one worker a pool it made TPOT 1.7x too slow),
    never one worker. The KV link is the one ``simulate`` takes by default (the scale-up fabric
    where the two pools fit one scale-up domain, else the scale-out NIC); its latency is omitted
    where the catalog has none."""
    from ..catalog.benchmarks import silicon_concurrency
    from ..serving.result import pool_devices
    from ..serving.simulator import kv_link_default

    def num(k: str) -> int:
        return int(x[k]) if x[k].strip() else 1

    conc, why = silicon_concurrency(x)
    c = conc or 0
    blank = [f"{p}_num_workers" for p in ("prefill", "decode") if not x[f"{p}_num_workers"].strip()]
    if why is None and blank:
        why = f"disaggregated run whose worker counts are not stated ({' and '.join(blank)} blank)"
    elif why is None and num("prefill_pp_size") != num("decode_pp_size"):
        why = "prefill and decode pools of different pipeline depths: the simulator gives both pools one pp"
    shape: dict[str, Any] = {
        "prefill_instances": num("prefill_num_workers"), "decode_instances": num("decode_num_workers"),
        "prefill_tp": num("prefill_tp_size"), "decode_tp": num("decode_tp_size"),
        "prefill_ep": num("prefill_moe_ep_size"), "decode_ep": num("decode_moe_ep_size"),
        "prefill_attention_dp": num("prefill_attention_dp_size"),
        "decode_attention_dp": num("decode_attention_dp_size"), "router": "least_outstanding",
        "pp": num("prefill_pp_size"),
    }  # fmt: skip
    pools = [{k: shape[f"{r}_{k}"] for k in ("instances", "tp", "attention_dp")} | {"pp": shape["pp"]}
             for r in ("prefill", "decode")]  # fmt: skip
    _, bw, latency = kv_link_default(dev, pool_devices(pools))
    shape.update(kv_link_gbs=bw, kv_link_latency_us=latency or 0.0)
    return shape, c, why


def _whole_prompt_budget(sched: Mapping[str, Any], isl: int, decodes: int) -> Optional[int]:
    """The step budget a measured run of ``isl``-token prompts beside ``decodes`` running decodes
    had under scheduler ``sched`` (``serving.scheduler_defaults``): a runtime that prefills whole
    prompts ran it with a budget admitting one prompt beside them (below it a new prompt waits
    for every decode to end: TensorRT-LLM needs max_num_tokens >= the longest input without
    chunked prefill). None: its default serves."""
    if not sched.get("chunked_prefill", True) and isl + decodes > sched["max_num_batched_tokens"]:
        return isl + decodes
    return None


def serving_runs(
    path: str, catalog: Optional[Catalog] = None, limit: Optional[int] = None,
    step_overhead_us: Optional[float | Mapping[tuple[str, str], float]] = None,
    modes: tuple[str, ...] = ("agg", "disagg"),
    request_overhead_us: Optional[float] = None, max_concurrency: Optional[int] = None,
    handoff_us: Optional[float | Mapping[str, float]] = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """The closed-loop serving runs of a silicon_calibration-format file, each replayed through the
    serving simulator: ``concurrency`` clients of ``isl`` prompt and ``osl`` output tokens under
    the run's runtime (its scheduler defaults and shipped calibration), plan and weights;
    ``serving_run_requests_per_client`` measured requests a client after
    ``serving_run_warmup_per_client`` warm-up ones (the run's counts are not recorded:
    constants.csv says what is assumed). TTFT and TPOT are the measured requests' means. One
    record per metric row of the file, priced or with its reason; ``limit``: the first runs only;
    ``step_overhead_us``: every run's per-step overhead, or one per (runtime, device) (default:
    the shipped serving fits); ``request_overhead_us``: every run's front-end overhead (default:
    the shipped fits); ``modes``: agg and/or disagg runs; ``max_concurrency``: those runs only;
    ``handoff_us``: every disaggregated run's KV hand-off, or one per runtime (default: the
    shipped fit)."""
    from .._io import read_text
    from ..catalog.benchmarks import exclusions, import_file
    from ..errors import CatalogError, RidgelineError
    from ..models.config import Model
    from ..serving.scheduler import scheduler_defaults
    from ..serving.simulator import simulate
    from .decompose import _estimate_kwargs

    cat = catalog or default_catalog()
    text = read_text(path, what="rows file", error=CatalogError)
    rows = import_file(path, text, cat)
    # the disaggregated runs' worker shapes, by the file's line (the rows keep the aggregated plan)
    raw = {i: x for i, x in enumerate(csv.DictReader(io.StringIO(text)), start=2)}
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        runs.setdefault(r["id"].rsplit(":", 1)[0], []).append(r)
    excluded = exclusions()  # a metric of a run kept out with its reason (data/benchmarks/exclusions.csv)
    per_client = int(cat.constant("serving_run_requests_per_client"))
    warmup = int(cat.constant("serving_run_warmup_per_client"))
    out: list[dict[str, Any]] = []
    for n, (_, metric_rows) in enumerate(runs.items()):
        if limit is not None and n >= limit:
            break
        r = metric_rows[0]
        base = [{"id": x["id"], "hardware": x["hardware"] or x["file_hardware"], "runtime": x["runtime"],
                 "model": x["model"], "metric": x["metric"], "observed": float(x["value"]), "predicted": None,
                 "unit": x["unit"], "concurrency": x["batch"], "isl": x["prompt_tokens"], "osl": x["output_tokens"],
                 "mode": "disagg" if "mode disagg" in str(x["not_priced"]) else "agg"}
                for x in metric_rows]  # fmt: skip
        if base[0]["mode"] not in modes or (max_concurrency is not None and int(r["batch"] or 1) > max_concurrency):
            continue
        why = next((str(x["not_priced"]) for x in metric_rows
                    if x["not_priced"] and _NEEDS_SIMULATOR not in x["not_priced"]), None)  # fmt: skip
        kw: dict[str, Any] = {}
        shape: dict[str, Any] = {}
        c = int(r["batch"]) if r["batch"] is not None else 0  # a run without a concurrency is not priced
        if why is None:
            kw, _ = _estimate_kwargs(r, Model.from_config(r["model"]).max_model_len, cat)
            # an attention-DP run's row gives one rank's share of the clients: the run's own
            # concurrency is the source's
            shape = {"tp": kw["tp"], "ep": kw["ep"], "attention_dp": kw["attention_dp"], "pp": kw["pp"]}
            if kw["attention_dp"] > 1:
                from ..catalog.benchmarks import silicon_concurrency

                c = silicon_concurrency(raw[int(r["id"].split(":")[1])])[0] or 0
                for b in base:
                    b["concurrency"] = c
            if base[0]["mode"] == "disagg":
                shape, c, why = _disagg_shape(raw[int(r["id"].split(":")[1])], cat.get(r["hardware"]))
                shape["kv_handoff_us"] = (handoff_us.get(r["runtime"]) if isinstance(handoff_us, Mapping)
                                          else handoff_us)  # fmt: skip
                for b in base:
                    b["concurrency"] = c
        if why is None:
            isl, osl = int(r["prompt_tokens"]), int(r["output_tokens"])
            sched = scheduler_defaults(r["runtime"], cat.get(r["hardware"])) or {}
            budget = _whole_prompt_budget(sched, isl, c)
            step = (step_overhead_us.get((r["runtime"], r["hardware"])) if isinstance(step_overhead_us, Mapping)
                    else step_overhead_us)  # fmt: skip
            try:
                s = simulate(
                    r["model"], r["hardware"], concurrency=c, requests=(per_client + warmup) * c, prompt=isl,
                    output=osl, **shape, runtime=r["runtime"], dtype=kw["dtype"],
                    weight_dtype=kw["weight_dtype"], kv_dtype=kw["kv_dtype"], max_model_len=isl + osl,
                    keep_requests=True, catalog=cat, max_num_batched_tokens=budget, step_overhead_us=step,
                    request_overhead_us=request_overhead_us,
                )  # fmt: skip
            except RidgelineError as e:
                why = str(e)
            else:
                import polars as pl

                done = s.requests.filter((pl.col("id") >= warmup * c) & (pl.col("status") == "completed"))
                if done.height == 0:
                    why = f"no measured request completed in the simulation: {s.counts}"
                tpot = (done["end_s"] - done["first_token_s"]) / (done["output_tokens"] - 1).clip(lower_bound=1)
                got = {"ttft_ms": float(done["ttft_s"].mean() or 0) * 1e3, "tpot_ms": float(tpot.mean() or 0) * 1e3}
                # a plan priced with a term left out (a link latency the catalog lacks) is reported,
                # never fitted to: a fit must not absorb a missing term
                omitted = any(w.startswith(OMITTED_LATENCY) for w in s.warnings)
                for b in base:
                    if why is None and b["id"] not in excluded:
                        b.update(predicted=got[b["metric"]], calibration=s.calibration, omitted_term=omitted)
        for b in base:
            if why is not None or b["id"] in excluded:
                b["reason"] = why or f"excluded: {excluded[b['id']]}"
            out.append(b)
    return out


#: Why an offline max-throughput row waited for the simulator (benchmarks._trtllm_throughput).
_MAX_THROUGHPUT = "offline max throughput"


def max_throughput_rows(catalog: Optional[Catalog] = None, limit: Optional[int] = None) -> list[dict[str, Any]]:
    """The shipped offline max-throughput rows (trtllm-bench: every request of the dataset sent at
    once, the runtime batching them) replayed through the simulator: the dataset's request count
    (``trtllm_bench_requests``) all arriving at once, under the runtime's scheduler (a whole-prompt
    step budget raised to hold one prompt beside a full batch of decodes, as an engine built for
    the dataset does) and shipped calibration; predicted: output tokens per second of the run."""
    from ..catalog.benchmarks import shipped_rows, trtllm_bench_requests
    from ..errors import RidgelineError
    from ..models.config import Model
    from ..serving.scheduler import scheduler_defaults
    from ..serving.simulator import simulate
    from .decompose import _estimate_kwargs

    cat = catalog or default_catalog()
    counts = trtllm_bench_requests()
    out: list[dict[str, Any]] = []
    rows = [r for r in shipped_rows() if _MAX_THROUGHPUT in str(r["not_priced"])]
    for r in rows[:limit]:
        isl, osl = int(r["prompt_tokens"]), int(r["output_tokens"])
        rec = {"id": r["id"], "hardware": r["hardware"] or r["file_hardware"], "runtime": r["runtime"],
               "model": r["model"], "metric": r["metric"], "observed": float(r["value"]), "predicted": None,
               "unit": r["unit"], "mode": "max throughput"}  # fmt: skip
        n = counts.get((isl, osl))
        why = None
        if not r["model"]:
            why = next(iter(str(r["notes"]).split(";")), "no bundled model")
            why = f"model '{why.removeprefix('model ')}' has no bundled config"
        elif not r["hardware"]:
            why = f"hardware '{r['file_hardware']}' is not in the catalog"
        elif n is None:
            why = f"no request count for {isl}/{osl} in trtllm_bench_requests.csv"
        if why is None:
            kw, _ = _estimate_kwargs(r, Model.from_config(r["model"]).max_model_len, cat)
            sched = scheduler_defaults(r["runtime"], cat.get(r["hardware"])) or {}
            budget = _whole_prompt_budget(sched, isl, int(sched.get("max_num_seqs", 0)))
            try:
                s = simulate(r["model"], r["hardware"], concurrency=n, requests=n, prompt=isl, output=osl,
                             tp=kw["tp"], ep=kw["ep"], attention_dp=kw["attention_dp"], pp=kw["pp"],
                             runtime=r["runtime"], dtype=kw["dtype"],
                             weight_dtype=kw["weight_dtype"], kv_dtype=kw["kv_dtype"], max_model_len=isl + osl,
                             catalog=cat, max_num_batched_tokens=budget)  # fmt: skip
            except RidgelineError as e:
                why = str(e)
            else:
                rec.update(predicted=s.output_tok_s, calibration=s.calibration)
        if why is not None:
            rec["reason"] = why
        out.append(rec)
    return out


def serving_step_fits(path: str, catalog: Optional[Catalog] = None) -> list[dict[str, Any]]:
    """The simulator's per-step overhead per (runtime, device), fitted on the aggregated serving
    runs of a silicon_calibration-format file replayed through it (the rows of
    data/calibration/serving_fits.csv): each run is simulated at no step overhead and at
    ``fit_step_probe_us``; a run's TPOT is close to affine in the overhead (its slope: the steps
    a measured token waits for), so the overhead is the log least squares of TPOT0 + slope x t
    against the measured TPOT, t >= 0. Each device's fit is also applied to the other devices'
    runs of its runtime (``medape_transferred``: the held-out figure), and a runtime profile row
    (hardware ``*``) takes the devices' median."""
    from scipy.optimize import least_squares  # type: ignore[import-untyped]

    from .._data import data_hash
    from .._version import __version__
    from ..engine.structure import structure_version

    cat = catalog or default_catalog()
    probe = float(cat.constant("fit_step_probe_us"))
    at0 = serving_runs(path, cat, step_overhead_us=0.0, modes=("agg",), request_overhead_us=0.0)
    at1 = serving_runs(path, cat, step_overhead_us=probe, modes=("agg",), request_overhead_us=0.0)
    runs: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for a, b in zip(at0, at1):
        if a["metric"] != "tpot_ms" or a["predicted"] is None or b["predicted"] is None or a["omitted_term"]:
            continue
        slope = (b["predicted"] - a["predicted"]) / probe
        runs.setdefault((a["runtime"], a["hardware"]), []).append((a["observed"], a["predicted"], slope))

    def medape(rows: list[tuple[float, float, float]], t: float) -> float:
        return float(np.median([abs(p + k * t - o) / o for o, p, k in rows]))

    fits: dict[tuple[str, str], float] = {}
    rms: dict[tuple[str, str], float] = {}
    for key, rows in sorted(runs.items()):
        obs, p0, k = (np.array(col) for col in zip(*rows))

        def resid(x: np.ndarray, obs: np.ndarray = obs, p0: np.ndarray = p0, k: np.ndarray = k) -> np.ndarray:
            return np.asarray(np.log(obs / (p0 + k * x[0])))

        fit = least_squares(resid, [probe], bounds=([0.0], [np.inf]))
        fits[key] = round(float(fit.x[0]), 3)  # to the ns: a fit at its bound of 0 reads 0
        rms[key] = float(np.sqrt(np.mean(fit.fun**2)))
    request = _request_fits(path, cat, fits, probe)
    handoff = _handoff_fits(path, cat)
    # what the fit was made against: the engine's structure, the data, ridgeline's version
    stamp = {"structure_version": structure_version(cat), "data_hash": data_hash()[:16], "fitted_at": __version__}
    out = []
    for (rt, hw), t in fits.items():
        others = [(h, runs[(r, h)]) for (r, h) in fits if r == rt and h != hw]
        moved = [x for _, rows in others for x in rows]
        out.append({
            "runtime": rt, "hardware": hw, "t_step_us": t, "n_runs": len(runs[(rt, hw)]),
            "rms_log": float(f"{rms[(rt, hw)]:.6g}"), "medape": float(f"{medape(runs[(rt, hw)], t):.6g}"),
            "medape_transferred": float(f"{medape(moved, t):.6g}") if moved else None,
            "transferred_to": ",".join(h for h, _ in others) or None, **request.get((rt, hw), _NO_REQUEST_FIT),
            **_NO_HANDOFF_FIT, **stamp,
            "source": f"ridgeline calibrate --serving: {len(runs[(rt, hw)])} aggregated serving runs of {rt} on {hw} "
                      f"replayed through the simulator ({path.rsplit('/', 1)[-1]})",
        })  # fmt: skip
    for rt in sorted({k[0] for k in fits}):
        t = float(np.median([t for (r, _), t in fits.items() if r == rt]))
        mine = [x for (r, _), v in runs.items() if r == rt for x in v]
        out.append({"runtime": rt, "hardware": "*", "t_step_us": float(f"{t:.6g}"), "n_runs": len(mine),
                    "rms_log": None, "medape": float(f"{medape(mine, t):.6g}"), "medape_transferred": None,
                    "transferred_to": None, **request.get((rt, "*"), _NO_REQUEST_FIT),
                    **handoff.get(rt, _NO_HANDOFF_FIT), **stamp,
                    "source": f"ridgeline calibrate --serving: {rt}'s profile, the median of its devices' fits",
                    })  # fmt: skip
    return out


_NO_REQUEST_FIT = {"request_us": None, "request_runs": None, "ttft_medape": None, "ttft_medape_transferred": None}
_NO_HANDOFF_FIT = {"handoff_us": None, "handoff_runs": None, "handoff_ttft_medape": None}


def _handoff_fits(path: str, cat: Catalog) -> dict[str, dict[str, Any]]:
    """Per runtime, the KV hand-off of its disaggregated runs (the transfer engine's connection and
    the decode side's scheduling of an arriving request, beyond the link's bandwidth and latency):
    the lightly loaded runs (``fit_request_max_concurrency`` clients or fewer: above, the measured
    TTFT is the prefill pool's queue, 1.3-9.7 s at 64 clients where the replay waits 0.2 s, which
    a hand-off must not absorb) are replayed with none (at the shipped step overhead and front
    end), each run's TTFT is its replayed TTFT plus the hand-off, every request's first token
    waiting for it once, and the hand-off is the log least squares of that against the measured
    TTFT, >= 0; its MedAPE is of the runs replayed again at the fit."""
    from scipy.optimize import least_squares

    light = int(cat.constant("fit_request_max_concurrency"))
    at0 = serving_runs(path, cat, modes=("disagg",), handoff_us=0.0, max_concurrency=light)
    runs: dict[str, list[tuple[float, float]]] = {}
    for a in at0:
        if a["metric"] == "ttft_ms" and a["predicted"] is not None and not a["omitted_term"]:
            runs.setdefault(a["runtime"], []).append((a["observed"], a["predicted"]))
    fitted: dict[str, float] = {}
    for rt, rows in sorted(runs.items()):
        obs, p0 = (np.array(col) for col in zip(*rows))

        def resid(x: np.ndarray, obs: np.ndarray = obs, p0: np.ndarray = p0) -> np.ndarray:
            return np.asarray(np.log(obs / (p0 + x[0] / 1e3)))

        fitted[rt] = round(float(least_squares(resid, [1e5], bounds=([0.0], [np.inf])).x[0]), 1)
    # every runtime's runs replayed once again, each at its own runtime's fit
    again = [a for a in serving_runs(path, cat, modes=("disagg",), handoff_us=fitted, max_concurrency=light)
             if a["metric"] == "ttft_ms" and a["predicted"] is not None and not a["omitted_term"]]  # fmt: skip
    out = {}
    for rt, us in fitted.items():
        err = float(np.median([abs(a["predicted"] / a["observed"] - 1) for a in again if a["runtime"] == rt]))
        out[rt] = {"handoff_us": us, "handoff_runs": len(runs[rt]), "handoff_ttft_medape": float(f"{err:.6g}")}
    return out


def _request_fits(path: str, cat: Catalog, steps: Mapping[tuple[str, str], float],
                  probe: float) -> dict[tuple[str, str], dict[str, Any]]:  # fmt: skip
    """Each (runtime, device)'s front-end overhead per request (us), fitted at its step overhead
    ``steps`` on the aggregated runs of at most ``fit_request_max_concurrency`` clients, where a
    request's TTFT is mostly its own prefill: each run replayed at no overhead and at ``probe``
    (its TTFT is affine in the overhead), the overhead the log least squares of the measured TTFT,
    >= 0; with its TTFT MedAPE there, and on the runtime's other devices (``ttft_medape_transferred``).
    A runtime's profile (``*``) takes the devices' median."""
    from scipy.optimize import least_squares

    most = int(cat.constant("fit_request_max_concurrency"))
    kw: dict[str, Any] = {"step_overhead_us": steps, "modes": ("agg",), "max_concurrency": most}
    at0 = serving_runs(path, cat, request_overhead_us=0.0, **kw)
    at1 = serving_runs(path, cat, request_overhead_us=probe, **kw)
    runs: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for a, b in zip(at0, at1):
        if a["metric"] != "ttft_ms" or a["predicted"] is None or b["predicted"] is None or a["omitted_term"]:
            continue
        runs.setdefault((a["runtime"], a["hardware"]), []).append(
            (a["observed"], a["predicted"], (b["predicted"] - a["predicted"]) / (probe / 1e3))
        )

    def medape(rows: list[tuple[float, float, float]], us: float) -> float:
        return float(np.median([abs(p + k * us / 1e3 - o) / o for o, p, k in rows]))

    fits: dict[tuple[str, str], float] = {}
    for key, rows in sorted(runs.items()):
        obs, p0, k = (np.array(col) for col in zip(*rows))

        def resid(x: np.ndarray, obs: np.ndarray = obs, p0: np.ndarray = p0, k: np.ndarray = k) -> np.ndarray:
            return np.asarray(np.log(obs / (p0 + k * x[0] / 1e3)))

        fits[key] = round(float(least_squares(resid, [probe], bounds=([0.0], [np.inf])).x[0]), 1)
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for (rt, hw), us in fits.items():
        moved = [x for (r, h), rows in runs.items() if r == rt and h != hw for x in rows]
        out[(rt, hw)] = {"request_us": us, "request_runs": len(runs[(rt, hw)]),
                         "ttft_medape": float(f"{medape(runs[(rt, hw)], us):.6g}"),
                         "ttft_medape_transferred": float(f"{medape(moved, us):.6g}") if moved else None}  # fmt: skip
    for rt in sorted({r for r, _ in fits}):
        us = float(np.median([v for (r, _), v in fits.items() if r == rt]))
        mine = [x for (r, _), rows in runs.items() if r == rt for x in rows]
        out[(rt, "*")] = {"request_us": float(f"{us:.6g}"), "request_runs": len(mine),
                          "ttft_medape": float(f"{medape(mine, us):.6g}"), "ttft_medape_transferred": None}  # fmt: skip
    return out


def predict_shipped(rows: Sequence[Decomposed], catalog: Optional[Catalog] = None,
                    fits: Optional[Sequence[dict[str, Any]]] = None) -> list[dict[str, Any]]:  # fmt: skip
    """Each row predicted with the calibration an estimate would use (its device's row or its runtime's profile)."""
    out = []
    for d in rows:
        r = d.row
        label, f = lookup(r["hardware"], r["runtime"], catalog, fits)
        pred = float(Batch([d]).predict(params_of(f), formats_of(f))[0])
        out.append({"id": r["id"], "hardware": r["hardware"], "runtime": r["runtime"], "metric": r["metric"],
                    "observed": float(r["value"]), "predicted": pred, "unit": r["unit"],
                    "calibration": label})  # fmt: skip
    return out


PHASE_OF = {"decode_tok_s": "decode", "prefill_tok_s": "prefill", "ttft_ms": "prefill", "throughput_tok_s": "e2e",
            "tpot_ms": "decode"}  # fmt: skip


def _bound_explanation(r: dict[str, Any]) -> Optional[str]:
    """Why a row may beat the efficiency-1 prediction, where the structure knows a reason."""
    if _is_moe(r["model"]) and PHASE_OF[r["metric"]] == "decode" and int(r["batch"] or 1) > 1:
        return (
            "MoE decode at batch > 1: the row's router is more skewed than the fitted routing skew, "
            "so it reads fewer distinct experts than the bound assumes"
        )
    return None


def validation(catalog: Optional[Catalog] = None, fits: Optional[Sequence[dict[str, Any]]] = None) -> dict[str, Any]:
    """In-sample (with ``fits``, default the shipped calibration) and leave-one-device-out
    predictions of every priced model row."""
    cat = catalog or default_catalog()
    rows, refused = decompose_all(cat)
    rows = [d for d in rows if d.row["metric"] in MODEL_METRICS]
    by_rt: dict[str, list[Decomposed]] = {}
    for d in rows:
        by_rt.setdefault(d.row["runtime"], []).append(d)
    fits = shipped_fits() if fits is None else fits
    records = []
    # each device held out in turn: its runtime's profile refitted without it (the production
    # runtimes' profiles come from kernels, not these rows: in sample only)
    from ..engine.runtimes import KERNEL_RUNTIMES

    held = [(rt, dev, rs) for rt, rs in sorted(by_rt.items()) for dev in sorted({d.row["hardware"] for d in rs})]
    refit = [h for h in held if h[0] not in KERNEL_RUNTIMES]
    rests = [_profile_rows(rs, cat, _memtech(cat, dev), exclude=dev) for _, dev, rs in refit]
    outs = dict(zip([(rt, dev) for rt, dev, _ in refit], fit_all(rests, cat)))
    for rt, dev, rs in held:
        out = outs.get((rt, dev))
        own = [d for d in rs if d.row["hardware"] == dev]
        label, f = lookup(dev, rt, cat, fits)
        p_in = params_of(f)
        b = Batch(own)
        r_in = b.speed_ratio(p_in, formats_of(f))
        r_out = b.speed_ratio(out[0], out[1]) if out is not None else np.full(len(own), np.nan)
        # the bound: efficiency 1 under the routing the calibration found (uniform without MoE rows),
        # fitted attention kernels too
        at_bound = UNCALIBRATED.copy()
        at_bound[SKEW] = p_in[SKEW]
        pure = [decompose(d.row, cat, fitted_attention=False) if d.fixed_attention else d for d in own]
        bound = Batch(pure).speed_ratio(at_bound)
        for i, d in enumerate(own):
            r = d.row
            over = float(bound[i]) > BOUND_TOLERANCE
            records.append({
                "id": r["id"], "hardware": dev, "runtime": rt, "model": r["model"], "metric": r["metric"],
                "phase": PHASE_OF[r["metric"]], "moe": "moe" if _is_moe(r["model"]) else "dense",
                "context": _context_bucket(r), "observed": r["value"], "unit": r["unit"],
                "in_sample": float(r_in[i]), "lodo": float(r_out[i]), "vs_bound": float(bound[i]),
                "calibration": label, "beats_bound": over,
                "explanation": _bound_explanation(r) if over else None,
                "batch": int(r["batch"] or 1), "flags": r["flags"],
            })  # fmt: skip
    return {"rows": records, "refused": refused}


def _is_moe(model: str) -> bool:
    from ..models.config import Model

    return bool(Model.from_config(model).is_moe)


def _context_bucket(r: dict[str, Any]) -> str:
    ctx = int(r["depth"] or 0) + int(r["prompt_tokens"] or 0) + int(r["output_tokens"] or 0)
    return "<=2k" if ctx <= 2048 else ("2k-8k" if ctx <= 8192 else ">8k")


#: Kernel table families ridgeline prices (the rest are counted and said not priced).
_PRICED_FAMILIES = {"gemm", "attention", "comm"}


def kernel_table_report(root: str, catalog: Optional[Catalog] = None) -> dict[str, Any]:
    """Kernel tables in AIConfigurator's layout (``<system>/<family>/<framework>/<version>/*.parquet``;
    ``root`` a folder of them or one table inside one) priced by the shipped calibration an
    estimate of that device takes under the runtime the path names, as ``ridgeline calibrate
    --production`` reports its own: per device, table and dtype (GEMM), kernel (attention) or
    library and collective (comm), the rows, the median observed/predicted and the share within
    1.5x. Every row is counted: the ones not priced (a device the catalog does not name, a dtype
    or family ridgeline does not price, a cell that is not a number) with why."""
    from pathlib import Path

    from ..engine.fits import ATTENTION_PARAMS, attention_of
    from .kernel_fit import attention_batch, attention_time, gemm_batch, params
    from .kernels import attention_tables, gemm_tables, layout_of, table_base, table_files, table_height

    cat = catalog or default_catalog()
    base = Path(root)
    skipped: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []

    def priced(rec: dict[str, Any], ratio: Any) -> None:
        out.append({**rec, "priced": len(ratio), "median_obs_over_pred": float(np.median(ratio)),
                    "within_1_5x": within_share(ratio), "reason": None})  # fmt: skip

    def refused(rec: dict[str, Any], why: str) -> None:
        out.append({**rec, "priced": 0, "median_obs_over_pred": None, "within_1_5x": None, "reason": why})

    for t in gemm_tables(base, skipped=skipped):
        dev, fmt = cat.get(t["hardware"]), t["format"]
        label, f = lookup(dev.chip, t["runtime"], cat)
        rec = {"hardware": dev.name, "runtime": t["runtime"], "table": t["file"], "kernel": f"GEMM {fmt or 'bf16'}",
               "rows": len(t["m"]), "calibration": label}  # fmt: skip
        if f is None:
            refused(rec, f"no calibration of {t['runtime']} prices {dev.name}")
        elif fmt == "nvfp4" and not dev.tflops_fp4:
            refused(rec, f"{dev.name} has no fp4 tensor path in the catalog")
        else:
            own = formats_of(f).get(fmt) if fmt else None
            p = params(float(f["eta_mem"]), float(f["eta_compute"]), float(f["t_launch_us"]))
            priced(rec, t["latency_ms"] / gemm_batch(t, dev).predict(p, {fmt: own} if own else None))
    for t in attention_tables(base, every_kernel=True, skipped=skipped):
        dev = cat.get(t["hardware"])
        label, f = lookup(dev.chip, t["runtime"], cat)
        a = attention_of(f).get(t["phase"]) if f is not None else None
        rec = {"hardware": dev.name, "runtime": t["runtime"], "table": t["file"], "rows": t["rows"],
               "kernel": f"{t['phase']} attention ({t['kernel']})", "calibration": label}  # fmt: skip
        if a is None:
            refused(rec, f"no fitted {t['phase']} attention kernel of {t['runtime']} prices {dev.name}")
        elif t["rows"]:
            c, mem, items = attention_batch(t, dev)
            priced(rec, t["latency_ms"] * 1e-3 / attention_time([a[p] for p in ATTENTION_PARAMS], c, mem, items))
    files = table_files(base)
    if any(layout_of(f)[1] == "comm" for f in files):
        rows, left = kernel_comm_rows(str(base), cat)
        groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        for r in rows:
            groups.setdefault((r["hardware"], r["library"], r["op"]), []).append(r)
        for (hw, lib, op), g in sorted(groups.items()):
            links = cat.get(hw).links_source or "no links"
            rec = {"hardware": hw, "runtime": lib, "table": ", ".join(sorted({str(r["source"]) for r in g})),
                   "kernel": f"{op} (busBW)", "rows": len(g), "calibration": links}  # fmt: skip
            priced(rec, [r["obs_over_pred"] for r in g])
        skipped += [{"file": "comm tables", "rows": n, "reason": why} for why, n in sorted(left.items())]
    for table in files:
        family = layout_of(table)[1]
        if family not in _PRICED_FAMILIES:
            rel = table.relative_to(table_base(base).resolve()).as_posix()
            n = table_height(table, rel)
            skipped.append({"file": rel, "rows": n, "reason": f"{family} tables are not priced by ridgeline yet"})
    total = sum(r["rows"] for r in out) + sum(s["rows"] for s in skipped)
    return {"tables": out, "left_out": skipped, "rows": total, "priced": sum(r["priced"] for r in out)}
