"""``Simulation``: what one simulated run returns (request counts, TTFT/TPOT/ITL/E2E summaries,
throughput, goodput, energy and cost, the records and the time series when asked), and its text."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from .._fmt import sig
from .._fmt import table as _table
from ..engine.cost import missing_price, offer_text, price_of, usd_per_million
from ..engine.result import POWER_SOURCE

_METRICS = ("ttft", "tpot", "itl", "e2e")


def _stats(summary: Mapping[str, Any]) -> dict[str, Any]:
    """A metric's summary from the core; an empty one (no request had the metric: TPOT with one
    output token) has a count of 0 and no value for any statistic (None, null in JSON), never 0."""
    out = dict(summary)
    if not out.get("count"):
        out.update({k: None for k in out if k != "count"})
    return out


def pool_devices(pools: Iterable[Mapping[str, Any]]) -> int:
    """Devices of every instance of ``pools`` (a cluster's): instances x tp x attention_dp x pp."""
    return sum(int(p["instances"]) * int(p["tp"]) * int(p.get("attention_dp", 1)) * int(p.get("pp", 1))
               for p in pools)  # fmt: skip


@dataclass(frozen=True)
class Simulation:
    """One simulated serving run. Times in seconds; each metric summary holds count, mean, min,
    p50, p90, p99 and max (quantiles from a streamed log histogram, within 0.013%)."""

    model: str
    hardware: str
    runtime: Optional[str]
    calibration: str
    calibration_note: str
    runtime_note: str
    plan: Mapping[str, Any]
    scheduler: Mapping[str, Any]
    workload: Mapping[str, Any]
    counts: Mapping[str, int]
    ttft_s: Mapping[str, float]
    tpot_s: Mapping[str, float]
    itl_s: Mapping[str, float]
    e2e_s: Mapping[str, float]
    duration_s: float
    output_tokens: int
    prompt_tokens: int
    steps: int
    preemptions: int
    good_requests: int
    #: KV blocks of one instance of each pool (aggregated: one; disaggregated: prefill, decode).
    kv_blocks: tuple[int, ...]
    max_model_len: int
    max_running: int
    slo: Mapping[str, Optional[float]]
    warnings: tuple[str, ...]
    #: Instances of each pool, and (disaggregated) the KV transfers and their total seconds.
    cluster: Mapping[str, Any] = field(default_factory=dict)
    #: Prompt tokens read from a prefix cache instead of computed.
    cached_tokens: int = 0
    transfers: int = 0
    transfer_s: float = 0.0
    requests: Any = field(default=None, repr=False)
    series: Any = field(default=None, repr=False)
    #: The inter-token latencies as a histogram (Polars: itl_s, tokens), for a CDF.
    itl_hist: Any = field(default=None, repr=False)
    #: The offers a cost is reckoned from (cheapest first: on-demand rentals, or purchase prices
    #: amortised over ``amortise_years``), or the price given per device-hour.
    offers: tuple[Mapping[str, Any], ...] = field(default=(), repr=False)
    price_per_hour: Optional[float] = None
    amortise_years: Optional[float] = None
    price_tier: Optional[str] = None
    #: The engine's energy over the run (joules, mean watts, per pool), or why there is none.
    energy_run: Any = field(default=None, repr=False)
    #: Whose fit priced the run, in words (``Estimate.basis_from``).
    basis_from: str = ""

    @property
    def basis(self) -> str:
        """What the numbers rest on: ``measured``, ``borrowed`` or ``bound`` (``Estimate.basis``)."""
        from ..engine.fits import basis

        return basis(self.calibration)

    @property
    def energy(self) -> dict[str, Any]:
        """The fleet's energy over the run (spec 60): every device draws its idle power from the first
        arrival to the end of the last step, and over each step ``u (TDP - idle)`` more, ``u`` the
        step's busy fraction from its operators' compute- and memory-roof times. Joules in all,
        mean watts, joules per output token and per finished request, per pool its busy seconds
        and mean busy fraction; ``{"missing": why}`` where the device has no sourced idle or TDP
        power or the memory-bound share is not fitted."""
        e = self.energy_run
        if e is None or isinstance(e, str):
            return {"missing": e or "not simulated with the power model"}
        out: dict[str, Any] = {**e, "pools": [dict(p) for p in e["pools"]], "source": POWER_SOURCE}
        if self.output_tokens:
            out["j_per_output_token"] = e["energy_j"] / self.output_tokens
        if self.finished:
            out["j_per_request"] = e["energy_j"] / self.finished
        return out

    @property
    def devices(self) -> int:
        """Devices of every instance of every pool."""
        return pool_devices(self.cluster.get("pools", ()))

    @property
    def cost_tok_s(self) -> float:
        """Prompt and output tokens handled per second over the run (the blended price's basis)."""
        return (self.prompt_tokens + self.output_tokens) / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def cost(self) -> dict[str, Any]:
        """What the fleet costs to rent over the run (spec 60): the price per device-hour (given, else
        the cheapest published on-demand offer), per hour for all devices, and per million output
        tokens at the run's output rate; ``{"missing": why}`` without a price."""
        priced = price_of(self.price_per_hour, self.offers)
        if priced is None:
            return {"missing": missing_price(self.hardware, self.amortise_years, self.price_tier)}
        price, offer = priced
        out: dict[str, Any] = {"usd_per_device_hour": price, "devices": self.devices,
                               "usd_per_hour": price * self.devices, "offer": offer}  # fmt: skip
        if self.output_tok_s > 0:
            out["usd_per_million_output_tokens"] = usd_per_million(price * self.devices, self.output_tok_s)
            # every token the fleet handled, prompts and outputs, as the providers' blended price reads
            out["usd_per_million_tokens"] = usd_per_million(price * self.devices, self.cost_tok_s)
        return out

    @property
    def finished(self) -> int:
        """Requests that ended with tokens (completed or length-capped)."""
        return int(self.counts["completed"] + self.counts["length_capped"])

    @property
    def rejected(self) -> int:
        """Requests refused, every cause (``rejected_causes``)."""
        return sum(self.rejected_causes.values())

    @property
    def rejected_causes(self) -> dict[str, int]:
        """Refused requests by cause (prompt too long, budget too long, prompt over budget, decode
        KV), the causes with none left out."""
        return {k[len("rejected_") :]: int(v) for k, v in self.counts.items() if k.startswith("rejected") and v}

    @property
    def unfinished(self) -> int:
        """Requests still waiting, running or in transfer when the run stopped (at the horizon)."""
        c = self.counts
        return int(c["waiting"] + c["running"] + c.get("transferring", 0))

    @property
    def within_slo(self) -> float:
        """The share of the requests sent that completed within every SLO given: a request
        rejected, length-capped or unfinished is a miss, never left out of the count."""
        sent = int(self.counts["injected"])
        return self.good_requests / sent if sent else 0.0

    @property
    def request_rate_req_s(self) -> float:
        return self.finished / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def output_tok_s(self) -> float:
        return self.output_tokens / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def total_tok_s(self) -> float:
        return (self.output_tokens + self.prompt_tokens) / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def goodput_req_s(self) -> float:
        """Completed requests meeting every SLO given, per second."""
        return self.good_requests / self.duration_s if self.duration_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("requests", "series", "itl_hist")}
        out.update(basis=self.basis, request_rate_req_s=self.request_rate_req_s, output_tok_s=self.output_tok_s,
                   total_tok_s=self.total_tok_s, goodput_req_s=self.goodput_req_s, cost=self.cost,
                   energy=self.energy)  # fmt: skip
        out.pop("offers", None)
        out.pop("energy_run", None)
        result: dict[str, Any] = json.loads(json.dumps(out, default=list))
        return result

    def summary(self) -> str:
        """A readable summary with units."""
        s, c, w = self.scheduler, self.counts, self.workload
        rejected = self.rejected
        causes = ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in self.rejected_causes.items())
        causes = f" ({causes})" if causes else ""
        kv = " / ".join(f"{b:,}" for b in self.kv_blocks)
        adp = any(p.get("attention_dp", 1) > 1 for p in self.cluster.get("pools", ()))
        pipes = any(p.get("pp", 1) > 1 for p in self.cluster.get("pools", ()))
        table = [f"  {'':<10}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}{'max':>10}"]
        for name, st in (
            ("TTFT ms", self.ttft_s),
            ("TPOT ms", self.tpot_s),
            ("ITL ms", self.itl_s),
            ("E2E s", self.e2e_s),
        ):
            k = 1.0 if name.endswith(" s") else 1e3
            if not st["count"]:
                table.append(f"  {name:<10}{'-':>10}")
                continue
            vals = "".join(f"{sig(st[q] * k):>10}" for q in ("mean", "p50", "p90", "p99", "max"))
            table.append(f"  {name:<10}{vals}")
        rows = [
            ("throughput", f"{sig(self.request_rate_req_s)} req/s, {sig(self.output_tok_s)} output tok/s, "
             f"{sig(self.total_tok_s)} total tok/s over {sig(self.duration_s)} s"
             + (f"; goodput {sig(self.goodput_req_s)} req/s ({self.good_requests:,} of {c['injected']:,} within "
                + ", ".join(f"{k.upper()} {v:g} ms" for k, v in self.slo.items() if v is not None) + ")"
                if any(v is not None for v in self.slo.values()) else "")),
            ("requests", f"{c['injected']:,} sent, {c['completed']:,} completed, {c['length_capped']:,} length-capped, "
             f"{rejected:,} rejected{causes}, {c['waiting'] + c['running']:,} in flight; "
             f"{self.preemptions:,} preemptions; at most {self.max_running:,} running on an instance"
             + (f"; {self.transfers:,} KV transfers, {sig(self.transfer_s / max(self.transfers, 1) * 1e3)} ms each"
                if self.transfers else "")
             + (f"; {self.cached_tokens:,} prompt tokens read from the prefix cache" if self.cached_tokens else "")),
            ("workload", w["describe"]),
            ("plan", f"{self.cluster['describe']}; scheduler {s['max_num_batched_tokens']} tokens a step, "
             f"{s['max_num_seqs']} sequences, KV {kv} blocks of {s['block_size']} "
             + ("an attention-DP rank (each its own scheduler and KV)" if adp
                else "a pipeline virtual engine (each its own scheduler and KV)" if pipes else "an instance") + ", "
             + ("chunked prefill" if s["chunked_prefill"] else "whole prompts")
             + (", mixed steps" if s["mixed"] else ", prefill before decode")
             + (", whole-sequence KV reserved" if s["reserve_full"] else "")),
            ("energy", _energy_line(self.energy)),
            ("cost", _cost_line(self.cost)),
            ("runtime", self.runtime_note if self.runtime else "none"),
            ("calibration", f"{self.calibration}: {self.calibration_note}"),
        ]  # fmt: skip
        lines = [f"{self.model} on {self.hardware}", *table, _table(rows)]
        lines += [f"  warning: {x}" for x in self.warnings]
        return "\n".join(lines)


def _energy_line(e: Mapping[str, Any]) -> str:
    if "missing" in e:
        return f"missing: {e['missing']}"
    per = [f"{sig(e[k])} J per {what}" for k, what in (("j_per_output_token", "output token"),
                                                       ("j_per_request", "request")) if k in e]  # fmt: skip
    span = e["duration_s"] or 1.0
    busy = ", ".join(f"{sig(p['busy_s'] / (p['instances'] * span) * 100)}% busy at u {sig(p['utilisation'])}"
                     for p in e["pools"])  # fmt: skip
    return (
        f"{', '.join(per)}; mean {sig(e['mean_w'])} W for the fleet ({busy}; idle {sig(e['idle_w'])}, "
        f"TDP {sig(e['tdp_w'])} W a device)"
    )


def _cost_line(c: Mapping[str, Any]) -> str:
    if "missing" in c:
        return f"missing: {c['missing']}"
    where = offer_text(c["offer"])
    m = c.get("usd_per_million_output_tokens")
    t = c.get("usd_per_million_tokens")
    per_m = (
        ""
        if m is None
        else f"${sig(m)} per million output tokens"
        + (f" (${sig(t)} per million tokens in and out), " if t is not None else ", ")
    )
    hour, device = sig(c["usd_per_hour"]), sig(c["usd_per_device_hour"])
    return f"{per_m}${hour} an hour: {c['devices']} devices at ${device} ({where})"
