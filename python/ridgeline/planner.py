"""A fixed GPU budget searched, aggregated against disaggregated (``ridgeline plan``): for a model,
a device and a number of GPUs, the plans that use them all, each run through the simulator at a
ladder of client counts, the best of each kind under the objectives, and the frontier of output
tokens/s per GPU against tokens/s per user (1 / mean TPOT: the decode speed one user sees, the
interactivity view the public serving benchmarks draw).

Aggregated plans are replicas of one instance layout (TP, and for a MoE model EP = TP or attention
DP over the experts) filling the budget. Disaggregated plans are units of a prefill pool and a
decode pool, each pool of its own TP and instance count, replicated to fill the budget. A unit is
kept within one scale-up domain (its prompts' KV moves over NVLink) unless it may cross a NIC: the
device's scale-out link in the catalog (bandwidth and latency), or a KV link given (``kv_link_gbs``
and ``kv_link_latency_us``).

A plan is copies of one unit (an aggregated instance, or a disaggregated prefill and decode pool
pair), each copy serving its own clients alike. Every point is the simulator's run of one unit
at its share of the clients (``simulate`` with ``PlanPoint.simulate_kwargs`` gives the same
numbers), closed loop: each client sends its next request when its last ends, as the public
benchmarks' concurrency mode does. Its tokens/s per GPU are the unit's, which its copies repeat.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from . import _checks
from ._fmt import sig
from .errors import PlanError, RidgelineError

#: Clients per instance (aggregated) or per unit (disaggregated) the ladder tries, until a point
#: misses the objectives.
CLIENT_LADDER = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
#: A rung that adds less than this share of output tokens/s per GPU over the last is saturated:
#: the ladder stops there (more clients only queue).
SATURATED = 0.02
#: Requests a point simulates: this many per client, within the bounds below.
REQUESTS_PER_CLIENT = 3
MIN_REQUESTS, MAX_REQUESTS = 32, 3000


@dataclasses.dataclass(frozen=True)
class PlanPoint:
    """One plan at one load: its label, the arguments ``simulate`` takes for it, and its numbers."""

    kind: str  # "aggregated" or "disaggregated"
    label: str
    #: Clients of the whole plan (each of its ``copies`` units serves clients / copies).
    clients: int
    copies: int
    #: One unit's run: ``simulate(model, hardware, **simulate_kwargs)``.
    simulate_kwargs: Mapping[str, Any]
    tok_s_per_gpu: float
    tok_s_per_user: float
    ttft_q_s: float
    tpot_q_s: float
    meets: bool
    miss: str

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)} | {
            "simulate_kwargs": dict(self.simulate_kwargs)
        }


@dataclasses.dataclass(frozen=True)
class BudgetPlan:
    """The search's answer: the best aggregated and disaggregated points under the objectives
    (None where none meets them), their ratio, the frontier and every point, and the candidates
    refused with the reason."""

    model: str
    hardware: str
    gpus: int
    workload: Mapping[str, Any]
    points: tuple[PlanPoint, ...]
    refused: tuple[tuple[str, str], ...]

    def best(self, kind: str) -> Optional[PlanPoint]:
        ok = [p for p in self.points if p.kind == kind and p.meets]
        return max(ok, key=lambda p: (p.tok_s_per_gpu, p.tok_s_per_user)) if ok else None

    @property
    def aggregated(self) -> Optional[PlanPoint]:
        return self.best("aggregated")

    @property
    def disaggregated(self) -> Optional[PlanPoint]:
        return self.best("disaggregated")

    @property
    def ratio(self) -> Optional[float]:
        """Disaggregated over aggregated output tokens/s per GPU, at their best under the objectives."""
        a, d = self.aggregated, self.disaggregated
        return None if a is None or d is None else d.tok_s_per_gpu / a.tok_s_per_gpu

    @property
    def frontier(self) -> list[PlanPoint]:
        """The points no other point beats on both tokens/s per GPU and tokens/s per user, by
        tokens/s per user (whether or not they meet the objectives: ``meets`` says)."""
        pts = sorted(self.points, key=lambda p: (-p.tok_s_per_user, -p.tok_s_per_gpu))
        out: list[PlanPoint] = []
        for p in pts:
            if not out or p.tok_s_per_gpu > out[-1].tok_s_per_gpu:
                out.append(p)
        return out

    def to_dict(self) -> dict[str, Any]:
        a, d = self.aggregated, self.disaggregated
        return {"model": self.model, "hardware": self.hardware, "gpus": self.gpus, "workload": dict(self.workload),
                "aggregated": a and a.to_dict(), "disaggregated": d and d.to_dict(), "ratio": self.ratio,
                "frontier": [p.to_dict() for p in self.frontier], "points": [p.to_dict() for p in self.points],
                "refused": [{"candidate": c, "reason": r} for c, r in self.refused]}  # fmt: skip

    def text(self) -> str:
        w = self.workload
        lines = [f"{self.model} on {self.gpus} x {self.hardware}: {w['describe']}"]
        for kind in ("aggregated", "disaggregated"):
            p = self.best(kind)
            lines.append(f"  best {kind:14s} " + (_point_text(p) if p else "none meets the objectives"))
        if self.ratio is not None:
            lines.append(f"  disaggregated / aggregated: {self.ratio:.2f}x output tokens/s per GPU")
        if w["slo_ttft_ms"] is None:
            lines.append("  no TTFT objective: the best plans run as many clients as add throughput, and their "
                         "prompts queue (TTFT below); --slo-ttft-ms bounds it")  # fmt: skip
        lines.append("frontier (output tokens/s per GPU against tokens/s per user; * meets the objectives):")
        rows = [(("*" if p.meets else " ") + p.label, f"{p.clients} clients", f"{sig(p.tok_s_per_gpu)} tok/s/GPU",
                 f"{sig(p.tok_s_per_user)} tok/s/user", f"TTFT {w['quantile']} {sig(p.ttft_q_s * 1e3)} ms",
                 f"TPOT {w['quantile']} {sig(p.tpot_q_s * 1e3)} ms") for p in self.frontier]  # fmt: skip
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))] if rows else []
        lines += ["  " + "  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip() for r in rows]
        if self.refused:
            lines.append(f"{len(self.refused)} candidates refused:")
            lines += [f"  {c}: {r}" for c, r in self.refused]
        return "\n".join(lines)


def _point_text(p: PlanPoint) -> str:
    return (f"{p.label} at {p.clients} clients: {sig(p.tok_s_per_gpu)} output tok/s per GPU, "
            f"{sig(p.tok_s_per_user)} tok/s per user")  # fmt: skip


def plan_budget(
    model: str, hardware: str, gpus: int, *, prompt: Any = 1024, output: Any = 256,
    slo_ttft_ms: Optional[float] = None, slo_tpot_ms: Optional[float] = None,
    min_user_tok_s: Optional[float] = None, percentile: float = 90, tp: Sequence[int] = (1, 2, 4, 8),
    runtime: Any = None, weight_dtype: Any = None, disaggregate: bool = True,
    kv_link_gbs: Optional[float] = None, kv_link_latency_us: Optional[float] = None, catalog: Any = None,
    speculative: Optional[str] = None, draft_tokens: Optional[int] = None, acceptance: Optional[str] = None,
) -> BudgetPlan:  # fmt: skip
    """The best aggregated and disaggregated plans on ``gpus`` devices ``hardware`` for ``prompt`` +
    ``output`` tokens under the objectives (``slo_ttft_ms``, ``slo_tpot_ms``, ``min_user_tok_s``: a
    decode speed per user, 1000 / TPOT ms; held by ``percentile`` % of requests), and the frontier.
    ``runtime`` and ``weight_dtype`` may each name several (a list, or comma-separated): every
    layout is tried with each; with ``speculative`` (and ``draft_tokens``, ``acceptance``, as
    ``simulate`` takes them) every layout is tried with and without it.

    >>> b = plan_budget("meta-llama/Llama-3.1-8B", "H100_SXM", 2, prompt=512, output=64, slo_tpot_ms=50, tp=(1,),
    ...                 disaggregate=False)
    >>> b.aggregated.label
    '2 x TP1'
    """
    from .catalog.store import default_catalog
    from .models.config import Model
    from .serving.capacity import quantile_for

    cat = catalog or default_catalog()
    gpus = _checks.whole("gpus", gpus, 1)
    dev = cat.get(_checks.text("hardware", hardware))
    m = Model.from_config(model) if isinstance(model, str) else model
    if min_user_tok_s is not None:
        floor = 1000.0 / _checks.number("min_user_tok_s", min_user_tok_s, positive=True)
        slo_tpot_ms = floor if slo_tpot_ms is None else min(_checks.number("slo_tpot_ms", slo_tpot_ms), floor)
    if slo_ttft_ms is None and slo_tpot_ms is None:
        raise PlanError("plan needs an objective: --slo-ttft-ms, --slo-tpot-ms or --min-user-tok-s")
    share = _checks.number("percentile", percentile, positive=True) / 100
    if share > 1:
        raise PlanError(f"percentile: the share of requests within the objectives, in (0, 100], got {percentile}")
    tps = sorted({_checks.whole("tp", t, 1) for t in tp})
    common = {"prompt": prompt, "output": output, "slo_ttft_ms": slo_ttft_ms, "slo_tpot_ms": slo_tpot_ms,
              "catalog": catalog}  # fmt: skip
    variants = _variants(runtime, weight_dtype, speculative, draft_tokens, acceptance)
    if speculative is not None:  # the speculation itself checked once, up front, not refused per candidate
        from .recommend import check_speculation

        spec = {k: v for k, v in variants[-1][1].items() if k in ("speculative", "draft_tokens", "acceptance")}
        check_speculation(m, dev.name, tps[-1], catalog, spec)
    domain = dev.scaleup_domain or 1
    workload = {"prompt": prompt, "output": output, "slo_ttft_ms": slo_ttft_ms, "slo_tpot_ms": slo_tpot_ms,
                "percentile": percentile, "quantile": quantile_for(share),
                "describe": f"prompt {prompt}, output {output} tokens; "
                + ", ".join(f"{k} {v:g} ms" for k, v in (("TTFT", slo_ttft_ms), ("TPOT", slo_tpot_ms)) if v)
                + f" for {percentile:g}% of requests"}  # fmt: skip
    points: list[PlanPoint] = []
    refused: list[tuple[str, str]] = []
    disagg = _checks.flag("disaggregate", disaggregate)
    link = {} if kv_link_gbs is None else {"kv_link_gbs": kv_link_gbs, "kv_link_latency_us": kv_link_latency_us}
    layouts = _aggregated(m, gpus, tps, domain)
    for suffix, var in variants:
        base = {**common, **var}
        for label, kw, unit in layouts:
            _ladder("aggregated", label + suffix, {**base, **kw}, unit, gpus, m, dev.name, share, workload, points,
                    refused)  # fmt: skip
        if disagg:
            # a TP whose instance holds no KV cache serves in neither pool: said once, above
            no_room = {lab for lab, why in refused if why.startswith("kv_blocks")}
            no_kv = {kw["tp"] for label, kw, _ in layouts if kw["ep"] == 1 and label + suffix in no_room}
            nic = link or (dev.scaleout_bw_gbs is not None and dev.scaleout_latency_us is not None)
            for label, kw, unit in _disaggregated(gpus, [t for t in tps if t not in no_kv], gpus if nic else domain):
                _ladder("disaggregated", label + suffix, {**base, **link, **kw}, unit, gpus, m, dev.name, share,
                        workload, points, refused)  # fmt: skip
    return BudgetPlan(model=m.name, hardware=dev.name, gpus=gpus, workload=workload, points=tuple(points),
                      refused=tuple(refused))  # fmt: skip


def _variants(runtime: Any, weight_dtype: Any, speculative: Optional[str], draft_tokens: Optional[int],
              acceptance: Optional[str]) -> list[tuple[str, dict[str, Any]]]:  # fmt: skip
    """(label suffix, simulate keywords) of each runtime, weight format and speculation tried; a
    setting tried in one form only adds nothing to the labels."""
    from .recommend import listed, spec_tag

    runtimes = listed("runtime", runtime) or [None]
    dtypes = listed("weight_dtype", weight_dtype) or [None]
    specs: list[dict[str, Any]] = [{}]
    if speculative is not None:
        specs.append({"speculative": speculative, "draft_tokens": draft_tokens, "acceptance": acceptance})
    out = []
    for rt in runtimes:
        for wd in dtypes:
            for sp in specs:
                suffix = ((f" {rt}" if len(runtimes) > 1 else "") + (f" {wd or 'default'}" if len(dtypes) > 1 else "")
                          + (f" {spec_tag(speculative, draft_tokens)}" if sp else ""))  # fmt: skip
                kw = {"runtime": rt, "weight_dtype": wd, **{k: v for k, v in sp.items() if v is not None}}
                out.append((suffix, kw))
    return out


def _aggregated(m: Any, gpus: int, tps: Sequence[int], domain: int) -> list[tuple[str, dict[str, Any], int]]:
    """(label, simulate keywords, devices an instance) of each aggregated layout filling ``gpus``:
    TP within the scale-up domain; a MoE model also with EP = TP, and attention DP of TP 1 over
    experts split as many ways."""
    out = []
    layouts = [(t, 1, 1) for t in tps] + ([(t, t, 1) for t in tps if t > 1] + [(1, t, t) for t in tps if t > 1]
                                          if m.is_moe else [])  # fmt: skip
    for t, ep, adp in layouts:
        size = t * adp
        if size > gpus or gpus % size or t > domain:
            continue
        n = gpus // size
        label = f"{n} x TP{t}" + (f" EP{ep}" if ep > 1 else "") + (f" ADP{adp}" if adp > 1 else "")
        out.append((label, {"tp": t, "ep": ep, "attention_dp": adp}, size))
    return out


def _disaggregated(gpus: int, tps: Sequence[int], unit_max: int) -> list[tuple[str, dict[str, Any], int]]:
    """(label, simulate keywords, devices a unit) of each disaggregated unit of at most
    ``unit_max`` devices (``np`` prefill instances of TP ``pt``, ``nd`` decode of TP ``dt``) whose
    copies fill ``gpus``."""
    out = []
    for pt in tps:
        for dt in tps:
            for n_p in range(1, unit_max // pt + 1):
                for n_d in range(1, (unit_max - n_p * pt) // dt + 1):
                    size = n_p * pt + n_d * dt
                    if gpus % size:
                        continue
                    copies = gpus // size
                    label = (f"{copies} x ({n_p}P TP{pt} + {n_d}D TP{dt})" if copies > 1
                             else f"{n_p}P TP{pt} + {n_d}D TP{dt}")  # fmt: skip
                    kw = {"prefill_instances": n_p, "decode_instances": n_d, "prefill_tp": pt, "decode_tp": dt,
                          "tp": dt}  # fmt: skip
                    out.append((label, kw, size))
    return out


def _ladder(
    kind: str, label: str, kw: dict[str, Any], unit: int, gpus: int, m: Any, hardware: str, share: float,
    workload: Mapping[str, Any], points: list[PlanPoint], refused: list[tuple[str, str]],
) -> None:  # fmt: skip
    """The plan at each rung of ``CLIENT_LADDER`` (clients per instance or unit) until one misses
    the objectives (that one kept, so the frontier shows where it breaks) or adds less than
    ``SATURATED`` of throughput; a plan the simulator refuses is listed with the reason."""
    from .serving.capacity import meets, miss
    from .serving.simulator import simulate

    copies = gpus // unit
    q = workload["quantile"]
    for c in CLIENT_LADDER:
        requests = min(MAX_REQUESTS, max(MIN_REQUESTS, REQUESTS_PER_CLIENT * c))
        args = {**kw, "concurrency": c, "requests": requests}
        try:
            s = simulate(m, hardware, **args)
        except RidgelineError as e:
            refused.append((label, str(e).splitlines()[0]))
            return
        tpot_mean = s.tpot_s["mean"] if s.tpot_s["count"] else float("nan")
        ok = meets(s, share)
        points.append(PlanPoint(
            kind=kind, label=label, clients=c * copies, copies=copies,
            simulate_kwargs={k: v for k, v in args.items() if k != "catalog"},
            tok_s_per_gpu=s.output_tokens / s.duration_s / unit, tok_s_per_user=1.0 / tpot_mean,
            ttft_q_s=s.ttft_s[q], tpot_q_s=s.tpot_s[q], meets=ok, miss="" if ok else miss(s, share),
        ))  # fmt: skip
        if not ok or (
            len(points) > 1
            and points[-2].label == label
            and points[-1].tok_s_per_gpu < (1 + SATURATED) * points[-2].tok_s_per_gpu
        ):
            return
