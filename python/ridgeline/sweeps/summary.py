"""A sweep's result for people (``ridgeline sweep`` without --out): how many plans were priced,
fit and refused, which plan columns vary, and the best plans by throughput, latency and cost."""

from __future__ import annotations

from typing import Any, Optional

#: The plan columns a summary shows when they vary over the grid, in order.
_PLAN_COLUMNS = ("model", "hardware", "runtime", "weights", "kv_dtype", "speculative", "draft_tokens", "tp", "pp",
                 "ep", "dp", "chunk", "batch", "prompt", "output")  # fmt: skip


def summary(df: Any, top: int = 5, include_bound: bool = False) -> str:
    """A sweep's result for people: how many plans were priced, fit and failed (with the commonest
    reasons), which plan columns vary, and the best fitting plans by throughput and by latency
    (TPOT, then TTFT) with only the varying columns. Numbers rounded, with units. Plans that rest
    on no calibration (``basis`` bound: an optimistic upper bound on speed) are counted apart and
    not ranked beside calibrated ones unless ``include_bound``; a ranking whose plans do not all
    rest on their device's own fit shows the ``basis`` column."""
    import polars as pl

    from .._fmt import ms, sig
    from ..engine.fits import BOUND, MEASURED

    if df.height == 0:
        return "0 plans"
    top = min(top, df.height)  # a list never holds more plans than there are (Polars takes no bigger count)
    priced = df.filter(pl.col("error").is_null())
    fit = priced.filter(pl.col("fits"))
    lines = [f"{df.height:,} plans: {priced.height:,} priced ({fit.height:,} fit in memory, "
             f"{priced.height - fit.height:,} do not), {df.height - priced.height:,} refused"]  # fmt: skip
    if df.height > priced.height:
        reasons = (
            df.filter(pl.col("error").is_not_null())
            .group_by("error")
            .len()
            .sort(["len", "error"], descending=[True, False])
        )
        for r in reasons.head(3).iter_rows(named=True):
            lines.append(f"  refused x{r['len']:,}: {r['error']}")
    varying = [c for c in _PLAN_COLUMNS if c in df.columns and df[c].n_unique() > 1]
    lines.append("varying: " + (", ".join(f"{c} ({df[c].n_unique()})" for c in varying) or "nothing (one plan)"))
    if fit.height == 0:
        lines.append("no priced plan fits in memory")
        return "\n".join(lines)
    bound = fit.filter(pl.col("basis") == BOUND) if "basis" in fit.columns else fit.clear()
    if bound.height and not include_bound:
        where = ", ".join(sorted(set(bound["hardware"].to_list())))
        apart = "not ranked below; --include-bound ranks them, marked"
        lines.append(f"{bound.height:,} plans that fit rest on no calibration ({where}: the efficiency-1 bound, an "
                     f"optimistic upper bound on speed): {apart}")  # fmt: skip
        fit = fit.filter(pl.col("basis") != BOUND)
        if fit.height == 0:
            lines.append("no plan that fits rests on a calibration")
            return "\n".join(lines)
    marked = "basis" in fit.columns and set(fit["basis"].to_list()) != {MEASURED}
    if marked and "basis" not in varying:
        varying = [*varying, "basis"]

    priced_usd = (
        "usd_per_million_output_tokens" in fit.columns
        and fit["usd_per_million_output_tokens"].null_count() < fit.height
    )

    def best(title: str, by: list[str], descending: bool, frame: Any = fit) -> None:
        rows = frame.sort(by, descending=descending, nulls_last=True).head(top)
        lines.append("")
        lines.append(title)
        head = [*varying, "TTFT", "TPOT", "tok/s", "GB/device", "devices", *(["$/M out"] if priced_usd else [])]

        def usd(v: Optional[float]) -> str:
            return "-" if v is None else f"${sig(v)}"

        cells = [["-" if r[c] is None else str(r[c]) for c in varying]
                 + [ms(r["ttft_s"]), ms(None if r["tpot_s"] != r["tpot_s"] else r["tpot_s"]),
                    sig(r["throughput_tok_s"]), sig(r["memory_gb"]), str(r["devices"])]
                 + ([usd(r["usd_per_million_output_tokens"])] if priced_usd else [])
                 for r in rows.iter_rows(named=True)]  # fmt: skip
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
        lines.extend(("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths))).rstrip() for row in [head, *cells])

    best(f"highest throughput (of {fit.height:,} that fit)", ["throughput_tok_s"], True)
    best("lowest latency (TPOT, then TTFT)", ["tpot_s", "ttft_s"], False)
    if priced_usd:
        costed = fit.filter(pl.col("usd_per_million_output_tokens").is_not_null())
        best(f"lowest cost per million output tokens (of {costed.height:,} with a published price; cheapest "
             "on-demand offer)", ["usd_per_million_output_tokens"], False, costed)  # fmt: skip
    lines += ["", "every column: --out results.parquet (or .csv, or file.duckdb:table); --columns lists them"]
    return "\n".join(lines)
