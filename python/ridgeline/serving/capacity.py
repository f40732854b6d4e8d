"""The capacity search: the highest Poisson rate at which a share of requests meets the objectives."""

from __future__ import annotations

from typing import Any, Optional

from .. import _checks
from .._fmt import sig
from ..errors import PlanError
from .result import Simulation
from .simulator import simulate


def quantile_for(share: float) -> str:
    """The streamed quantile (p50, p90, p99) nearest at or above ``share`` of the requests: the one
    a report shows beside an objective held for that share."""
    return "p50" if share <= 0.5 else "p90" if share <= 0.9 else "p99"


def meets(s: Simulation, share: float) -> bool:
    """Whether a run meets its objectives: every request sent completed (none rejected,
    length-capped or unfinished) and at least ``share`` of them within the SLOs."""
    sent = int(s.counts["injected"])
    dropped = s.rejected + int(s.counts["length_capped"]) + s.unfinished
    return sent > 0 and dropped == 0 and s.good_requests >= share * sent


def miss(s: Simulation, share: float) -> str:
    """Why a run misses its objectives, in words: the requests it dropped, and the objective the
    shown quantile broke (empty when it meets them)."""
    sent, c = int(s.counts["injected"]), s.counts
    parts = []
    if s.rejected:
        causes = ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in s.rejected_causes.items())
        parts.append(f"{s.rejected:,} of {sent:,} requests rejected ({causes})")
    if c["length_capped"]:
        parts.append(f"{int(c['length_capped']):,} length-capped")
    if s.unfinished:
        parts.append(f"{s.unfinished:,} unfinished at the horizon")
    if s.good_requests < share * sent:
        q = quantile_for(share)
        broke = [f"{q} {name} {sig(got[q] * 1e3)} ms over {slo:g} ms"
                 for name, got, slo in (("TTFT", s.ttft_s, s.slo.get("ttft")), ("TPOT", s.tpot_s, s.slo.get("tpot")))
                 if slo is not None and got["count"] and got[q] * 1e3 > slo]  # fmt: skip
        parts.append(f"{s.within_slo:.0%} of requests within the SLOs, {share:.0%} needed"
                     + (f" ({', '.join(broke)})" if broke else ""))  # fmt: skip
    return "; ".join(parts)


def max_rate(
    model: Any,
    hardware: Any,
    *,
    share: float,
    slo_ttft_ms: Optional[float] = None,
    slo_tpot_ms: Optional[float] = None,
    rel_tol: float = 0.01,
    **kw: Any,
) -> tuple[float, Simulation]:
    """The highest Poisson rate (requests/s) at which at least ``share`` of the requests sent meet
    the SLOs and none is rejected, length-capped or left unfinished (``meets``), and its
    simulation: the rate doubles from 1 req/s until the share falls below, then is
    bisected to ``rel_tol`` of itself. Every run takes the same workload, seed and plan (``kw``:
    any ``simulate`` argument but the arrivals). The answer is the lower end of the final bracket.

    >>> r, s = max_rate("meta-llama/Llama-3.1-8B", "H100_SXM", share=0.9, slo_ttft_ms=500, slo_tpot_ms=30,
    ...                 requests=200, prompt=1024, output=128)
    >>> s.within_slo >= 0.9 and s.rejected == 0
    True
    """
    share = _checks.number("share", share, positive=True)
    if share > 1:
        raise PlanError(f"share: the share of requests meeting the SLOs, in (0, 1], got {share}")
    if slo_ttft_ms is None and slo_tpot_ms is None:
        raise PlanError("max_rate needs an SLO: slo_ttft_ms and/or slo_tpot_ms")
    tol = _checks.number("rel_tol", rel_tol, positive=True)
    for k in ("rate", "concurrency", "trace"):
        if kw.get(k) is not None:
            raise PlanError(f"{k}: max_rate searches Poisson rates itself; give the workload's lengths and count")

    def run(rate: float) -> Simulation:
        return simulate(model, hardware, rate=rate, slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms, **kw)

    lo, best, missed = 0.0, None, ""
    hi = 1.0
    while True:
        s = run(hi)
        if not meets(s, share):
            missed = miss(s, share)
            break
        lo, best, hi = hi, s, hi * 2
        if hi > 2.0**40:
            raise PlanError(f"max_rate: the SLOs hold at every rate tried (up to 2^40 req/s): the workload's "
                            f"{kw.get('requests') or 'requests'} requests all at once meet them; simulate more "
                            "requests")  # fmt: skip
    while hi - lo > tol * hi:
        mid = (lo + hi) / 2 if lo > 0 else hi / 2
        s = run(mid)
        if meets(s, share):
            lo, best = mid, s
        else:
            hi, missed = mid, miss(s, share)
        if lo == 0 and hi < 1e-6:
            raise PlanError(f"max_rate: even {hi:.2g} req/s misses the objectives: {missed}")
    assert best is not None
    return lo, best
