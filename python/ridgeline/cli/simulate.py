"""``ridgeline simulate``: a serving instance under load, one run, a grid of runs or a rate search."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional

import click

from .catalog import _in_ms
from .group import _ray_backend, cli
from .options import RAY, plan_options

_SIM_KEYS = (
    "model", "hardware", "tp", "ep", "attention_dp", "pp", "instances", "router", "prefill_instances",
    "decode_instances", "prefill_tp", "decode_tp", "prefill_ep", "decode_ep", "prefill_attention_dp",
    "decode_attention_dp", "kv_link_gbs", "kv_link_latency_us", "kv_handoff_us", "runtime", "dtype", "weight_dtype",
    "kv_dtype", "rate", "burstiness", "concurrency", "ramp_s", "trace", "requests", "prompt", "output",
    "declare_output", "prefix_groups", "prefix_tokens", "prefix_caching", "seed", "max_model_len", "kv_blocks",
    "slo_ttft_ms", "slo_tpot_ms", "horizon_s", "max_num_batched_tokens", "max_num_seqs", "block_size",
    "chunked_prefill", "mixed", "reserve_full", "memory_fraction", "fraction_of_free", "price_per_hour",
    "amortise_years", "price_tier",
)  # fmt: skip


def _scenario(path: Optional[str]) -> dict[str, Any]:
    """A scenario file (YAML or JSON): a mapping of ``simulate`` arguments, and optionally
    ``grid``: a list of mappings of them, each one run of a grid over the file's other keys."""
    if path is None:
        return {}
    from .._io import load_yaml, read_text
    from ..errors import PlanError

    if not path.strip():
        raise PlanError("scenario: an empty path; give a YAML or JSON file")

    data = load_yaml(read_text(path, what="scenario", error=PlanError), what=f"scenario {path}")
    if not isinstance(data, dict):
        raise PlanError(f"scenario: {path} must hold a mapping of simulate arguments, got {type(data).__name__}")
    # keys starting with x- hold parts reused through YAML anchors (``x-base: &base {...}``, then
    # ``<<: *base``), as Compose files' extension fields do: not simulate arguments
    data = {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith("x-"))}
    unknown = sorted(str(k) for k in set(data) - {*_SIM_KEYS, "grid"})
    if unknown:
        raise PlanError(f"scenario: {path}: unknown key(s) {', '.join(unknown)} (known: {', '.join(_SIM_KEYS)}, grid)")
    grid = data.get("grid")
    if grid is not None:
        if not isinstance(grid, list) or not grid or not all(isinstance(g, dict) for g in grid):
            raise PlanError(f"scenario: {path}: grid must be a non-empty list of mappings of simulate arguments")
        for i, g in enumerate(grid):
            bad = sorted(set(g) - set(_SIM_KEYS))
            if bad:
                raise PlanError(f"scenario: {path}: grid entry {i + 1}: unknown key(s) {', '.join(bad)}")
    return data


@cli.command()
@click.option(
    "--scenario",
    type=click.Path(dir_okay=False),
    default=None,
    help="YAML/JSON file of simulate arguments (model, hardware, rate, ...); flags given override it.",
)
@click.option("--model", "-m", default=None, help="Bundled Hugging Face id, or a path to config.json.")
@click.option("--hardware", "-H", default=None, help="Catalog device name or alias.")
@click.option("--instances", type=int, default=None, help="Identical instances behind the router (default 1).")
@click.option(
    "--router",
    type=click.Choice(["round_robin", "least_outstanding", "least_kv", "prefix_affinity"]),
    default=None,
    help="How requests are sent to instances (default round_robin).",
)
@click.option("--prefill-instances", type=int, default=None, help="Disaggregated: prefill instances.")
@click.option("--decode-instances", type=int, default=None, help="Disaggregated: decode instances.")
@click.option("--prefill-tp", type=int, default=None, help="Disaggregated: TP of a prefill instance (default --tp).")
@click.option("--decode-tp", type=int, default=None, help="Disaggregated: TP of a decode instance (default --tp).")
@click.option("--prefill-ep", type=int, default=None, help="Disaggregated: EP of a prefill instance (default --ep).")
@click.option("--decode-ep", type=int, default=None, help="Disaggregated: EP of a decode instance (default --ep).")
@click.option(
    "--prefill-attention-dp",
    type=int,
    default=None,
    help="Disaggregated: attention-DP ranks of a prefill instance (default --attention-dp).",
)
@click.option(
    "--decode-attention-dp",
    type=int,
    default=None,
    help="Disaggregated: attention-DP ranks of a decode instance (default --attention-dp).",
)
@click.option(
    "--kv-link-gbs",
    type=float,
    default=None,
    help="Disaggregated: GB/s per rank the KV moves at (default: the catalog's scale-out link).",
)
@click.option("--kv-link-latency-us", type=float, default=None, help="Disaggregated: KV transfer latency in us.")
@click.option(
    "--kv-handoff-us",
    type=float,
    default=None,
    help="Disaggregated: the transfer engine's hand-off a transfer, in us (default: the runtime's fit on its "
    "disaggregated runs).",
)
@click.option("--rate", default=None, help="Open loop: requests per second (Poisson); a list (2,4,8) sweeps the rates.")
@click.option("--burstiness", type=float, default=None, help="Gamma arrivals: the gaps' coefficient of variation.")
@click.option("--concurrency", type=int, default=None, help="Closed loop: clients, each sending when its last ends.")
@click.option("--ramp-s", type=float, default=None, help="Closed loop: the clients start evenly over this many s.")
@click.option("--trace", default=None, help="CSV/JSONL of arrival_s, prompt_tokens, output_tokens[, max_tokens].")
@click.option("--requests", type=int, default=None, help="Requests to send (default 1000).")
@click.option(
    "--prompt",
    default=None,
    help="Prompt lengths: N, uniform:LO:HI, normal:MEAN:STD[:LO:HI], lognormal:MEAN:SIGMA[:LO:HI] (default 1024).",
)
@click.option("--output", default=None, help="Output lengths, as --prompt (default 256).")
@click.option(
    "--declare-output/--no-declare-output",
    default=None,
    help="Requests declare their output length as max_tokens (default yes, as benchmark clients).",
)
@click.option("--seed", type=int, default=None, help="Seed of the one generator (default 0).")
@click.option("--prefix-groups", type=int, default=None, help="Shared prompt prefixes the requests draw from.")
@click.option("--prefix-tokens", type=int, default=None, help="Tokens of each shared prefix.")
@click.option("--prefix-caching/--no-prefix-caching", default=None, help="Cache shared prefixes (runtime default).")
@click.option("--max-num-batched-tokens", type=int, default=None, help="Token budget per step (runtime default).")
@click.option("--max-num-seqs", type=int, default=None, help="Requests running at once (runtime default).")
@click.option("--block-size", type=int, default=None, help="Tokens per KV block (runtime default).")
@click.option("--chunked-prefill/--no-chunked-prefill", default=None, help="Split prompts across steps.")
@click.option("--mixed/--no-mixed", default=None, help="Prefill chunks share steps with decodes.")
@click.option(
    "--reserve-full/--no-reserve-full", default=None, help="Admission reserves the whole sequence's KV (no preemption)."
)
@click.option("--memory-fraction", type=float, default=None, help="Memory share the runtime takes (runtime default).")
@click.option("--max-model-len", type=int, default=None, help="Longest sequence (default: the model's).")
@click.option("--kv-blocks", type=int, default=None, help="KV blocks of the instance (default: from memory).")
@click.option("--slo-ttft-ms", type=float, default=None, help="TTFT objective for goodput.")
@click.option("--slo-tpot-ms", type=float, default=None, help="TPOT objective for goodput.")
@click.option("--horizon-s", type=float, default=None, help="Stop the clock here.")
@click.option(
    "--out", type=click.Path(file_okay=False), default=None, help="Folder for requests.parquet and series.parquet."
)
@plan_options("simulate")
@click.option("--sample-ms", type=float, default=100.0, show_default=True, help="Time-series interval with --out.")
@click.option("--force", is_flag=True, help="Overwrite files in --out and figures in --plot.")
@click.option(
    "--plot",
    "plot_dir",
    default=None,
    help="Write plots here: TTFT/ITL CDFs and queue/KV over time; with several rates the throughput-latency curve.",
)
@click.option(
    "--format", "fmt", type=click.Choice(["png", "svg"]), default="png", show_default=True, help="Plot format."
)
@click.option(
    "--max-rate",
    "max_share",
    type=float,
    default=None,
    help="Search the highest Poisson rate at which this share (0-1] of the requests sent meets the SLOs, none "
    "rejected, length-capped or unfinished.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--emit", "emit_dir", default=None,
              help="Write the run's launch files here: the runtime's serve command for each instance, its config "
                   "files and a manifest (as plan --emit).")  # fmt: skip
@RAY
def simulate(scenario: Optional[str], out: Optional[str], sample_ms: float, force: bool, plot_dir: Optional[str],
             fmt: str, max_share: Optional[float], as_json: bool, emit_dir: Optional[str], ray_address: Optional[str],
             **flags: Any) -> None:  # fmt: skip
    """Simulate a serving instance under load: TTFT, TPOT, ITL, throughput, goodput.

    --rate 2,4,8 simulates each rate, and a scenario file's grid (a list of mappings of these
    arguments) each entry, at each rate given; with --ray each run is a task on the cluster."""
    from ..errors import PlanError
    from ..serving.simulator import simulate as run
    from ..serving.simulator import simulate_grid

    backend = _ray_backend(ray_address)

    args = _scenario(scenario)
    grid: list[dict[str, Any]] = args.pop("grid", None) or []
    args.update({k: v for k, v in flags.items() if v is not None})
    calibrated = args.pop("calibrated", True)
    for k in ("model", "hardware"):
        if k not in args and not (grid and all(k in g for g in grid)):
            raise PlanError(f"{k}: required (--{k} or the scenario file's {k} key)")
    from .._io import check_folder

    for what, v in (("out", out), ("plot", plot_dir)):
        if v is not None:
            check_folder(v, what=what)
    files = []
    if out is not None:
        files = [Path(out) / "requests.parquet", Path(out) / "series.parquet"]
        there = [str(f) for f in files if f.exists()]
        if there and not force:
            raise PlanError(f"out: {', '.join(there)} already exist(s); pass --force to overwrite")
    if plot_dir is not None:  # the figures a run writes there, checked before it runs
        figures = [Path(plot_dir) / f"{name}.{fmt}" for name in ("latency_cdf", "queue_kv", "rate_curve")]
        there = [str(f) for f in figures if f.exists() or f.is_symlink()]
        if there and not force:
            raise PlanError(f"plot: {', '.join(there)} already exist(s); pass --force to overwrite")
    model, hardware = args.pop("model", None), args.pop("hardware", None)
    rates = _rates(args.pop("rate", None))
    if emit_dir is not None:
        from ..launch import check_emit_dir

        check_emit_dir(emit_dir, force=force)
    if grid or len(rates) > 1 or (emit_dir is not None and max_share is not None):
        if out is not None or max_share is not None or emit_dir is not None:
            what = "out" if out is not None else "--emit" if emit_dir is not None else "--max-rate"
            raise PlanError(f"{what}: one run at a time (a grid, a list of rates or a rate search runs "
                            "several)")  # fmt: skip
        # the grid's entries, each at every rate given (a rate of the entry's own is kept)
        at: list[Optional[float]] = [*rates] or [None]
        runs = [{**({"rate": r} if r is not None else {}), **g} for g in (grid or [{}]) for r in at]
        _grid_run(model, hardware, runs, args, calibrated=calibrated, as_json=as_json, plot_dir=plot_dir,
                  fmt=fmt, ray_address=ray_address)  # fmt: skip
        return
    if max_share is not None:
        from ..serving.capacity import max_rate

        if backend == "ray":
            raise PlanError("--max-rate: its bisection runs one rate after another, here; leave out --ray")

        rate, s = max_rate(model, hardware, share=max_share, calibrated=calibrated, **args)
        if as_json:
            click.echo(json.dumps({"max_rate_req_s": rate, **s.to_dict()}, indent=2))
            return
        slo = ", ".join(f"{k.upper()} {v:g} ms" for k, v in s.slo.items() if v is not None)
        click.echo(f"highest Poisson rate with {max_share:.0%} of requests within {slo}: {rate:.3g} req/s "
                   "(searched to 1%); its run:")  # fmt: skip
        click.echo(s.summary())
        return
    if rates:
        args["rate"] = rates[0]
    detail = out is not None or plot_dir is not None
    kw: dict[str, Any] = {"keep_requests": detail, "sample_s": sample_ms / 1e3 if detail else None,
                          "calibrated": calibrated}  # fmt: skip
    if backend == "ray":  # one run, as one task on the cluster
        s = simulate_grid(model, hardware, [args], backend=backend, ray_address=ray_address, **kw)[0]
    else:
        with _progress_bar(as_json) as tell:
            s = run(model, hardware, progress=tell, **kw, **args)
    if plot_dir is not None:
        from ..plot import simulation as plots

        files += [Path(p) for p in plots(s, plot_dir, fmt)]
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        s.requests.write_parquet(files[0])
        s.series.write_parquet(files[1])
    if emit_dir is not None:
        from ..launch import launch_for

        files += launch_for(s, {**args, "calibrated": calibrated}).write(emit_dir, force=force)
    if as_json:
        click.echo(json.dumps(s.to_dict(), indent=2))
        return
    click.echo(s.summary())
    for f in files:
        click.echo(f"wrote {f}")


@contextlib.contextmanager
def _progress_bar(quiet: bool) -> Iterator[Optional[Callable[[int, int], None]]]:
    """A progress bar on stderr for a simulation's requests, where stderr is a terminal."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    bar: Any = None
    shown = 0

    def tell(ended: int, total: int) -> None:
        nonlocal bar, shown
        if bar is None:
            bar = click.progressbar(length=total, label="requests", file=sys.stderr).__enter__()
        bar.update(ended - shown)
        shown = ended

    try:
        yield tell
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)


def _rates(v: Any) -> list[float]:
    """A rate or a comma-separated list of them (a scenario file may give a number or a list)."""
    from ..errors import PlanError

    if v is None:
        return []
    items = v if isinstance(v, list) else str(v).split(",")
    try:
        return [float(x) for x in items]
    except (TypeError, ValueError):
        raise PlanError(f"rate: expected requests per second or a list such as 2,4,8, got {v!r}") from None


def _grid_run(model: Optional[str], hardware: Optional[str], runs: list[dict[str, Any]], args: dict[str, Any], *,
              calibrated: bool, as_json: bool, plot_dir: Optional[str], fmt: str,
              ray_address: Optional[str]) -> None:  # fmt: skip
    """Simulations of a grid (a scenario file's ``grid``, a list of rates, or both), each a task
    (``serving.simulate_grid``); a table of them with the arguments that vary as its first columns."""
    from ..errors import PlanError
    from ..serving.simulator import simulate_grid

    backend = "local" if ray_address is None else "ray"
    varying = [k for k in _SIM_KEYS if len({json.dumps(r.get(k), sort_keys=True, default=str) for r in runs}) > 1]
    if plot_dir is not None and varying != ["rate"]:
        raise PlanError("plot: a grid is drawn as a throughput-latency curve over rates: let only the rate vary")
    bar = click.progressbar(length=len(runs), label="runs", file=sys.stderr) if sys.stderr.isatty() else None

    def progress(done: int, total: int) -> None:
        if bar is not None:
            bar.update(done - bar.pos)

    reports: list[Any] = []
    sims = simulate_grid(model, hardware, runs, backend=backend, ray_address=ray_address, progress=progress,
                         on_report=reports.append, calibrated=calibrated, **args)  # fmt: skip
    if bar is not None:
        bar.render_finish()
    if backend == "ray":
        click.echo(reports[0].text(), err=True)
    if as_json:
        click.echo(json.dumps([s.to_dict() for s in sims], indent=2))
    else:
        # what every run shares heads the table; what varies leads each row (the value each run took)
        shared = {"model": model, "hardware": hardware, **args}
        fixed = [{s.model for s in sims}, {s.hardware for s in sims}, {s.cluster["describe"] for s in sims},
                 {f"{s.runtime} ({s.calibration})" for s in sims}]  # fmt: skip
        click.echo(", ".join(next(iter(f)) for f in fixed if len(f) == 1))
        label = {"rate": "rate/s"}
        cols = [label.get(k, k) for k in varying]
        if len(fixed[3]) > 1:
            cols.append("calibration")
        cells = [[str({**shared, **r}.get(k, "-")) for k in varying]
                 + ([s.calibration.split(",")[0] + ")"] if len(fixed[3]) > 1 else []) + [
            f"{s.request_rate_req_s:.2f}", f"{s.output_tok_s:,.0f}", _in_ms(s.ttft_s["p50"], 1),
            _in_ms(s.ttft_s["p99"], 1), _in_ms(s.tpot_s["p50"], 2), _in_ms(s.tpot_s["p99"], 2),
            f"{s.goodput_req_s:.2f}"] for r, s in zip(runs, sims)]  # fmt: skip
        heads = [*cols, "req/s", "out tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "goodput/s"]
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
        for row in [heads, *cells]:
            click.echo("  " + " ".join(c.rjust(w) for c, w in zip(row, widths)) + ("  (ms)" if row is heads else ""))
    if plot_dir is not None:
        from ..plot import rate_curve

        click.echo(f"wrote {rate_curve(sims, plot_dir, fmt)}", err=as_json)
