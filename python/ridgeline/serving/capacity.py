"""The capacity search: the highest Poisson rate at which a share of requests meets the objectives."""

from __future__ import annotations

from typing import Any, Optional

from .. import _checks
from ..errors import PlanError
from .result import Simulation
from .simulator import simulate


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
    """The highest Poisson rate (requests/s) at which at least ``share`` of the requests meet the
    SLOs, and its simulation: the rate doubles from 1 req/s until the share falls below, then is
    bisected to ``rel_tol`` of itself. Every run takes the same workload, seed and plan (``kw``:
    any ``simulate`` argument but the arrivals). The answer is the lower end of the final bracket.

    >>> r, s = max_rate("meta-llama/Llama-3.1-8B", "H100_SXM", share=0.9, slo_ttft_ms=500, slo_tpot_ms=30,
    ...                 requests=200, prompt=1024, output=128)
    >>> s.good_requests >= 0.9 * s.finished
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

    def ok(s: Simulation) -> bool:
        return s.finished > 0 and s.good_requests >= share * s.finished

    lo, best = 0.0, None
    hi = 1.0
    while True:
        s = run(hi)
        if not ok(s):
            break
        lo, best, hi = hi, s, hi * 2
        if hi > 2.0**40:
            raise PlanError(f"max_rate: the SLOs hold at every rate tried (up to 2^40 req/s): the workload's "
                            f"{kw.get('requests') or 'requests'} requests all at once meet them; simulate more "
                            "requests")  # fmt: skip
    while hi - lo > tol * hi:
        mid = (lo + hi) / 2 if lo > 0 else hi / 2
        s = run(mid)
        if ok(s):
            lo, best = mid, s
        else:
            hi = mid
        if lo == 0 and hi < 1e-6:
            raise PlanError(f"max_rate: even {hi:.2g} req/s misses the SLOs for more than {1 - share:.0%} of requests")
    assert best is not None
    return lo, best
