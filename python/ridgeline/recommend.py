"""``ridgeline recommend``: the cheapest plans that serve a workload within its SLOs (spec 70, 60).

The search runs over devices x runtime x weight format x tensor-parallel degree x expert-parallel
degree (MoE models: 1 and the TP degree) and, asked, prefill/decode disaggregation. Each candidate
is pruned by the static engine first (the model must fit, and a lone request must meet the TTFT
and TPOT objectives), priced at the device's cheapest published offer (``Catalog.offers``:
on-demand, or a purchase price amortised over the years given; a device without one cannot be
ranked by cost and is listed as refused), then sized by the simulator: the highest Poisson rate
one instance serves with ``percentile`` % of requests within the SLOs (``serving.max_rate``;
a run that rejects, length-caps or leaves a request unfinished never meets them)
gives the replicas the target rate needs, and a simulation of that many replicas behind a
least-outstanding router at the target rate confirms it (a replica is added while it does not).
For a closed loop of ``concurrency`` clients the fewest replicas whose simulation meets the SLOs
are found by doubling, then bisecting.
Disaggregated, the same instances split into a prefill and a decode pool (every split of two to
that many instances, the KV crossing the device's scale-out link) are simulated at the target
rate, and the smallest split that meets the SLOs is kept. Plans are ranked by cost per million
output tokens; the Pareto frontier of cost against the percentile's TTFT is marked. Pipeline
and attention data parallelism are not searched: the simulator runs instances without them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

from . import _checks
from ._fmt import ms, sig
from ._fmt import table as _table
from .catalog.store import Catalog, default_catalog
from .engine.cost import missing_price, price_of, usd_per_million
from .engine.fits import BOUND, MEASURED
from .errors import PlanError, RidgelineError
from .sweeps.cluster import RunReport, by_name, check_backend, run_tasks

#: The most requests one of a search's simulated runs takes: a work bound, not a model constant
#: (each candidate runs the simulator ten to twenty times; 10^8 requests a run, as a fuzzer gave,
#: would search for hours). 2^20 requests settle any percentile the search reads.
MAX_SEARCH_REQUESTS = 1 << 20
#: Replicas added after the sized fleet misses the SLOs in its confirming simulation, at most.
_CONFIRM_STEPS = 3


def load_text(w: dict[str, Any]) -> str:
    """A recommendation's load in words: ``20 req/s`` or ``64 clients``."""
    return f"{w['rate']:g} req/s" if w.get("rate") is not None else f"{w['concurrency']} clients"


def plan_label(p: dict[str, Any]) -> str:
    """A plan's parallel layout in a few characters: TP, EP where > 1, attention DP where > 1, its
    speculation (MTP2: MTP with 2 draft tokens), the disaggregated split."""
    sp = p.get("speculation")
    out = (f"TP{p['tp']}" + (f" EP{p['ep']}" if p.get("ep", 1) > 1 else "")
           + (f" ADP{p['attention_dp']}" if p.get("attention_dp", 1) > 1 else "")
           + (f" {speculation_label(sp)}" if sp else ""))  # fmt: skip
    if p.get("prefill_instances"):
        out += f" {p['prefill_instances']}P+{p['decode_instances']}D"
    return out


def speculation_label(sp: Mapping[str, Any]) -> str:
    """A plan's speculation in a few characters: its method and depth (MTP2)."""
    return f"{sp['method'].upper()}{sp['draft_tokens']}"


def spec_tag(speculative: Any, draft_tokens: Any) -> str:
    """``speculation_label`` of a speculation as given (``--speculative``, ``--draft-tokens``), before
    it is resolved: how a candidate that speculates is named where it is refused or searched."""
    from .engine.speculation import parse_method  # read only by a search that speculates (the cold start)

    return speculation_label({"method": parse_method(speculative)[0], "draft_tokens": draft_tokens})


@dataclasses.dataclass(frozen=True)
class Recommendation:
    """The ranked plans (``plans``: a list of dicts, cheapest first, ``frontier`` marking the
    Pareto plans of cost against TTFT at the percentile), the candidates refused with the reason,
    and the search's inputs."""

    model: str
    workload: dict[str, Any]
    plans: list[dict[str, Any]]
    refused: list[dict[str, Any]]
    #: Plans that meet the SLOs resting on no calibration (basis ``bound``: the efficiency-1 bound,
    #: an optimistic upper bound on speed), kept apart from the ranking unless ``include_bound``.
    bound: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: Where the candidates were searched (tasks per node, times); not part of the answer.
    run: Optional[RunReport] = dataclasses.field(default=None, compare=False, repr=False)

    def __repr__(self) -> str:
        best = self.plans[0] if self.plans else None
        first = (f", best={best['hardware']} {plan_label(best)} x{best['replicas']} "
                 f"${best['usd_per_million_output_tokens']:.3g}/M out" if best else "")  # fmt: skip
        return f"Recommendation(model={self.model!r}, plans={len(self.plans)}, refused={len(self.refused)}{first})"

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "workload": self.workload, "plans": self.plans, "bound": self.bound,
                "refused": self.refused}  # fmt: skip

    def frame(self) -> Any:
        """The plans as a Polars DataFrame (the offer as its provider and date)."""
        import polars as pl

        rows = [{**{k: v for k, v in r.items() if k != "offer"}, "plan": plan_label(r),
                 "offer": f"{r['offer']['provider']}, {r['offer']['as_of']}"} for r in self.plans]  # fmt: skip
        return pl.DataFrame(rows)

    def nearest_miss(self) -> Optional[dict[str, Any]]:
        """The refused candidate whose simulation came closest to the objectives (the largest share
        of requests within them), with the reason it was refused; none when no candidate was
        simulated."""
        tried = [r for r in self.refused if r.get("within_slo") is not None]
        return max(tried, key=lambda r: r["within_slo"]) if tried else None

    def frontier(self) -> list[dict[str, Any]]:
        """The Pareto plans, cheapest first: no other plan is cheaper and at least as fast."""
        return [r for r in self.plans if r["frontier"]]

    def summary(self, top: int = 10, refused: bool = False) -> str:
        w = self.workload
        slo = ", ".join(f"{k} {w[f'slo_{k.lower()}_ms']:g} ms" for k in ("TTFT", "TPOT") if w[f"slo_{k.lower()}_ms"])
        from .serving.workload import length_text

        lines = [f"{self.model}: {load_text(w)}, prompt {length_text(w['prompt'])}, output "
                 f"{length_text(w['output'])} tokens; p{w['percentile']:g} within {slo}"]  # fmt: skip
        if not self.plans:
            near = self.nearest_miss()
            lines.append("no plan meets the SLOs" + (f"; the nearest miss: {near['candidate']}: {near['reason']}"
                                                      if near else ": see the refused candidates below"
                                                      if self.refused else ""))  # fmt: skip
        else:
            q = w["shown_quantile"]
            shown = self.plans[:top]
            front = [r for r in self.plans if r["frontier"] and r not in shown]
            # the runtime and weight columns where the search varied them
            varied = [k for k in ("runtime", "weights") if len({r[k] for r in self.plans}) > 1]
            head = ["", "hardware", "plan", "replicas", "devices", *varied, "$/M out", "$/M all", "$/hour", f"{q} TTFT",
                    f"{q} TPOT", "within SLO", "rejected", "unfinished", "J/token", "basis", "offer"]  # fmt: skip
            # a borrowed plan is marked with whose fit it took, as a numbered note under the table
            notes = list(dict.fromkeys(r["basis_from"] for r in (*shown, *front) if r["basis"] != MEASURED))

            def basis_cell(r: dict[str, Any]) -> str:
                return r["basis"] if r["basis"] == MEASURED else f"{r['basis']} [{notes.index(r['basis_from']) + 1}]"

            cells = [["*" if r["frontier"] else "", r["hardware"], plan_label(r), str(r["replicas"]), str(r["devices"]),
                      *(str(r[k]) for k in varied), f"${sig(r['usd_per_million_output_tokens'])}",
                      f"${sig(r['usd_per_million_tokens'])}", f"${sig(r['usd_per_hour'])}", ms(r["ttft_q_s"]),
                      ms(r["tpot_q_s"]), f"{r['within_slo']:.0%}",
                      str(r["rejected"]), str(r["unfinished"]),
                      "-" if r["j_per_output_token"] is None else sig(r["j_per_output_token"]),
                      basis_cell(r), f"{r['offer']['provider']}, {r['offer']['as_of']}"]
                     for r in (*shown, *front)]  # fmt: skip
            widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
            rows = [head, *cells]
            lines += [("  " + "  ".join(c.ljust(wd) for c, wd in zip(row, widths))).rstrip() for row in rows]
            more = f" (the {len(front)} below the top {top} listed after it)" if front else ""
            lines.append(
                f"  * on the Pareto frontier of cost and {q} TTFT{more}; {len(self.plans)} plans meet the SLOs; within "
                "SLO: of the requests sent; unfinished: length-capped or in flight at the end"
            )
            lines += [f"  [{i}] {note}" for i, note in enumerate(notes, 1)]
            specs = {speculation_label(r["speculation"]): r["speculation"]
                     for r in (*shown, *front) if r.get("speculation")}  # fmt: skip
            lines += [f"  {k}: {sp['method']}, {sp['draft_tokens']} draft tokens a step, acceptance length "
                      f"{sp['acceptance_length']:.3g} ({sp['acceptance']})" for k, sp in specs.items()]  # fmt: skip
            unfitted = sorted({f"{r['runtime']}" for r in (*shown, *front) if r.get("kv_handoff_basis") == "none"})
            if unfitted:
                lines.append(f"  disaggregated plans of {', '.join(unfitted)} count no KV hand-off: no disaggregated "
                             "run of that runtime was fitted (serving_fits.csv)")  # fmt: skip
        if self.bound:
            where = ", ".join(sorted({r["hardware"] for r in self.bound}))
            lines.append(f"{len(self.bound)} plans that meet the SLOs rest on no calibration ({where}: the "
                         "efficiency-1 bound, an optimistic upper bound on speed): not ranked; --include-bound ranks "
                         "them, marked")  # fmt: skip
        if self.refused and refused:
            lines.append("refused:")
            lines.append(_table([(r["candidate"], r["reason"]) for r in self.refused]))
        elif self.refused:
            lines.append(f"{len(self.refused)} candidates refused (--verbose lists each with its reason)")
        return "\n".join(lines)


def recommend(
    model: str, *, rate: Optional[float] = None, concurrency: Optional[int] = None,
    slo_ttft_ms: Optional[float] = None, slo_tpot_ms: Optional[float] = None, percentile: float = 90,
    prompt: Any = 1024, output: Any = 256, hardware: Optional[Sequence[str]] = None, tp: Sequence[int] = (1, 2, 4, 8),
    weight_dtype: Optional[str | Sequence[Optional[str]]] = None, runtime: Optional[str | Sequence[str]] = None,
    disaggregate: bool = False, kv_link_gbs: Optional[float] = None, kv_link_latency_us: Optional[float] = None,
    kv_handoff_us: Optional[float] = None, requests: int = 500, max_devices: int = 64,
    progress: Optional[Callable[[int, int], Any]] = None, catalog: Optional[Catalog] = None,
    amortise_years: Optional[float] = None, price_tier: Optional[str] = None, backend: str = "local",
    ray_address: Optional[str] = None, include_bound: bool = False, speculative: Optional[str] = None,
    draft_tokens: Optional[int] = None, acceptance: Optional[str] = None,
) -> Recommendation:  # fmt: skip
    """The plans that serve ``rate`` requests/s (Poisson), or ``concurrency`` clients each sending
    its next request when its last ends, of ``prompt`` + ``output`` tokens with ``percentile`` % of
    requests within ``slo_ttft_ms`` and ``slo_tpot_ms``, cheapest first.

    Args:
        prompt, output: lengths as ``simulate`` takes them: a whole number, or a distribution
            (``"lognormal:1500:0.8:16:16000"``, ``"uniform:LO:HI"``, ``"normal:..."``, a mapping).
            The static prune prices a lone request of the mean lengths; the simulator draws them,
            its sequences bounded by the longest prompt plus the longest output.
        hardware: the devices to search (default: every catalog device with a published offer).
        tp: the tensor-parallel degrees to try (over the device's scale-up link, or its host link
            where it has none, as ``estimate`` prices them). An MoE model also tries each with
            its experts spread over the TP group (EP = TP), and each degree t > 1 as t
            attention-DP ranks of TP 1 over the experts split t ways (EP t, wide EP).
        weight_dtype: the weight formats to try (one or several; default: the model's own).
        runtime: the runtimes to try, each with its calibration and scheduler (one or several of
            vllm, sglang, trtllm; default: each device's own default, the one ``estimate`` picks;
            a device whose default has no serving scheduler, llama.cpp or none, is refused saying so).
        disaggregate: also try each sized fleet split into a prefill and a decode pool.
        kv_link_gbs, kv_link_latency_us: the link a disaggregated prompt's KV crosses, per rank
            (default: the device's scale-out link, where the catalog has its bandwidth and latency).
        kv_handoff_us: the transfer engine's hand-off a disaggregated transfer takes (default: the
            runtime's fit on its disaggregated serving runs, as ``simulate`` takes it).
        requests: requests per simulated run (more: steadier percentiles, slower search).
        max_devices: the most devices a plan may take.
        progress: called with (candidates done, candidates) as the search goes.
        amortise_years, price_tier: rank by the devices' cheapest published purchase prices spread
            over this many years, or their on-demand offers of one tier (``Catalog.offers``).
        include_bound: rank plans that rest on no calibration (``basis`` bound) beside the others,
            marked; by default they are kept apart in ``Recommendation.bound``.
        speculative, draft_tokens, acceptance: also try every candidate speculating so (as
            ``simulate`` takes them: ``speculative="mtp", draft_tokens=2`` where the model has MTP).
        backend: ``"ray"`` searches each candidate as a task on a Ray cluster (``ray_address``:
            none or ``"local"`` starts one here, ``"auto"`` joins the running one, or host:port);
            the plans are the same as a local search's, in the same order.
    """
    from .models.config import Model
    from .serving.capacity import quantile_for
    from .serving.workload import length_bounds, parse_lengths

    if check_backend(backend, ray_address) == "ray" and catalog is not None:
        raise PlanError("catalog: Ray workers use their own default catalog (set RIDGELINE_HARDWARE on every node "
                        "for extra devices); leave catalog unset with backend='ray'")  # fmt: skip
    by_name("model", model, backend)
    cat = catalog or default_catalog()
    if (rate is None) == (concurrency is None):
        raise PlanError("recommend needs a load: rate (requests/s) or concurrency (clients), one of them")
    rate = None if rate is None else _checks.number("rate", rate, positive=True)
    concurrency = None if concurrency is None else _checks.whole("concurrency", concurrency, 1)
    pct = _checks.number("percentile", percentile, positive=True)
    if pct > 100:
        raise PlanError(f"percentile: the share of requests within the SLOs, in (0, 100], got {percentile}")
    if slo_ttft_ms is None and slo_tpot_ms is None:
        raise PlanError("recommend needs an SLO: --slo-ttft-ms and/or --slo-tpot-ms")
    slo = {k: None if v is None else _checks.number(k, v, positive=True)
           for k, v in (("slo_ttft_ms", slo_ttft_ms), ("slo_tpot_ms", slo_tpot_ms))}  # fmt: skip
    m = Model.from_config(model) if isinstance(model, str) else model
    lengths = {k: parse_lengths(k, v, int(m.max_model_len)) for k, v in (("prompt", prompt), ("output", output))}
    if lengths["output"]["kind"] == "fixed":
        _checks.whole("output", lengths["output"]["value"], 2)
    (p_mean, p_max), (o_mean, o_max) = (length_bounds(lengths[k]) for k in ("prompt", "output"))
    requests, max_devices = _sizes(requests, max_devices, rate)
    tps, years, names, runtimes, dtypes = _search_space(m, cat, hardware, tp, weight_dtype, runtime, amortise_years,
                                                        price_tier)  # fmt: skip
    link = _kv_link(disaggregate, kv_link_gbs, kv_link_latency_us, kv_handoff_us)
    moe = bool(m.is_moe)
    # the simulator streams p50, p90 and p99: the plans show the nearest at or above the percentile
    shown = quantile_for(pct / 100)
    workload = {"rate": rate, "concurrency": concurrency, "prompt": lengths["prompt"], "output": lengths["output"],
                "mean_lengths": (max(1, round(p_mean)), max(2, round(o_mean))),
                "max_model_len": min(int(m.max_model_len), p_max + o_max), "percentile": pct, **slo,
                "requests": requests, "shown_quantile": shown, "amortise_years": years, "price_tier": price_tier,
                "disaggregate": _checks.flag("disaggregate", disaggregate), "kv_link": link}  # fmt: skip
    # each TP degree t as TP t (experts over the TP group, or whole experts a rank: EP t) and, for a
    # MoE model, as t attention-DP ranks of TP 1 over experts split t ways (wide EP: DeepSeek's and
    # Kimi's decode layout), on the same t devices
    layouts = [(t, e, 1) for t in tps for e in sorted({1, t} if moe else {1})]
    layouts += [(1, t, t) for t in tps if moe and t > 1]
    specs: list[dict[str, Any]] = [{}] + ([] if speculative is None else [
        {"speculative": speculative, "draft_tokens": draft_tokens, "acceptance": acceptance}])  # fmt: skip
    if speculative is not None:  # a speculation no candidate could take is the caller's mistake: said up front
        check_speculation(m, names[0], tps[-1], cat, specs[1])
    candidates = [(h, t, e, a, rt, wd, sp) for h in names for rt in runtimes for wd in dtypes for t, e, a in layouts
                  for sp in range(len(specs))]  # fmt: skip
    plans, refused = [], []
    # one task per candidate: here in order, or spread over a Ray cluster (its workers' own catalog)
    tasks = [(model, hw, t, ep, None if backend == "ray" else cat, workload,
              {"weight_dtype": wd, "runtime": rt, "attention_dp": a, **specs[sp]}, max_devices)
             for hw, t, ep, a, rt, wd, sp in candidates]  # fmt: skip
    results, report = run_tasks(_candidate_task, tasks, backend=backend, ray_address=ray_address, progress=progress)
    for (hw, t, ep, a, rt, wd, sp), (found, why, near) in zip(candidates, results):
        label = (
            f"{hw} {plan_label({'tp': t, 'ep': ep, 'attention_dp': a})}"
            + (f" {rt}" if len(runtimes) > 1 else "")
            + (f" {wd}" if len(dtypes) > 1 else "")
            + (f" {spec_tag(speculative, draft_tokens)}" if sp else "")
        )
        plans += found
        refused += [{"candidate": label, "hardware": hw, "tp": t, "ep": ep, "attention_dp": a, "runtime": rt,
                     "weight_dtype": wd, "reason": r, "within_slo": near} for r in why]  # fmt: skip
    plans.sort(key=lambda r: (r["usd_per_million_output_tokens"], r["ttft_q_s"]))
    bound = [] if _checks.flag("include_bound", include_bound) else [r for r in plans if r["basis"] == BOUND]
    plans = [r for r in plans if r not in bound]
    best_ttft = math.inf
    for r in plans:  # cheapest first: a plan is on the frontier when no cheaper one is as fast
        r["frontier"] = r["ttft_q_s"] < best_ttft
        best_ttft = min(best_ttft, r["ttft_q_s"])
    return Recommendation(model=str(model), workload=workload, plans=plans, refused=refused, run=report, bound=bound)


def _sizes(requests: Any, max_devices: Any, rate: Optional[float]) -> tuple[int, int]:
    """The requests a simulated run and the most devices a plan, each checked."""
    requests, max_devices = _checks.whole("requests", requests, 10), _checks.whole("max_devices", max_devices, 1)
    if requests > MAX_SEARCH_REQUESTS:
        raise PlanError(f"requests: a search simulates each candidate several times, each run at most "
                        f"{MAX_SEARCH_REQUESTS:,} requests; got {requests:,}")  # fmt: skip
    if rate is not None:
        _checks.rate(rate, requests)
    return requests, max_devices


def _kv_link(disaggregate: Any, gbs: Any, latency_us: Any, handoff_us: Any) -> dict[str, Any]:
    """The KV link of the prefill/decode splits searched, each value checked; refused without a
    split to price it on."""
    link = {"kv_link_gbs": gbs, "kv_link_latency_us": latency_us, "kv_handoff_us": handoff_us}
    for k, v in link.items():
        if v is not None:
            _checks.number(k, v, positive=k == "kv_link_gbs")
    given = [k for k, v in link.items() if v is not None]
    if given and not _checks.flag("disaggregate", disaggregate):
        raise PlanError(f"{given[0]}: the KV link of a prefill/decode split, only with disaggregate=True "
                        "(--disaggregate)")  # fmt: skip
    return link


def _search_space(
    m: Any,
    cat: Catalog,
    hardware: Any,
    tp: Any,
    weight_dtype: Any,
    runtime: Any,
    amortise_years: Any,
    price_tier: Any = None,
) -> tuple[list[int], Optional[float], list[str], list[Any], list[Any]]:
    """The candidates' axes, each checked: TP degrees, the purchase years (or none: rentals), the
    devices, the runtimes and the weight formats (None: the default)."""
    # one degree given alone is checked as one
    degrees: list[Any] = [tp] if isinstance(tp, (str, bytes)) or not isinstance(tp, (Sequence, set)) else list(tp)
    tps = sorted({_checks.whole("tp", t, 1) for t in degrees})
    years = None if amortise_years is None else _checks.number("amortise_years", amortise_years, positive=True)
    given = listed("hardware", hardware) if hardware is not None else []
    if hardware is not None and not given:
        raise PlanError("hardware: an empty list; give devices, or leave it out to search every device with an offer")
    cat.offers(cat.names()[0], years, price_tier)  # the tier checked once, before the search
    names = [cat.resolve(h) for h in given] if given else [n for n in cat.names() if cat.offers(n, years, price_tier)]
    if not names:
        raise PlanError("hardware: no device to search")
    # the runtime each device defaults to, as estimate, sweep and simulate choose it (one default
    # a device through every door), unless runtimes are named
    runtimes = listed("runtime", runtime) or [None]
    dtypes = listed("weight_dtype", weight_dtype) or [None]
    # a name no plan could take is the caller's mistake, not a refused candidate: said up front
    from .engine.runtimes import check_runtime
    from .models import quant

    for r in runtimes:
        if r is not None:
            check_runtime(r, cat)
    for d in dtypes:
        if d is not None:
            quant.resolve(m, "bf16", d)
    return tps, years, names, runtimes, dtypes


def check_speculation(m: Any, hw: str, tp: int, cat: Optional[Catalog], spec: Mapping[str, Any]) -> None:
    """The speculation asked for, checked once on one candidate: an error that every candidate
    would meet (no draft depth, no MTP layers, no curve) is said before the search."""
    from .engine.estimate import estimate

    estimate(m, hw, tp=tp, allow_no_fit=True, catalog=cat, **spec)


def listed(name: str, v: Any) -> list[Any]:
    """One value or several (a list, or comma-separated text) as a list; none: empty."""
    if v is None:
        return []
    if isinstance(v, str):
        names = [x.strip() for x in v.split(",") if x.strip()]
        if not names:  # an empty name is a mistake, never the default
            raise PlanError(f"{name}: an empty name in {v!r}")
        return names
    if isinstance(v, Sequence) and not isinstance(v, bytes):
        bad = [x for x in v if not (isinstance(x, str) and x.strip()) and x is not None]
        if bad:
            raise PlanError(f"{name}: expected names, got {bad[0]!r}")
        return list(v)
    raise PlanError(f"{name}: expected a name or a list of names, got {v!r}")


def _candidate_task(
    model: Any, hw: str, tp: int, ep: int, cat: Optional[Catalog], w: dict[str, Any], plan_kw: dict[str, Any],
    max_devices: int,
) -> tuple[list[dict[str, Any]], list[str], Optional[float]]:  # fmt: skip
    """One candidate as a task of the backend (``cluster``): on a Ray worker (no catalog given)
    with that worker's default catalog, which the backend checked is the driver's. Its plans, why
    any was refused, and the largest share of requests within the objectives among its simulations
    that missed them (none: no simulation missed)."""
    cat = cat or default_catalog()
    near: list[float] = []
    found, why = _candidate(model, hw, tp, ep, cat, w, {**plan_kw, "catalog": cat}, max_devices, near)
    return found, why, max(near) if near else None


def _candidate(
    model: str, hw: str, tp: int, ep: int, cat: Catalog, w: dict[str, Any], plan_kw: dict[str, Any],
    max_devices: int, near: list[float],
) -> tuple[list[dict[str, Any]], list[str]]:  # fmt: skip
    """One device, TP and EP degree, attention DP (in ``plan_kw``), runtime and weight format: its
    plans (aggregated, and with ``disaggregate`` the smallest prefill/decode split meeting the
    SLOs) and why any was refused; ``near`` gains the share within the objectives of each
    simulation that missed them. An instance takes tp x attention_dp devices."""
    from .serving.capacity import max_rate, miss
    from .serving.capacity import meets as meets_share
    from .serving.simulator import simulate

    offers, width = cat.offers(hw, w["amortise_years"], w["price_tier"]), tp * plan_kw.get("attention_dp", 1)
    if not offers:
        why = missing_price(hw, w["amortise_years"], w["price_tier"]).split(";")[0]
        return [], [f"{why}: cannot be ranked by cost"]
    slo = {k: w[k] for k in ("slo_ttft_ms", "slo_tpot_ms")}
    e, why = _static_prune(model, hw, tp, ep, w, plan_kw)
    if e is None:
        return [], [why]
    # the workload's own length bounds a sequence: the fleet is sized for it, not the model's maximum
    sim_kw = {"tp": tp, "ep": ep, "prompt": w["prompt"], "output": w["output"], "requests": w["requests"],
              "max_model_len": w["max_model_len"], **slo, **plan_kw}  # fmt: skip
    share = w["percentile"] / 100

    last_miss = [""]

    def meets(s: Any) -> bool:
        if meets_share(s, share):
            return True
        near.append(s.within_slo)
        last_miss[0] = miss(s, share)
        return False

    def run(n: int, **kw: Any) -> Any:
        load = {"rate": w["rate"]} if w["rate"] is not None else {"concurrency": w["concurrency"]}
        return simulate(model, hw, **load, **{**sim_kw, "requests": w["requests"] * n}, **kw)

    price, offer = price_of(None, offers) or (0.0, None)  # offers is not empty: checked above

    def plan(s: Any, replicas: int, per_instance: Optional[float], split: Optional[tuple[int, int]] = None) -> Plan:
        devices, q, en = replicas * width, w["shown_quantile"], s.energy
        return {
            "hardware": hw, "tp": tp, "ep": ep, "attention_dp": width // tp, "replicas": replicas, "devices": devices,
            "prefill_instances": split[0] if split else None, "decode_instances": split[1] if split else None,
            "runtime": s.runtime, "weights": s.plan["weights"], "speculation": s.plan.get("speculation"),
            "usd_per_device_hour": price, "usd_per_hour": price * devices, "offer": offer,
            "usd_per_million_output_tokens": usd_per_million(price * devices, s.output_tok_s),
            "usd_per_million_tokens": usd_per_million(price * devices, s.cost_tok_s),
            "per_instance_rate": per_instance, "within_slo": s.within_slo, "rejected": s.rejected,
            "unfinished": int(s.counts["length_capped"]) + s.unfinished,
            "ttft_q_s": float(s.ttft_s[q]), "tpot_q_s": float(s.tpot_s[q]), "output_tok_s": s.output_tok_s,
            "j_per_output_token": en.get("j_per_output_token"), "calibration": e.calibration, "basis": e.basis,
            "basis_from": e.basis_from, "frontier": False,
            # a disaggregated plan whose runtime has no fitted KV hand-off counts none: said under the table
            "kv_handoff_basis": s.cluster.get("kv_handoff_basis"),
            # the simulate keywords of one unit (an instance, or the prefill/decode split): launch files
            "launch": {k: v for k, v in {**plan_kw, "tp": tp, "ep": ep, "runtime": s.runtime,
                       "max_model_len": w["max_model_len"],
                       "prefill_instances": split and split[0], "decode_instances": split and split[1]}.items()
                       if k != "catalog" and v is not None},
        }  # fmt: skip

    def too_many(n: int) -> Optional[str]:
        over = n * width > max_devices
        return f"needs {n} replicas: {n * width} devices, more than max_devices {max_devices}" if over else None

    try:
        if w["rate"] is None:
            # a closed loop: the fewest replicas whose simulation meets the SLOs (doubling, then bisecting)
            per_instance, lo, hi, s = None, 0, 1, None
            while s is None:
                if too_many(hi):
                    return [], [f"{lo} replicas miss the SLOs ({last_miss[0]}) and {hi} take {hi * width} devices, "
                                f"more than max_devices {max_devices}"]  # fmt: skip
                got = run(hi, instances=hi, router="least_outstanding")
                lo, hi, s = (lo, hi, got) if meets(got) else (hi, hi * 2, None)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                got = run(mid, instances=mid, router="least_outstanding")
                lo, hi, s = (lo, mid, got) if meets(got) else (mid, hi, s)
            replicas = hi
        else:
            per_instance, _ = max_rate(model, hw, share=share, **sim_kw)
            if per_instance <= 0:
                return [], ["one instance cannot serve 1 req/s within the SLOs"]
            replicas = math.ceil(w["rate"] / per_instance)
            for _ in range(_CONFIRM_STEPS + 1):
                if too_many(replicas):
                    # what the most replicas max_devices allows break at the target rate
                    most = max_devices // width
                    if most and not last_miss[0]:
                        s = run(most, instances=most, router="least_outstanding")
                        if meets(s):  # max_rate's bracket was conservative: the fleet allowed meets them
                            replicas = most
                            break
                    after = f" ({most} at {w['rate']:g} req/s: {last_miss[0]})" if last_miss[0] else ""
                    return [], [f"{too_many(replicas)}{after}"]
                s = run(replicas, instances=replicas, router="least_outstanding")
                if meets(s):
                    break
                replicas += 1
            else:
                return [], [f"the sized fleet misses the SLOs in simulation after {_CONFIRM_STEPS} added replicas: "
                            f"{last_miss[0]}"]  # fmt: skip
    except RidgelineError as err:
        return [], [str(err).splitlines()[0]]
    return _split(w, [plan(s, replicas, per_instance)], replicas, run, meets, plan, last_miss)


def _static_prune(model: str, hw: str, tp: int, ep: int, w: dict[str, Any],
                  plan_kw: dict[str, Any]) -> tuple[Any, str]:  # fmt: skip
    """A candidate's static estimate of a lone request of the mean lengths, or why the candidate
    is refused before any simulation: its default runtime has no scheduler, it does not fit, or
    that request misses an objective. Under attention DP the static plan holds a request on every
    rank: its TPOT is a lone request's (decode steps are padded to the busiest rank) but its TTFT
    is not (the experts see every rank's prompt), so only TPOT prunes there."""
    from .engine.estimate import estimate
    from .serving.scheduler import has_scheduler

    try:
        prompt, output = w["mean_lengths"]
        e = estimate(model, hw, tp=tp, ep=ep, prompt=prompt, output=output, allow_no_fit=True, **plan_kw)
    except RidgelineError as err:
        return None, str(err).splitlines()[0]
    if plan_kw.get("runtime") is None and not has_scheduler(e.plan["runtime"]):
        default = e.plan["runtime"] or "none (the efficiency-1 bound)"
        named = "--runtime vllm, sglang or trtllm serves it under that runtime's calibration"
        return None, (f"its default runtime, {default}, has no serving scheduler in the simulator (estimate prices "
                      f"it the same); {named}")  # fmt: skip
    if not e.fits:
        used, usable = (e.memory[k] / 1e9 for k in ("total_bytes", "budget_bytes"))
        return None, f"does not fit ({used:.1f} GB a device, {usable:.1f} usable)"
    checks = ([("slo_ttft_ms", e.ttft_s)] if plan_kw.get("attention_dp", 1) == 1 else []) + [("slo_tpot_ms", e.tpot_s)]
    for key, got in checks:
        if w[key] is not None and got is not None and got * 1e3 > w[key]:
            what = "a lone request" + (
                "" if w["prompt"]["kind"] == w["output"]["kind"] == "fixed" else " of the mean lengths"
            )
            return None, f"{what} misses the {key[4:8].upper()} objective ({sig(got * 1e3)} ms)"
    return e, ""


Plan = dict[str, Any]
Plans = list[Plan]


def _split(w: dict[str, Any], out: Plans, replicas: int, run: Callable[..., Any], meets: Callable[[Any], bool],
           plan: Callable[..., dict[str, Any]], last_miss: list[str]) -> tuple[Plans, list[str]]:  # fmt: skip
    """With ``disaggregate``, the sized fleet's plans plus the smallest prefill/decode split (of two
    instances up to one more than the aggregated fleet's) that meets the SLOs, and why none did
    (``meets`` leaves what a simulation missed in ``last_miss``)."""
    if not w["disaggregate"]:
        return out, []
    nearest: tuple[float, str] = (-1.0, "")
    for n in range(2, replicas + 2):
        tried = []
        for p in range(1, n):
            try:
                d = run(n, prefill_instances=p, decode_instances=n - p, router="least_outstanding", **w["kv_link"])
            except RidgelineError as err:
                return out, [f"disaggregated: {str(err).splitlines()[0]}"]
            if meets(d):
                tried.append((d.within_slo, -d.ttft_s[w["shown_quantile"]], p, d))
            elif d.within_slo > nearest[0]:
                nearest = (d.within_slo, f"{p}P+{n - p}D: {last_miss[0]}")
        if tried:
            _, _, p, d = max(tried, key=lambda x: x[:3])
            return [*out, plan(d, n, None, (p, n - p))], []
    return out, [f"disaggregated: no split of {replicas + 1} instances or fewer meets the SLOs (the nearest, "
                 f"{nearest[1]})"]  # fmt: skip
