"""``ridgeline plan``: a fixed GPU budget searched, aggregated against disaggregated."""

from __future__ import annotations

import json
from typing import Any, Optional

import click

from .group import cli


@cli.command("plan")
@click.option("--model", "-m", required=True, help="Bundled Hugging Face id, or a path to config.json.")
@click.option("--hardware", "-H", required=True, help="The device (catalog name or alias).")
@click.option("--gpus", type=int, required=True, help="The GPU budget: every plan uses exactly this many devices.")
@click.option("--prompt", default="1024", show_default=True,
              help="Prompt lengths, as simulate: N, uniform:LO:HI, normal:MEAN:STD[:LO:HI], "
                   "lognormal:MEAN:SIGMA[:LO:HI].")  # fmt: skip
@click.option("--output", default="256", show_default=True, help="Output lengths, as --prompt.")
@click.option("--slo-ttft-ms", type=float, default=None, help="TTFT objective (ms).")
@click.option("--slo-tpot-ms", type=float, default=None, help="TPOT objective (ms).")
@click.option("--min-user-tok-s", type=float, default=None,
              help="Decode speed objective per user (output tokens/s: a TPOT of 1000 / this ms).")  # fmt: skip
@click.option("--percentile", type=float, default=90, show_default=True,
              help="The share of requests (%) that must meet the objectives.")  # fmt: skip
@click.option("--tp", default="1,2,4,8", show_default=True, help="Tensor-parallel degrees to try.")
@click.option(
    "--runtime",
    default=None,
    help="vllm, sglang or trtllm, or several comma-separated, each tried (default: the device's own).",
)
@click.option("--weight-dtype", default=None, help="Weight format(s) to try, comma-separated (as estimate).")
@click.option(
    "--speculative",
    default=None,
    help="Also try every plan speculating so: eagle3, mtp, ngram or draft:MODEL (as simulate).",
)
@click.option("--draft-tokens", type=int, default=None, help="With --speculative: the draft depth.")
@click.option("--acceptance", default=None, help="With --speculative: an acceptance curve file (as simulate).")
@click.option("--no-disaggregate", "disaggregate", flag_value=False, default=True,
              help="Search aggregated plans only.")  # fmt: skip
@click.option("--kv-link-gbs", type=float, default=None,
              help="A disaggregated unit's KV link, GB/s per rank, where units span scale-up domains (default: "
                   "the device's NIC in the catalog, else each unit within one domain, its KV over the scale-up "
                   "link).")  # fmt: skip
@click.option("--kv-link-latency-us", type=float, default=None, help="That link's latency (us), with --kv-link-gbs.")
@click.option("--json", "as_json", is_flag=True, help="The answer and every point as JSON.")
@click.option("--plot", "plot_path", default=None, help="Write the frontier here (.png or .svg).")
@click.option(
    "--emit",
    "emit_dir",
    default=None,
    help="Write the launch files of the best aggregated and disaggregated plans under this folder "
    "(DIR/aggregated, DIR/disaggregated: the runtime's serve commands, its config files, a manifest).",
)
@click.option("--force", is_flag=True, help="Replace an existing --plot file or launch files.")
def plan(
    model: str, hardware: str, gpus: int, prompt: str, output: str, slo_ttft_ms: Optional[float],
    slo_tpot_ms: Optional[float], min_user_tok_s: Optional[float], percentile: float, tp: str,
    runtime: Optional[str], weight_dtype: Optional[str], speculative: Optional[str], draft_tokens: Optional[int],
    acceptance: Optional[str], disaggregate: bool, kv_link_gbs: Optional[float],
    kv_link_latency_us: Optional[float], as_json: bool, plot_path: Optional[str], emit_dir: Optional[str],
    force: bool,
) -> None:  # fmt: skip
    """The best aggregated and disaggregated plans for a fixed number of GPUs under TTFT, TPOT or per-user
    speed objectives, their ratio, and the frontier of output tokens/s per GPU against tokens/s per user."""
    from .._io import check_output
    from ..planner import plan_budget
    from ..sweeps.sweep import parse_axis

    if plot_path is not None:  # before the search, not after it
        check_output(plot_path, force=force, what="plot")
    if emit_dir is not None:  # refused before the search, as --plot
        from ..launch import check_emit_dir

        check_emit_dir(emit_dir, ("aggregated", "disaggregated"), force=force)
    if (kv_link_gbs is None) != (kv_link_latency_us is None):
        raise click.UsageError("--kv-link-gbs and --kv-link-latency-us go together")
    b = plan_budget(model, hardware, gpus, prompt=prompt, output=output, slo_ttft_ms=slo_ttft_ms,
                    slo_tpot_ms=slo_tpot_ms, min_user_tok_s=min_user_tok_s, percentile=percentile,
                    tp=parse_axis("tp", tp), runtime=runtime, weight_dtype=weight_dtype, disaggregate=disaggregate,
                    speculative=speculative, draft_tokens=draft_tokens, acceptance=acceptance,
                    kv_link_gbs=kv_link_gbs, kv_link_latency_us=kv_link_latency_us)  # fmt: skip
    click.echo(json.dumps(b.to_dict(), indent=2) if as_json else b.text())
    if plot_path is not None:
        from .. import plot as plots

        click.echo(f"frontier: {plots.save(plots.budget_frontier(b), plot_path, force=force)}", err=as_json)
    if emit_dir is not None:
        _emit(b, emit_dir, force=force, quiet=as_json)


def _emit(b: Any, emit_dir: str, *, force: bool, quiet: bool) -> None:
    """The launch files of the plan's best points, one folder each."""
    from pathlib import Path

    from ..launch import launch_config

    best = [(k, p) for k in ("aggregated", "disaggregated") if (p := b.best(k)) is not None]
    if not best:
        raise click.UsageError("--emit: no plan meets the objectives, so there is nothing to launch")
    for kind, p in best:
        lc = launch_config(b.model, b.hardware, label=p.label, copies=p.copies, **p.simulate_kwargs)
        paths = lc.write(Path(emit_dir) / kind, force=force)
        click.echo(f"{kind}: {lc.runtime} {lc.version} launch files in {paths[0].parent}", err=quiet)
