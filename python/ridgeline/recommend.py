"""``ridgeline recommend``: the cheapest plans that serve a workload within its SLOs (spec 70, 60).

The search runs over devices x tensor-parallel degree; each candidate is pruned by the static
engine first (the model must fit, and a lone request must meet the TTFT and TPOT objectives),
priced at the device's cheapest published offer (``Catalog.offers``: on-demand, or a purchase price
amortised over the years given; a device without
one cannot be ranked by cost and is listed as refused), then sized by the simulator: the highest
Poisson rate one instance serves with ``percentile`` % of requests within the SLOs
(``serving.max_rate``) gives the replicas the target rate needs, and a simulation of that many
replicas behind a least-outstanding router at the target rate confirms it (a replica is added
while it does not). Plans are ranked by cost per million output tokens; the Pareto frontier of
cost against the percentile's TTFT is marked.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, Optional

from . import _checks
from ._fmt import ms, sig
from ._fmt import table as _table
from .catalog import Catalog, default_catalog
from .errors import PlanError, RidgelineError
from .estimate import missing_price, price_of, usd_per_million

#: Replicas added after the sized fleet misses the SLOs in its confirming simulation, at most.
_CONFIRM_STEPS = 3


@dataclasses.dataclass(frozen=True)
class Recommendation:
    """The ranked plans (``plans``: a list of dicts, cheapest first, ``frontier`` marking the
    Pareto plans of cost against TTFT at the percentile), the candidates refused with the reason,
    and the search's inputs."""

    model: str
    workload: dict[str, Any]
    plans: list[dict[str, Any]]
    refused: list[dict[str, Any]]

    def __repr__(self) -> str:
        best = self.plans[0] if self.plans else None
        first = (f", best={best['hardware']} TP{best['tp']} x{best['replicas']} "
                 f"${best['usd_per_million_output_tokens']:.3g}/M out" if best else "")  # fmt: skip
        return f"Recommendation(model={self.model!r}, plans={len(self.plans)}, refused={len(self.refused)}{first})"

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "workload": self.workload, "plans": self.plans, "refused": self.refused}

    def frame(self) -> Any:
        """The plans as a Polars DataFrame."""
        import polars as pl

        return pl.DataFrame(self.plans)

    def summary(self, top: int = 10, refused: bool = False) -> str:
        w = self.workload
        slo = ", ".join(f"{k} {w[f'slo_{k.lower()}_ms']:g} ms" for k in ("TTFT", "TPOT") if w[f"slo_{k.lower()}_ms"])
        lines = [f"{self.model}: {w['rate']:g} req/s, prompt {w['prompt']}, output {w['output']} tokens; "
                 f"p{w['percentile']:g} within {slo}"]  # fmt: skip
        if not self.plans:
            lines.append("no plan meets the SLOs" + (": see the refused candidates below" if self.refused else ""))
        else:
            q = w["shown_quantile"]
            head = ["", "hardware", "TP", "replicas", "devices", "$/M out", "$/hour", f"{q} TTFT", f"{q} TPOT",
                    "within SLO", "calibration", "offer"]  # fmt: skip
            cells = [["*" if r["frontier"] else "", r["hardware"], str(r["tp"]), str(r["replicas"]), str(r["devices"]),
                      f"${sig(r['usd_per_million_output_tokens'])}", f"${sig(r['usd_per_hour'])}",
                      ms(r["ttft_q_s"]), ms(r["tpot_q_s"]), f"{r['within_slo']:.0%}", r["calibration"].split(" (")[0],
                      f"{r['offer']['provider']}, {r['offer']['as_of']}"] for r in self.plans[:top]]  # fmt: skip
            widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
            lines += [("  " + "  ".join(c.ljust(wd) for c, wd in zip(row, widths))).rstrip() for row in [head, *cells]]
            lines.append(f"  * on the Pareto frontier of cost and {q} TTFT; {len(self.plans)} plans meet the SLOs")
        if self.refused and refused:
            lines.append("refused:")
            lines.append(_table([(f"{r['hardware']} TP {r['tp']}", r["reason"]) for r in self.refused]))
        elif self.refused:
            lines.append(f"{len(self.refused)} candidates refused (--verbose lists each with its reason)")
        return "\n".join(lines)


def recommend(
    model: str,
    *,
    rate: float,
    slo_ttft_ms: Optional[float] = None,
    slo_tpot_ms: Optional[float] = None,
    percentile: float = 90,
    prompt: int = 1024,
    output: int = 256,
    hardware: Optional[Sequence[str]] = None,
    tp: Sequence[int] = (1, 2, 4, 8),
    weight_dtype: Optional[str] = None,
    runtime: Optional[str] = None,
    requests: int = 500,
    max_devices: int = 64,
    progress: Optional[Callable[[int, int], Any]] = None,
    catalog: Optional[Catalog] = None,
    amortise_years: Optional[float] = None,
) -> Recommendation:
    """The plans that serve ``rate`` requests/s of ``prompt`` + ``output`` tokens with
    ``percentile`` % of requests within ``slo_ttft_ms`` and ``slo_tpot_ms``, cheapest first.

    Args:
        hardware: the devices to search (default: every catalog device with a published
            on-demand price).
        tp: the tensor-parallel degrees to try (over the device's scale-up link, or its host link
            where it has none, as ``estimate`` prices them).
        requests: requests per simulated run (more: steadier percentiles, slower search).
        max_devices: the most devices a plan may take.
        progress: called with (candidates done, candidates) as the search goes.
        amortise_years: rank by the devices' cheapest published purchase prices spread over this
            many years, instead of their on-demand rentals (``Catalog.offers``).
    """
    from .estimate import estimate
    from .serving import max_rate, simulate

    cat = catalog or default_catalog()
    rate = _checks.number("rate", rate, positive=True)
    pct = _checks.number("percentile", percentile, positive=True)
    if pct > 100:
        raise PlanError(f"percentile: the share of requests within the SLOs, in (0, 100], got {percentile}")
    if slo_ttft_ms is None and slo_tpot_ms is None:
        raise PlanError("recommend needs an SLO: --slo-ttft-ms and/or --slo-tpot-ms")
    slo = {k: None if v is None else _checks.number(k, v, positive=True)
           for k, v in (("slo_ttft_ms", slo_ttft_ms), ("slo_tpot_ms", slo_tpot_ms))}  # fmt: skip
    prompt, output = _checks.whole("prompt", prompt, 1), _checks.whole("output", output, 2)
    requests, max_devices = _checks.whole("requests", requests, 10), _checks.whole("max_devices", max_devices, 1)
    tps = sorted({_checks.whole("tp", t, 1) for t in tp})
    years = None if amortise_years is None else _checks.number("amortise_years", amortise_years, positive=True)
    names = [cat.resolve(h) for h in hardware] if hardware else [n for n in cat.names() if cat.offers(n, years)]
    if not names:
        raise PlanError("hardware: no device to search")
    # a serving question: vLLM unless told otherwise (llama.cpp, the default on some parts, has no
    # continuous-batching scheduler in the simulator)
    plan_kw = {"weight_dtype": weight_dtype, "runtime": runtime or "vllm", "catalog": cat}
    # the simulator streams p50, p90 and p99: the plans show the nearest at or above the percentile
    shown = "p50" if pct <= 50 else "p90" if pct <= 90 else "p99"
    workload = {"rate": rate, "prompt": prompt, "output": output, "percentile": pct, **slo, "requests": requests,
                "shown_quantile": shown, "amortise_years": years}  # fmt: skip
    candidates = [(h, t) for h in names for t in tps]
    plans, refused = [], []
    for i, (hw, t) in enumerate(candidates):
        if progress is not None:
            progress(i, len(candidates))
        why, plan = _candidate(model, hw, t, cat, workload, plan_kw, max_devices, estimate, max_rate, simulate)
        if why is not None:
            refused.append({"hardware": hw, "tp": t, "reason": why})
        elif plan is not None:
            plans.append(plan)
    if progress is not None:
        progress(len(candidates), len(candidates))
    plans.sort(key=lambda r: (r["usd_per_million_output_tokens"], r["ttft_q_s"]))
    best_ttft = math.inf
    for r in plans:  # cheapest first: a plan is on the frontier when no cheaper one is faster
        r["frontier"] = r["ttft_q_s"] < best_ttft
        best_ttft = min(best_ttft, r["ttft_q_s"])
    return Recommendation(model=str(model), workload=workload, plans=plans, refused=refused)


Refusal = tuple[Optional[str], Optional[dict[str, Any]]]


def _candidate(model: str, hw: str, tp: int, cat: Catalog, w: dict[str, Any], plan_kw: dict[str, Any],
               max_devices: int, estimate: Any, max_rate: Any, simulate: Any) -> Refusal:  # fmt: skip
    """One device and TP degree: (why it is refused, None) or (None, its plan)."""
    offers = cat.offers(hw, w["amortise_years"])
    if not offers:
        return f"{missing_price(hw, w['amortise_years']).split(';')[0]}: cannot be ranked by cost", None
    slo = {k: w[k] for k in ("slo_ttft_ms", "slo_tpot_ms")}
    try:
        e = estimate(model, hw, tp=tp, prompt=w["prompt"], output=w["output"], allow_no_fit=True, **plan_kw)
    except RidgelineError as err:
        return str(err).splitlines()[0], None
    if not e.fits:
        used, usable = (e.memory[k] / 1e9 for k in ("total_bytes", "budget_bytes"))
        return f"does not fit ({used:.1f} GB a device, {usable:.1f} usable)", None
    for key, got in (("slo_ttft_ms", e.ttft_s), ("slo_tpot_ms", e.tpot_s)):
        if slo[key] is not None and got is not None and got * 1e3 > slo[key]:
            return f"a lone request misses the {key[4:8].upper()} objective ({sig(got * 1e3)} ms)", None
    # the workload's own length bounds a sequence: the fleet is sized for it, not the model's maximum
    sim_kw = {"tp": tp, "prompt": w["prompt"], "output": w["output"], "requests": w["requests"],
              "max_model_len": w["prompt"] + w["output"], **slo, **plan_kw}  # fmt: skip
    share = w["percentile"] / 100
    try:
        per_instance, _ = max_rate(model, hw, share=share, **sim_kw)
        if per_instance <= 0:
            return "one instance cannot serve 1 req/s within the SLOs", None
        replicas = math.ceil(w["rate"] / per_instance)
        for _ in range(_CONFIRM_STEPS + 1):
            if replicas * tp > max_devices:
                return f"needs {replicas} replicas: {replicas * tp} devices, more than max_devices {max_devices}", None
            n = max(w["requests"], w["requests"] * replicas)
            s = simulate(model, hw, instances=replicas, router="least_outstanding", rate=w["rate"],
                         **{**sim_kw, "requests": n})  # fmt: skip
            if s.finished and s.good_requests >= share * s.finished:
                break
            replicas += 1
        else:
            return f"the sized fleet misses the SLOs in simulation after {_CONFIRM_STEPS} added replicas", None
    except RidgelineError as err:
        return str(err).splitlines()[0], None
    price, offer = price_of(None, offers) or (0.0, None)  # offers is not empty: checked above
    devices = replicas * tp
    q = w["shown_quantile"]
    return None, {
        "hardware": hw, "tp": tp, "replicas": replicas, "devices": devices,
        "usd_per_device_hour": price, "usd_per_hour": price * devices, "offer": offer,
        "usd_per_million_output_tokens": usd_per_million(price * devices, s.output_tok_s),
        "per_instance_rate": per_instance, "within_slo": s.good_requests / s.finished,
        "ttft_q_s": float(s.ttft_s[q]), "tpot_q_s": float(s.tpot_s[q]),
        "output_tok_s": s.output_tok_s, "runtime": s.runtime, "calibration": e.calibration, "frontier": False,
    }  # fmt: skip
