"""``ridgeline recommend``: the cheapest plans that serve a workload within its objectives."""

from __future__ import annotations

import json
import sys
from typing import Any, Optional

import click

from .group import _ray_backend, cli
from .options import INCLUDE_BOUND, RAY, plan_options


@cli.command()
@click.option("--model", "-m", required=True, help="Bundled Hugging Face id, or a path to config.json.")
@click.option("--rate", type=float, default=None, help="Requests per second to serve (Poisson arrivals).")
@click.option(
    "--concurrency",
    type=int,
    default=None,
    help="Or clients to serve, each sending its next request when its last ends.",
)
@click.option("--slo-ttft-ms", type=float, default=None, help="TTFT objective (ms).")
@click.option("--slo-tpot-ms", type=float, default=None, help="TPOT objective (ms).")
@click.option("--percentile", type=float, default=90, show_default=True,
              help="The share of requests (%) that must meet the objectives.")  # fmt: skip
@click.option(
    "--prompt",
    default="1024",
    show_default=True,
    help="Prompt lengths, as simulate: N, uniform:LO:HI, normal:MEAN:STD[:LO:HI], lognormal:MEAN:SIGMA[:LO:HI].",
)
@click.option("--output", default="256", show_default=True, help="Output lengths, as --prompt.")
@click.option(
    "--hardware", "-H", multiple=True,
    help="Devices to search (repeatable; default: every device with a published on-demand price).",
)  # fmt: skip
@click.option("--tp", default="1,2,4,8", show_default=True, help="Tensor-parallel degrees to try.")
@click.option("--weight-dtype", default=None, help="Weight format(s) to try, comma-separated (as estimate).")
@click.option("--runtime", default=None,
              help="vllm, sglang and/or trtllm (comma-separated): each with its calibration and scheduler "
                   "(default: each device's own, as estimate picks it).")  # fmt: skip
@click.option("--disaggregate", is_flag=True, help="Also try each sized fleet split into prefill and decode pools.")
@click.option(
    "--kv-link-gbs",
    type=float,
    default=None,
    help="With --disaggregate: the KV link's GB/s per rank (default: the device's scale-out link).",
)
@click.option(
    "--kv-link-latency-us",
    type=float,
    default=None,
    help="With --disaggregate: the KV link's latency (default: the device's scale-out link).",
)
@click.option(
    "--kv-handoff-us",
    type=float,
    default=None,
    help="With --disaggregate: the transfer engine's hand-off a transfer, in us (default: the runtime's fit).",
)
@click.option("--speculative", default=None,
              help="Also try every candidate speculating: eagle3, eagle3:CONFIG, mtp, ngram or draft:MODEL (as "
                   "simulate takes it), listed with its method and depth (MTP2).")  # fmt: skip
@click.option("--draft-tokens", type=int, default=None, help="Draft tokens a step, with --speculative.")
@click.option(
    "--acceptance",
    default=None,
    help="Acceptance curve CSV for --speculative (default: the bundled curve, as estimate).",
)
@click.option("--requests", type=int, default=500, show_default=True, help="Requests per simulated run.")
@click.option("--max-devices", type=int, default=64, show_default=True, help="The most devices a plan may take.")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="Plans to list.")
@click.option("--verbose", "-v", is_flag=True, help="List each refused candidate with its reason.")
@click.option("--json", "as_json", is_flag=True, help="Every plan and refusal as JSON.")
@click.option("--plot", "plot_path", default=None, help="Write the cost-TTFT frontier here (.png or .svg).")
@click.option("--force", is_flag=True, help="Replace an existing --plot file.")
@INCLUDE_BOUND
@plan_options("recommend", only=("price_tier", "amortise_years"))
@click.option("--emit", "emit_dir", default=None,
              help="Write the cheapest plan's launch files here (the runtime's serve command for one unit, its "
                   "config files and a manifest, as plan --emit).")  # fmt: skip
@RAY
def recommend(
    model: str, rate: Optional[float], concurrency: Optional[int], slo_ttft_ms: Optional[float],
    slo_tpot_ms: Optional[float], percentile: float,
    prompt: str, output: str, hardware: tuple[str, ...], tp: str, weight_dtype: Optional[str],
    runtime: Optional[str], disaggregate: bool, kv_link_gbs: Optional[float], kv_link_latency_us: Optional[float],
    kv_handoff_us: Optional[float], requests: int, max_devices: int, top: int, verbose: bool,
    as_json: bool, plot_path: Optional[str], force: bool, include_bound: bool, amortise_years: Optional[float],
    price_tier: Optional[str], emit_dir: Optional[str],
    ray_address: Optional[str], speculative: Optional[str], draft_tokens: Optional[int], acceptance: Optional[str],
) -> None:  # fmt: skip
    """The cheapest plans (device, runtime, weights, TP/EP, replicas, prefill/decode split) that serve a rate
    within TTFT and TPOT objectives, with the cost-TTFT Pareto frontier."""
    from .._io import check_output
    from ..recommend import recommend as run
    from ..sweeps.sweep import parse_axis

    if plot_path is not None:  # before the search, not after it
        check_output(plot_path, force=force, what="plot")
    if emit_dir is not None:
        from ..launch import check_emit_dir

        check_emit_dir(emit_dir, force=force)
    bar = click.progressbar(length=1, label="candidates", file=sys.stderr) if sys.stderr.isatty() else None

    def progress(done: int, total: int) -> None:
        if bar is not None:
            bar.length = total
            bar.update(done - bar.pos)

    r = run(model, rate=rate, concurrency=concurrency, slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms,
            percentile=percentile, prompt=prompt, output=output, hardware=list(hardware) or None,
            tp=parse_axis("tp", tp), weight_dtype=weight_dtype, runtime=runtime, disaggregate=disaggregate,
            kv_link_gbs=kv_link_gbs, kv_link_latency_us=kv_link_latency_us, kv_handoff_us=kv_handoff_us,
            requests=requests,
            max_devices=max_devices, progress=progress, amortise_years=amortise_years, price_tier=price_tier,
            backend=_ray_backend(ray_address), ray_address=ray_address, include_bound=include_bound,
            speculative=speculative, draft_tokens=draft_tokens, acceptance=acceptance)  # fmt: skip
    if bar is not None:
        bar.render_finish()
    click.echo(json.dumps(r.to_dict(), indent=2) if as_json else r.summary(top, refused=verbose))
    if ray_address is not None and r.run is not None:
        click.echo(r.run.text(), err=True)
    if plot_path is not None:
        from .. import plot

        click.echo(f"frontier: {plot.save(plot.frontier(r), plot_path, force=force)}", err=as_json)
    if emit_dir is not None:
        _emit(model, r, emit_dir, force=force, quiet=as_json)


def _emit(model: str, r: Any, emit_dir: str, *, force: bool, quiet: bool) -> None:
    """The cheapest plan's launch files: one unit (an instance, copied ``replicas`` times, or the
    prefill/decode split), at the plan's own load."""
    from ..errors import PlanError
    from ..launch import launch_config
    from ..recommend import plan_label

    if not r.plans:
        raise PlanError("--emit: no plan meets the SLOs, so there is nothing to launch")
    p, w = r.plans[0], r.workload
    disagg = p["prefill_instances"] is not None
    # the unit's share of the load, as the search simulated it: the fleet's, or one replica's
    share = 1 if disagg else p["replicas"]
    load = ({"rate": p["per_instance_rate"] or w["rate"] / share} if w["rate"] is not None
            else {"concurrency": max(1, -(-int(w["concurrency"]) // share))})  # fmt: skip
    lc = launch_config(model, p["hardware"], label=plan_label(p), copies=share, requests=w["requests"],
                       prompt=w["prompt"], output=w["output"], **load, **p["launch"])  # fmt: skip
    paths = lc.write(emit_dir, force=force)
    click.echo(f"{plan_label(p)} on {p['hardware']}: {lc.runtime} {lc.version} launch files in {paths[0].parent}",
               err=quiet)  # fmt: skip
