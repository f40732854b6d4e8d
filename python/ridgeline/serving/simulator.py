"""Serving simulation: ``ridgeline.simulate(model, hardware, ...)`` runs one inference server
under a workload (spec 70) in the Rust event loop, each step priced by the engine, and returns a
``Simulation``: request counts, TTFT/TPOT/ITL/E2E summaries, throughput and goodput, and (when
asked) per-request records and a queue/KV time series as Polars frames.

The scheduler's semantics come from the runtime (data/calibration/runtime_schedulers.csv, each
row sourced from the runtime's code); any of them can be given instead."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

from .. import _checks, _core
from ..catalog.device import Device
from ..catalog.store import Catalog
from ..engine.estimate import prepare, pricing
from ..errors import PlanError
from ..sweeps.cluster import RunReport, by_name, check_backend, run_tasks
from .result import Simulation, _stats, pool_devices
from .scheduler import _SCHEDULERS, SCHEDULER_FIELDS, _scheduler_rows, scheduler_defaults
from .workload import length_text, parse_lengths, read_trace

if TYPE_CHECKING:
    from ..engine.plan import Plan


def _describe(workload: Mapping[str, Any]) -> str:
    a = workload["arrivals"]

    if a["kind"] == "trace":
        return f"trace of {len(a['rows']):,} requests"
    head = {
        "poisson": f"Poisson {a.get('rate', 0):g} req/s",
        "gamma": f"gamma {a.get('rate', 0):g} req/s (CV {a.get('cv', 0):g})",
        "closed": f"closed loop of {a.get('concurrency', 0)} clients"
        + (f" starting over {a['ramp_s']:g} s" if a.get("ramp_s") else ""),
    }[a["kind"]]
    shared = workload.get("prefixes")
    return (f"{head}, {workload['requests']:,} requests, prompt {length_text(workload['prompt'])}, "
            f"output {length_text(workload['output'])} tokens"
            + (f", prompts starting with one of {shared['count']} shared prefixes of {shared['tokens']} tokens"
               if shared else ""))  # fmt: skip


ROUTERS = ("round_robin", "least_outstanding", "least_kv", "prefix_affinity")


#: A pool's shape: its parallel degrees, each given for the whole cluster (``tp``) or, disaggregated,
#: for one pool (``prefill_tp``, ``decode_tp``).
SHAPE = ("tp", "ep", "attention_dp")


def kv_link_default(dev: Device, devices: int) -> tuple[str, Optional[float], Optional[float]]:
    """The link a disaggregated prompt's KV crosses by default, the fastest the two pools share:
    the scale-up fabric (NVLink, per direction: half the catalog's bidirectional figure) where
    their ``devices`` fit one scale-up domain (8 on an HGX board, 72 in an NVL72 rack), else the
    scale-out NIC. Returns its name, GB/s per rank and latency (us), None where the catalog has
    no figure."""
    if dev.scaleup_bw_gbs and dev.scaleup_domain and devices <= dev.scaleup_domain:
        if dev.scaleup_latency_us is not None:
            return "scale-up", dev.scaleup_bw_gbs / 2, dev.scaleup_latency_us
        # no catalog figure: a transfer between two ranks at zero bytes as NCCL measured it on
        # the fabric (the 2-rank all-gather's fitted floor and one hop, link_collectives.csv)
        pair = next((x for x in dev.links if x["library"] == "nccl" and x["op"] == "all_gather"
                     and int(x["ranks"]) == 2), None)  # fmt: skip
        lat = None if pair is None else float(pair["floor_us"]) + float(pair["latency_us"])
        return "scale-up-nccl", dev.scaleup_bw_gbs / 2, lat
    return "scale-out", dev.scaleout_bw_gbs, dev.scaleout_latency_us


def _cluster(dev: Device, sched: Mapping[str, Any], *, shape: Mapping[str, Any], instances: Any, router: Any,
             prefill_instances: Any, decode_instances: Any, kv_link_gbs: Any, kv_link_latency_us: Any,
             kv_handoff_us: Any = None) -> dict[str, Any]:  # fmt: skip
    """The core's cluster: one pool of ``instances`` (aggregated) or, when prefill or decode
    instances are given, a prefill pool and a decode pool with the KV link between them (default:
    ``kv_link_default``, named in the cluster's ``kv_fabric``, which the core is not sent).
    ``shape`` holds each of ``SHAPE`` and its ``prefill_`` and ``decode_`` forms (None: the
    cluster's)."""
    if router not in ROUTERS:
        raise PlanError(f"router: must be one of {', '.join(ROUTERS)}, got {router!r}")
    base = {k: _checks.whole(k, shape[k], 1) for k in (*SHAPE, "pp")}
    disagg = prefill_instances is not None or decode_instances is not None
    if not disagg:
        for k, v in (*((f"{r}_{k}", shape[f"{r}_{k}"]) for r in ("prefill", "decode") for k in SHAPE),
                     ("kv_link_gbs", kv_link_gbs), ("kv_link_latency_us", kv_link_latency_us),
                     ("kv_handoff_us", kv_handoff_us)):  # fmt: skip
            if v is not None:
                raise PlanError(f"{k}: only with prefill_instances and decode_instances (disaggregated serving)")
        n = _checks.whole("instances", instances, 1)
        return {"pools": [{"instances": n, **base, "scheduler": dict(sched)}], "router": router}
    if instances != 1:
        raise PlanError("instances: give prefill_instances and decode_instances instead (disaggregated serving)")
    if prefill_instances is None or decode_instances is None:
        raise PlanError("prefill_instances and decode_instances: disaggregated serving needs both")
    pools = [
        {"instances": _checks.whole(f"{r}_instances", n, 1), "pp": base["pp"],
         **{k: base[k] if shape[f"{r}_{k}"] is None else _checks.whole(f"{r}_{k}", shape[f"{r}_{k}"], 1)
            for k in SHAPE},
         "scheduler": dict(sched)}
        for r, n in (("prefill", prefill_instances), ("decode", decode_instances))
    ]  # fmt: skip
    devices = pool_devices(pools)
    fabric, bw0, lat0 = kv_link_default(dev, devices)
    if kv_link_latency_us is not None and fabric == "scale-up-nccl":
        fabric = "scale-up"  # the latency given, not the measured collective's
    bw = bw0 if kv_link_gbs is None else _checks.number("kv_link_gbs", kv_link_gbs, positive=True)
    lat = lat0 if kv_link_latency_us is None else _checks.number("kv_link_latency_us", kv_link_latency_us)
    if bw is None or lat is None:
        lacking = " and ".join(w for w, v in (("bandwidth", bw), ("latency", lat)) if v is None)
        name = "kv_link_gbs" if bw is None else "kv_link_latency_us"
        where = (f"the two pools' {devices} devices fit one scale-up domain of {dev.scaleup_domain}"
                 if fabric.startswith("scale-up") else "the two pools do not fit one scale-up domain")  # fmt: skip
        raise PlanError(f"{name}: {dev.name} has no {fabric} {lacking} in the catalog (the link a prompt's KV crosses "
                        f"to a decode instance: {where}); give it: --kv-link-gbs and --kv-link-latency-us (CLI), "
                        "kv_link_gbs= and kv_link_latency_us= (Python)")  # fmt: skip
    link = {"bw_gbs": float(bw), "latency_us": float(lat), "handoff_us": float(kv_handoff_us or 0.0)}
    return {"pools": pools, "router": router, "kv_link": link,
            "kv_fabric": "given" if kv_link_gbs is not None else fabric}  # fmt: skip


#: What a cluster says of itself that the core is not sent: which link its KV crosses
#: (``kv_link_default``) and what its hand-off rests on (``_handoff``).
_LABELS = ("kv_fabric", "kv_handoff_basis")

_FABRIC_TEXT = {"scale-up": "the scale-up link (NVLink),", "scale-out": "the scale-out NIC,", "given": "a link of",
                "scale-up-nccl": "the scale-up link (NVLink; its latency a 2-rank NCCL all-gather's at zero bytes, "
                "link_collectives.csv),"}  # fmt: skip


def _pool_text(p: Mapping[str, Any]) -> str:
    """``2 x TP 4 EP 8 x attention DP 2``: a pool's instances and each one's parallel degrees."""
    return (f"{p['instances']} x TP {p['tp']}" + (f" EP {p['ep']}" if p["ep"] > 1 else "")
            + (f" x attention DP {p['attention_dp']}" if p.get("attention_dp", 1) > 1 else "")
            + (f" x PP {p['pp']}" if p.get("pp", 1) > 1 else ""))  # fmt: skip


def _cluster_labels(c: Mapping[str, Any]) -> dict[str, Any]:
    pools = c["pools"]
    shape = [_pool_text(p) for p in pools]
    if len(pools) == 1:
        text = shape[0] if pools[0]["instances"] > 1 else shape[0].split(" x ", 1)[1]
        if pools[0]["instances"] > 1:
            text += f", {c['router'].replace('_', ' ')} routing"
    else:
        link = c["kv_link"]
        text = (f"disaggregated: prefill {shape[0]}, decode {shape[1]}, {c['router'].replace('_', ' ')} routing, "
                f"KV over {_FABRIC_TEXT[c['kv_fabric']]} {link['bw_gbs']:g} GB/s + {link['latency_us']:g} us"
                + (f" + a {link['handoff_us'] / 1e3:.3g} ms hand-off" if link.get("handoff_us") else ""))  # fmt: skip
    return {"pools": [{k: p[k] for k in ("instances", *SHAPE, "pp")} for p in pools], "router": c["router"],
            "kv_link": c.get("kv_link"), **{k: c.get(k) for k in _LABELS}, "describe": text}  # fmt: skip


#: The burstiness (coefficient of variation of the gaps between arrivals) a gamma arrival process
#: takes: an input bound, not a model constant. Its shape 1/cv^2 must be a number the sampler draws
#: from: at cv 1e-320 it is infinite (the run never ends), at 1e308 it is 0 (the sampler fails).
#: Within [1e-3, 1e3] the gaps run from regular to within 0.1% to a burst of near-zero gaps.
BURSTINESS_RANGE = (1e-3, 1e3)


def simulate(
    model: Any, hardware: Any, *, plan: Optional[Plan] = None, rate: Optional[float] = None, burstiness: float = 1.0,
    concurrency: Optional[int] = None, ramp_s: float = 0.0, trace: Any = None, requests: Optional[int] = None,
    prompt: Any = 1024, output: Any = 256, declare_output: bool = True, prefix_groups: Optional[int] = None,
    prefix_tokens: Optional[int] = None, seed: int = 0, tp: int = 1, ep: int = 1, attention_dp: int = 1,
    instances: int = 1, router: str = "round_robin", prefill_instances: Optional[int] = None,
    decode_instances: Optional[int] = None, prefill_tp: Optional[int] = None, decode_tp: Optional[int] = None,
    prefill_ep: Optional[int] = None, decode_ep: Optional[int] = None, prefill_attention_dp: Optional[int] = None,
    decode_attention_dp: Optional[int] = None, kv_link_gbs: Optional[float] = None,
    kv_link_latency_us: Optional[float] = None, kv_handoff_us: Optional[float] = None,
    runtime: Optional[str] = None, dtype: str = "bf16", weight_dtype: Optional[str] = None,
    kv_dtype: Optional[str] = None, max_model_len: Optional[int] = None, kv_blocks: Optional[int] = None,
    slo_ttft_ms: Optional[float] = None, slo_tpot_ms: Optional[float] = None, horizon_s: Optional[float] = None,
    keep_requests: bool = False, sample_s: Optional[float] = None, step_overhead_us: Optional[float] = None,
    request_overhead_us: Optional[float] = None, progress: Optional[Callable[[int, int], Any]] = None,
    calibrated: bool = True, catalog: Optional[Catalog] = None, price_per_hour: Optional[float] = None,
    amortise_years: Optional[float] = None, price_tier: Optional[str] = None, pp: int = 1,
    speculative: Optional[str] = None, draft_tokens: Optional[int] = None, acceptance: Optional[str] = None,
    **scheduler: Any,
) -> Simulation:  # fmt: skip
    """Simulates one serving instance under a workload.

    Args:
        model, hardware, tp, ep, attention_dp, pp, runtime, dtype, weight_dtype, kv_dtype, speculative,
            draft_tokens, acceptance, calibrated, catalog, price_per_hour, price_tier, amortise_years: as ``estimate``
            (the fields of ``Plan``; a speculating decode keeps drafts drawn per step from its curve); the
            runtime also gives the scheduler's defaults. An instance is ``attention_dp`` ranks of
            ``tp`` devices stepping together over their experts, each rank with its own scheduler
            and KV; ``pp`` stages run as vLLM v0's virtual engines (docs/serving.md).
        plan: those settings, ``prompt`` and ``output`` as one ``Plan`` instead (a keyword beside
            it, set to other than its default, must agree); a plan that sets what the simulator
            decides itself (batch, chunk, dp, ...) is refused.
        instances: identical instances (each ``tp`` devices) behind one router.
        router: round_robin, least_outstanding (fewest requests waiting or running) or least_kv
            (smallest share of KV blocks in use).
        prefill_instances, decode_instances: prefill/decode disaggregation: a prefill pool and a
            decode pool (``prefill_tp``, ``decode_tp``, default ``tp``; ``prefill_ep``, ``decode_ep``,
            default ``ep``; ``prefill_attention_dp``, ``decode_attention_dp``, default
            ``attention_dp``); after its prompt a request's
            KV moves to a decode instance over ``kv_link_gbs`` per rank plus ``kv_link_latency_us``
            (default: the device's scale-out link in the catalog) plus ``kv_handoff_us``, the
            transfer engine's hand-off (default: the runtime's fit on its disaggregated serving
            runs, ``serving_fits.csv``; none where it has none, said in the note). The first token
            reaches the client from the decode instance: TTFT counts the prefill, the transfer and
            the hand-off; TPOT the decode instance's steps.
        rate: open-loop arrivals per second (Poisson; gamma gaps with ``burstiness`` != 1, the
            coefficient of variation of the gaps).
        concurrency: closed loop instead: this many clients, each sending its next request when
            its last one ends; they start evenly over ``ramp_s`` seconds (0: all at once).
        trace: a CSV or JSONL file of ``arrival_s, prompt_tokens, output_tokens[, max_tokens]``.
        requests: requests to send (default 1,000; a trace: its rows).
        prompt, output: lengths: a whole number, ``"uniform:LO:HI"``, ``"normal:MEAN:STD[:LO:HI]"``
            or ``"lognormal:MEAN:SIGMA[:LO:HI]"``.
        declare_output: each request declares its output length as max_tokens (benchmark clients).
        prefix_groups, prefix_tokens: each request starts with one of ``prefix_groups`` shared
            prefixes (drawn uniformly) of ``prefix_tokens`` tokens (a system prompt or history),
            which the runtime's prefix cache may hold (``prefix_caching``).
        seed: the one generator's seed: a seed reproduces a run bit for bit.
        max_model_len: longest sequence (default: the model's).
        kv_blocks: the instance's KV blocks (default: from the memory the runtime leaves).
        slo_ttft_ms, slo_tpot_ms: service-level objectives for goodput.
        horizon_s: stop the clock here (requests in flight are counted as such).
        keep_requests: return per-request records (``Simulation.requests``, a Polars frame).
        sample_s: interval of the queue and KV time series (``Simulation.series``).
        step_overhead_us: each step's host overhead (default: the calibration's t_step, the one
            ``estimate`` takes; a production runtime's is fitted by replaying its serving runs,
            ``serving_fits.csv``).
        request_overhead_us: each request's front-end time before it reaches an instance's queue
            (parsing, tokenising, routing; default: the calibration's, the one ``estimate`` adds to
            TTFT; a production runtime's is fitted on its lightly loaded replayed serving runs).
        progress: called as ``progress(ended, total)`` each hundredth of the requests.
        **scheduler: any of ``SCHEDULER_FIELDS`` (max_num_batched_tokens, max_num_seqs, block_size,
            chunked_prefill, mixed, reserve_full, memory_fraction, fraction_of_free) over the
            runtime's defaults.

    >>> s = simulate("meta-llama/Llama-3.1-8B", "H100_SXM", concurrency=4, requests=8, prompt=512, output=64)
    >>> s.counts["completed"]
    8
    """
    if plan is not None:
        args = {k: v for k, v in locals().items() if k not in ("plan", "scheduler", "model", "hardware")}
        from ..engine.plan import SIMULATE, merged

        args.update(merged(plan, {k: args[k] for k in SIMULATE}, "simulate", SIMULATE))
        return simulate(model, hardware, **args, **scheduler)
    _no_unknown(scheduler)
    # a calibrated run takes the step overhead fitted on replayed serving runs where there is one
    p = prepare(model, hardware, catalog, runtime=runtime, dtype=dtype, weight_dtype=weight_dtype,
                 kv_dtype=kv_dtype, calibrated=calibrated, speculative=speculative, draft_tokens=draft_tokens,
                 acceptance=acceptance, t_step_us=None if step_overhead_us is None
                 else _checks.number("step_overhead_us", step_overhead_us),
                 t_request_us=None if request_overhead_us is None else _checks.number("request_overhead_us",
                                                                                     request_overhead_us))  # fmt: skip
    p, price = pricing(p, price_per_hour, amortise_years, catalog, price_tier)
    runtime_name = p.plan_labels["runtime"]
    sched = _scheduler(runtime_name, p.dev, scheduler, catalog)
    mml = p.m.max_model_len if max_model_len is None else _checks.whole("max_model_len", max_model_len, 1)
    work = _work(rate, burstiness, concurrency, ramp_s, trace, requests, prompt, output, mml, declare_output, seed,
                 prefix_groups, prefix_tokens)  # fmt: skip
    slo = {"ttft": slo_ttft_ms, "tpot": slo_tpot_ms}
    opts = _options(slo_ttft_ms, slo_tpot_ms, horizon_s, keep_requests, sample_s)
    core_sched = {**{k: sched[k] for k in SCHEDULER_FIELDS}, "max_model_len": mml}
    if kv_blocks is not None:
        core_sched["kv_blocks"] = _checks.whole("kv_blocks", kv_blocks, 1)
    disagg = prefill_instances is not None or decode_instances is not None
    handoff = _handoff(kv_handoff_us, p.held_runtime, p.dev.chip) if disagg else None
    given = locals()
    shape = {k: given[k] for k in ("pp", *SHAPE, *(f"{r}_{k}" for r in ("prefill", "decode") for k in SHAPE))}
    cluster = _cluster(p.dev, core_sched, shape=shape, instances=instances, router=router,
                       prefill_instances=prefill_instances, decode_instances=decode_instances, kv_link_gbs=kv_link_gbs,
                       kv_link_latency_us=kv_link_latency_us,
                       kv_handoff_us=kv_handoff_us if handoff is None else handoff[0])  # fmt: skip
    if handoff is not None:
        p, cluster["kv_handoff_basis"] = p._replace(note=f"{p.note}; {handoff[1]}"), handoff[2]
    # the front end the plan's calibration (or the caller) gives, as estimate's TTFT takes it
    cluster["request_overhead_s"] = p.request_s
    core = {k: v for k, v in cluster.items() if k not in _LABELS}
    _callable_or_none(progress)
    r = _core.simulate_prepared(p.core, json.dumps(core), json.dumps(work), json.dumps(opts), progress)
    return _simulation(p, r, runtime_name, sched, mml, work, slo, cluster, _frames(r, keep_requests, sample_s), price)


def _work(
    rate: Optional[float], burstiness: float, concurrency: Optional[int], ramp_s: float, trace: Any,
    requests: Optional[int], prompt: Any, output: Any, mml: int, declare_output: bool, seed: int,
    prefix_groups: Optional[int], prefix_tokens: Optional[int],
) -> dict[str, Any]:  # fmt: skip
    """The workload the core draws: arrivals, request count, lengths and shared prefixes, each checked."""
    arrivals = _arrivals(rate, burstiness, concurrency, ramp_s, trace)
    n = None if requests is None else _checks.whole("requests", requests, 1)
    if n is None and trace is None:
        n = 1000
    if arrivals["kind"] in ("poisson", "gamma") and n is not None:
        _checks.rate(arrivals["rate"], n)
    work = {
        "arrivals": arrivals,
        "requests": n if n is not None else len(arrivals["rows"]),
        "prompt": parse_lengths("prompt", prompt, mml),
        "output": parse_lengths("output", output, mml),
        "declare_output": _checks.flag("declare_output", declare_output),
        "seed": _checks.whole("seed", seed, 0),
    }
    if (prefix_groups is None) != (prefix_tokens is None):
        raise PlanError("prefix_groups and prefix_tokens: give both (shared prefixes) or neither")
    if prefix_groups is not None:
        if trace is not None:
            raise PlanError("prefix_groups: a trace gives its own prefix_id and prefix_tokens columns")
        work["prefixes"] = {"count": _checks.whole("prefix_groups", prefix_groups, 1),
                            "tokens": _checks.whole("prefix_tokens", prefix_tokens, 1)}  # fmt: skip
    return work


def _simulation(
    p: Any, r: Mapping[str, Any], runtime_name: Optional[str],
    sched: Mapping[str, Any], mml: int, work: dict[str, Any], slo: Mapping[str, Any], cluster: Mapping[str, Any],
    frames: tuple[Any, Any, Any], price: Optional[float],
) -> Simulation:  # fmt: skip
    """The core's result of a run as a ``Simulation``, with the labels of the prepared plan ``p``."""
    itl_df, requests_df, series_df = frames
    work["describe"] = _describe(work)
    if work["arrivals"]["kind"] == "trace":
        # the result keeps the trace's size, not its rows
        work["arrivals"] = {"kind": "trace", "rows": len(work["arrivals"]["rows"])}
    warnings = (*p.warnings, *r["warnings"])
    return Simulation(
        model=p.model, hardware=p.dev.name, runtime=runtime_name, calibration=p.label, basis_from=p.basis_from,
        calibration_note=p.note,
        runtime_note=p.runtime_note, plan={**{k: cluster["pools"][0][k] for k in SHAPE},
                                           "dtype": p.plan_tail["dtype"], "weights": p.plan_labels["weights"],
                                           "speculation": p.plan_labels.get("speculation")},
        scheduler={**sched, "max_model_len": mml}, workload=work, counts=dict(r["counts"]),
        ttft_s=_stats(r["ttft"]), tpot_s=_stats(r["tpot"]), itl_s=_stats(r["itl"]), e2e_s=_stats(r["e2e"]),
        duration_s=float(r["duration_s"]), output_tokens=int(r["output_tokens"]), prompt_tokens=int(r["prompt_tokens"]),
        steps=int(r["steps"]), preemptions=int(r["preemptions"]), good_requests=int(r["good_requests"]),
        kv_blocks=tuple(int(b) for b in r["kv_blocks"]), max_model_len=mml, max_running=int(r["max_running"]),
        slo=slo, cluster=_cluster_labels(cluster), transfers=int(r["transfers"]), transfer_s=float(r["transfer_s"]),
        cached_tokens=int(r["cached_tokens"]),
        warnings=tuple(dict.fromkeys(warnings)), requests=requests_df, series=series_df, itl_hist=itl_df,
        offers=p.offers, price_per_hour=price, amortise_years=p.amortise_years, price_tier=p.price_tier,
        energy_run=r["energy"] if isinstance(r["energy"], str)
        else {**r["energy"], "duration_s": float(r["duration_s"])},
    )  # fmt: skip


def _handoff(given: Any, held_runtime: Optional[str], chip: str) -> tuple[float, str, str]:
    """A disaggregated transfer's hand-off (us), what it rests on (said in the note) and its basis
    (``given``; ``fitted``: the runtime's fit on its disaggregated serving runs, where the plan is
    calibrated; ``none``: no hand-off counted)."""
    from ..engine.fits import serving_row

    if given is not None:
        return _checks.number("kv_handoff_us", given), "KV hand-off given", "given"
    found = serving_row(held_runtime, chip, "handoff_us") if held_runtime else None
    if found is None:
        why = "the plan is the efficiency-1 bound" if held_runtime is None else (
            f"no disaggregated run of {held_runtime} was fitted (serving_fits.csv)")  # fmt: skip
        return 0.0, f"no KV hand-off counted: {why}; kv_handoff_us= (--kv-handoff-us) gives one", "none"
    row, where = found
    err = float(row["handoff_ttft_medape"])
    note = (f"a KV hand-off of {float(row['handoff_us']) / 1e3:.3g} ms a transfer, fitted on {where} "
            f"{row['handoff_runs']} disaggregated runs (TTFT MedAPE {err:.1%})")  # fmt: skip
    return float(row["handoff_us"]), note, "fitted"


def _scheduler(
    runtime_name: Optional[str], dev: Device, scheduler: Mapping[str, Any], catalog: Optional[Catalog]
) -> dict[str, Any]:
    """The runtime's scheduler settings on ``dev`` with the ones given (``scheduler``) over them,
    each checked; a runtime without defaults takes the given ones, which must then name the token
    budget, the running requests and the block size."""
    sched = scheduler_defaults(runtime_name, dev)
    given = {k: v for k, v in scheduler.items() if v is not None}
    if sched is None:
        core = ("max_num_batched_tokens", "max_num_seqs", "block_size")
        lacking = [k for k in core if k not in given]
        if lacking:
            have = sorted({r["runtime"] for r in _scheduler_rows()})
            raise PlanError(
                f"runtime: {runtime_name or 'none'} has no scheduler defaults in {_SCHEDULERS} (it has "
                f"{', '.join(have)}); name one of those with runtime=, or give {', '.join(lacking)}"
            )
        from ..catalog.store import default_catalog

        frac = (catalog or default_catalog()).constant("gpu_memory_utilization")
        # vLLM's scheduling, with no prefix cache unless the caller turns one on
        sched = {"chunked_prefill": True, "mixed": True, "reserve_full": False, "memory_fraction": frac,
                 "fraction_of_free": False, "prefix_caching": False,
                 "source": "given by the caller (the runtime has no defaults)"}  # fmt: skip
    for k, v in given.items():
        kind = SCHEDULER_FIELDS[k]
        if kind is bool:
            sched[k] = _checks.flag(k, v)
        elif kind is int:
            sched[k] = _checks.whole(k, v, 1)
        else:
            sched[k] = _checks.number(k, v, positive=True)
    if given:
        sched["source"] = f"{sched['source']}; given: {', '.join(sorted(given))}"
    return sched


def _arrivals(rate: Any, burstiness: Any, concurrency: Any, ramp_s: Any, trace: Any) -> dict[str, Any]:
    """The arrival process: exactly one of an open loop (Poisson, or gamma gaps with ``burstiness``
    != 1), a closed loop of ``concurrency`` clients, or a trace's rows."""
    modes = [x for x in (("rate", rate), ("concurrency", concurrency), ("trace", trace)) if x[1] is not None]
    if ramp_s and concurrency is None:
        raise PlanError("ramp_s: only with concurrency (a closed loop's clients start over it)")
    if len(modes) != 1:
        raise PlanError("workload: give exactly one of rate (open loop), concurrency (closed loop) or trace, "
                        f"got {', '.join(m for m, _ in modes) or 'none'}")  # fmt: skip
    if trace is not None:
        arrivals: dict[str, Any] = {"kind": "trace", "rows": read_trace(trace)}
    elif concurrency is not None:
        arrivals = {"kind": "closed", "concurrency": _checks.whole("concurrency", concurrency, 1),
                    "ramp_s": _checks.number("ramp_s", ramp_s)}  # fmt: skip
    else:
        per_s = _checks.number("rate", rate, positive=True)
        cv = _checks.number("burstiness", burstiness, positive=True)
        if not BURSTINESS_RANGE[0] <= cv <= BURSTINESS_RANGE[1]:
            lo, hi = BURSTINESS_RANGE
            raise PlanError(
                f"burstiness: must be in [{lo:g}, {hi:g}] (the gaps' coefficient of variation: 1 Poisson, < 1 more "
                f"regular, > 1 burstier), got {cv:g}"
            )
        arrivals = {"kind": "poisson", "rate": per_s} if cv == 1.0 else {"kind": "gamma", "rate": per_s, "cv": cv}
    return arrivals


def _no_unknown(scheduler: Mapping[str, Any]) -> None:
    unknown = sorted(set(scheduler) - set(SCHEDULER_FIELDS))
    if unknown:
        raise PlanError(f"{unknown[0]}: not a simulate argument (scheduler fields: {', '.join(SCHEDULER_FIELDS)})")


def _callable_or_none(progress: Any) -> None:
    if progress is not None and not callable(progress):
        raise PlanError(f"progress: expected a callable taking (ended, total), got {progress!r}")


def _options(slo_ttft_ms: Any, slo_tpot_ms: Any, horizon_s: Any, keep_requests: Any, sample_s: Any) -> dict[str, Any]:
    """The run's options as the core takes them (objectives in seconds), each checked."""
    return {
        "slo_ttft_s": None if slo_ttft_ms is None else _checks.number("slo_ttft_ms", slo_ttft_ms, positive=True) / 1e3,
        "slo_tpot_s": None if slo_tpot_ms is None else _checks.number("slo_tpot_ms", slo_tpot_ms, positive=True) / 1e3,
        "horizon_s": None if horizon_s is None else _checks.number("horizon_s", horizon_s, positive=True),
        "keep_requests": _checks.flag("keep_requests", keep_requests),
        "sample_s": None if sample_s is None else _checks.number("sample_s", sample_s, positive=True),
    }


def _frames(r: Mapping[str, Any], keep_requests: bool, sample_s: Optional[float]) -> tuple[Any, Any, Any]:
    """The core's result as Polars frames: the ITL histogram, and where asked the per-request
    records (with TTFT and E2E) and the queue/KV series."""
    import polars as pl

    itl_df = pl.DataFrame(dict(r["itl_hist"]))
    requests_df = series_df = None
    if keep_requests or sample_s is not None:
        if keep_requests:
            requests_df = (
                pl.DataFrame(dict(r["requests"]))
                .with_columns(
                    ttft_s=pl.col("first_token_s") - pl.col("arrival_s"), e2e_s=pl.col("end_s") - pl.col("arrival_s")
                )
                .sort("id")
            )
        if sample_s is not None:
            series_df = pl.DataFrame(dict(r["series"]))
    return itl_df, requests_df, series_df


def _scenario_task(model: Any, hardware: Any, kw: Mapping[str, Any]) -> Simulation:
    """One simulation of a grid: a task of the backend (``cluster``), on a worker or here."""
    return simulate(model, hardware, **kw)


def simulate_grid(
    model: Any,
    hardware: Any,
    scenarios: Sequence[Mapping[str, Any]],
    *,
    backend: str = "local",
    ray_address: Optional[str] = None,
    progress: Optional[Callable[[int, int], Any]] = None,
    on_report: Optional[Callable[[RunReport], Any]] = None,
    **common: Any,
) -> list[Simulation]:
    """One simulation per scenario (each a mapping of ``simulate`` arguments over ``common``, and
    may name its own ``model`` or ``hardware``), in the scenarios' order: here, or each as a task
    on a Ray cluster (``backend="ray"``; ``ray_address`` as ``sweep``). A run is the same wherever
    it runs: each has its own seeded generator. ``progress`` is called with (scenarios done,
    scenarios) as each ends, ``on_report`` with where the runs ran (``cluster.RunReport``) once
    all have.

    >>> sims = simulate_grid("meta-llama/Llama-3.1-8B", "H100_SXM", [{"rate": 2}, {"rate": 8}], requests=50,
    ...                      prompt=512, output=64)
    >>> [s.counts["completed"] for s in sims]
    [50, 50]
    """
    if isinstance(scenarios, (str, bytes, Mapping)) or not isinstance(scenarios, Sequence):
        raise PlanError(f"scenarios: a list of mappings of simulate arguments, got {type(scenarios).__name__}")
    if not scenarios:
        raise PlanError("scenarios: none given")
    bad = [sc for sc in scenarios if not isinstance(sc, Mapping)]
    if bad:
        raise PlanError(f"scenarios: each is a mapping of simulate arguments, got {bad[0]!r}")
    if check_backend(backend, ray_address) == "ray":
        for k, what in (("catalog", "a catalog"), ("progress", "a per-request progress callback")):
            if common.get(k) is not None or any(sc.get(k) is not None for sc in scenarios):
                raise PlanError(f"{k}: {what} does not travel to Ray workers; leave it unset with backend='ray'")
    for sc in (common, {"model": model, "hardware": hardware}, *scenarios):
        for k in ("model", "hardware"):
            by_name(k, sc.get(k), backend)
    # a scenario may name its own model or device (a grid across them)
    plan = ("model", "hardware")
    tasks = [(sc.get("model", model), sc.get("hardware", hardware),
              {k: v for k, v in {**common, **sc}.items() if k not in plan}) for sc in scenarios]  # fmt: skip
    missing = [k for k, v in zip(plan, (model, hardware)) if v is None and any(k not in sc for sc in scenarios)]
    if missing:
        raise PlanError(f"{missing[0]}: needed, as an argument or in every scenario")
    sims, report = run_tasks(_scenario_task, tasks, backend=backend, ray_address=ray_address, progress=progress)
    if on_report is not None:
        on_report(report)
    return sims
