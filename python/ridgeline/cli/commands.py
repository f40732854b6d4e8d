"""The ``ridgeline`` command line: one command a function, errors through one handler."""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional

import click

from .._fmt import ms as _ms
from .._fmt import pct, sig
from .._fmt import table as _table
from ..errors import RidgelineError, exit_code
from .options import INCLUDE_BOUND, RAY, plan_options

GB = 1e9


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """ridgeline: how fast, how big and how costly is model M on hardware H under plan P."""
    ctx.obj = {"debug": debug}


def _ray_backend(ray_address: Optional[str]) -> str:
    """The backend an ``--ray`` gives; with one, Ray is importable (else how to install it, exit 2)."""
    if ray_address is None:
        return "local"
    from ..sweeps.cluster import import_ray

    import_ray()
    return "ray"


@cli.command()
@click.option(
    "--model",
    "-m",
    required=True,
    help="Bundled model: its Hugging Face id or a name as written ('LLaMA 3.1 70B'; a suffix such as -FP8 sets "
    "the weights), or a path to config.json / a model folder.",
)
@click.option(
    "--hardware",
    "-H",
    required=True,
    help="Catalog device name or alias, or a name as written ('NVIDIA H100 SXM5 80GB') that names one device "
    "(see `ridgeline catalog list`).",
)
@plan_options("estimate")
@click.option("--breakdown", is_flag=True, help="Print the per-operator breakdown.")
@click.option(
    "--verbose", "-v", is_flag=True, help="Also print utilisation, the memory parts and the fitted parameters."
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (stable keys).")
@click.option("--allow-no-fit", is_flag=True, help="Report a plan that does not fit instead of failing (exit 4).")
def estimate(
    model: str, hardware: str, breakdown: bool, verbose: bool, as_json: bool, allow_no_fit: bool, **plan: Any
) -> None:
    """Estimate one plan: TTFT, TPOT, throughput, memory fit."""
    from ..engine.estimate import estimate as run

    e = run(model, hardware, allow_no_fit=allow_no_fit, breakdown=breakdown, **plan)
    if as_json:
        click.echo(json.dumps(e.to_dict(breakdown=breakdown), indent=2))
        return
    click.echo(_estimate_text(e, verbose))
    if breakdown:
        click.echo("")
        click.echo(_breakdown_text(e.breakdown_rows()))


def _estimate_text(e: Any, verbose: bool) -> str:
    """The answer first (TTFT, TPOT, throughput, memory fit), then the plan, the runtime and the
    calibration one line each; the details and the fitted parameters under ``verbose``."""
    p, mem, held = e.plan, e.memory, e.held_out
    ep_text = "".join(f", {k.upper()} {p[k]}" for k in ("ep", "pp", "dp") if p[k] > 1)

    def ranged(phase: str, key: str, t: Optional[float]) -> str:
        if phase not in held or t is None:
            return _ms(t)
        lo, hi = held[phase][key]
        return f"{_ms(t)}   (80% of held-out rows: {sig(lo * 1e3)}-{sig(hi * 1e3)} ms)"

    fits = "fits" if e.fits else "does NOT fit"
    used, usable = sig(mem["total_bytes"] / GB), sig(mem["budget_bytes"] / GB)
    rows = [
        ("TTFT", ranged("prefill", "ttft_s", e.ttft_s)),
        ("TPOT", ranged("decode", "tpot_s", e.tpot_s)),
        ("throughput", f"{sig(e.throughput_tok_s)} output tok/s ({_throughput_basis(e)} {_ms(e.e2e_s)})"),
        ("memory", f"{used} GB per device of {usable} GB usable: {fits}"),
        ("power", _power_text(e.power)),
        ("cost", _cost_text(e.cost)),
        ("plan", f"batch {p['batch']}, prompt {p['prompt']}, output {p['output']}, TP {p['tp']}{ep_text}, "
                 f"{p['dtype']}; weights {p['weights']} ({p['weights_source']}), KV {p['kv_dtype'] or p['dtype']}"),
        ("runtime", f"{e.runtime_note}; --runtime chooses, --uncalibrated gives the bound"),
        ("calibration", f"{e.calibration}: {e.calibration_note}" + (f"; {_held_out_text(held)}" if held else "")),
        ("catalog", "verified" if e.verified else "verified = false (estimated: true)"),
    ]  # fmt: skip
    if verbose:
        rows[4:4] = [
            ("E2E latency", _ms(e.e2e_s)),
            ("prefill rate", f"{sig(e.prefill_tok_s)} prompt tok/s"),
            ("MFU / MBU prefill", f"{pct(e.prefill['mfu'])} / {pct(e.prefill['mbu'])}"),
            ("MFU / MBU decode", f"{pct(e.decode['mfu'])} / {pct(e.decode['mbu'])}"),
            ("memory parts", f"{sig(mem['total_bytes'] / GB)} GB = weights {sig(mem['weights_bytes'] / GB)} "
             f"+ KV {sig(mem['kv_bytes'] / GB)}"
             + (f" + linear-attention state {sig(mem['state_bytes'] / GB)}" if mem.get("state_bytes") else "")
             + f" + activations {sig(mem['activation_bytes'] / GB)}; {sig(mem['budget_bytes'] / GB)} GB usable of "
             f"{sig(mem['capacity_bytes'] / GB)} GB = {sig(mem['capacity_bytes'] / 2**30)} GiB"),
            ("compute", f"{e.gemm_dtype} GEMMs, {e.attention_dtype} attention; peak {sig(e.peak_tflops, 4)} TFLOPS, "
             f"{sig(e.memory_bw_gbs, 4)} GB/s"),
        ]  # fmt: skip
        if e.plan["from_runtime"]:
            rows.insert(rows.index(next(r for r in rows if r[0] == "runtime")) + 1, ("execution", _execution_text(e)))
        at = rows.index(next(r for r in rows if r[0] == "calibration")) + 1
        rows[at:at] = [(f"  {name}", value) for name, value in e.fitted]
        if held:
            rows.insert(at + len(e.fitted), ("held out", _held_out_counts(held)))
    lines = [f"{e.model} on {e.hardware}", _table(rows)]
    lines += [f"  warning: {w}" for w in e.warnings]
    return "\n".join(lines)


_SIM_KEYS = (
    "model", "hardware", "tp", "ep", "instances", "router", "prefill_instances", "decode_instances", "prefill_tp",
    "decode_tp", "prefill_ep", "decode_ep", "kv_link_gbs", "kv_link_latency_us", "runtime", "dtype", "weight_dtype",
    "kv_dtype", "rate", "burstiness", "concurrency", "ramp_s", "trace", "requests", "prompt", "output",
    "declare_output", "prefix_groups", "prefix_tokens", "prefix_caching", "seed", "max_model_len", "kv_blocks",
    "slo_ttft_ms", "slo_tpot_ms", "horizon_s", "max_num_batched_tokens", "max_num_seqs", "block_size",
    "chunked_prefill", "mixed", "reserve_full", "memory_fraction", "fraction_of_free", "price_per_hour",
    "amortise_years",
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
@click.option(
    "--kv-link-gbs",
    type=float,
    default=None,
    help="Disaggregated: GB/s per rank the KV moves at (default: the catalog's scale-out link).",
)
@click.option("--kv-link-latency-us", type=float, default=None, help="Disaggregated: KV transfer latency in us.")
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
    help="Search the highest Poisson rate at which this share (0-1] of requests meets the SLOs.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@RAY
def simulate(scenario: Optional[str], out: Optional[str], sample_ms: float, force: bool, plot_dir: Optional[str],
             fmt: str, max_share: Optional[float], as_json: bool, ray_address: Optional[str],
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
    if grid or len(rates) > 1:
        if out is not None or max_share is not None:
            raise PlanError(f"{'out' if out is not None else '--max-rate'}: one run at a time (a grid or a list of "
                            "rates runs several)")  # fmt: skip
        # the grid's entries, each at every rate given (a rate of the entry's own is kept)
        at: list[Optional[float]] = [*rates] or [None]
        runs = [{**({"rate": r} if r is not None else {}), **g} for g in (grid or [{}]) for r in at]
        _grid_run(model, hardware, runs, args, calibrated=calibrated, as_json=as_json, plot_dir=plot_dir,
                  fmt=fmt, ray_address=ray_address)  # fmt: skip
        return
    if max_share is not None:
        from ..serving.simulator import max_rate

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


def _cost_text(c: Any) -> str:
    """Cost per million output tokens and per request at the price used, and where it came from."""
    if "missing" in c:
        return f"missing: {c['missing']}"
    o = c.get("offer")
    where = f"{o['provider']} {o['sku']}, {o['as_of']}" if o else "the price given"
    rng = c.get("on_demand_usd_per_device_hour")
    spread = f"; {rng['offers']} on-demand offers ${sig(rng['min'])}-{sig(rng['max'])}" if rng and o else ""
    keys = ("usd_per_million_output_tokens", "usd_per_request", "usd_per_device_hour")
    per_m, per_req, price = (sig(c[k]) for k in keys)
    return (f"${per_m} per million output tokens, ${per_req} a request, at ${price} per device-hour x "
            f"{c['devices']} ({where}{spread})")  # fmt: skip


def _power_text(pw: Any) -> str:
    """Watts per device per phase and joules per output token, or why power is missing."""
    if "missing" in pw:
        return f"missing: {pw['missing']}"
    return (f"{sig(pw['prefill']['watts'])} W prefill, {sig(pw['decode']['watts'])} W decode per device "
            f"(idle {sig(pw['idle_w'])}, TDP {sig(pw['tdp_w'])}); {sig(pw['energy_per_output_token_j'])} J per "
            "output token; `ridgeline validate --power` for its error")  # fmt: skip


def _held_out_text(held: Any) -> str:
    """Where the TTFT and TPOT ranges come from, in words."""
    runtime = next(iter(held.values()))["runtime"]
    from ..engine.runtimes import KERNEL_RUNTIMES

    if runtime in KERNEL_RUNTIMES:
        return f"ranges: where 80% of {runtime}'s serving runs fell, each device priced with the other's step overhead"
    return f"ranges: where 80% of {runtime}'s measured rows fell on devices left out of its fit"


def _held_out_counts(held: Any) -> str:
    """The rows and devices behind the held-out ranges, and their file."""
    from ..engine.runtimes import KERNEL_RUNTIMES

    counts = [
        f"{held[ph]['rows']} {ph} rows on {held[ph]['devices']} devices" for ph in ("prefill", "decode") if ph in held
    ]
    kernel = next(iter(held.values()))["runtime"] in KERNEL_RUNTIMES
    return f"{', '.join(counts)} (data/calibration/{'kernel_holdout' if kernel else 'holdout'}.csv)"


def _execution_text(e: Any) -> str:
    """What the plan took from its runtime's way of running (``runtime_execution``)."""
    p = e.plan
    said = {
        "chunk": f"prompt in {p['chunk']}-token steps",
        "kv_pad": f"decode reads the KV cache padded to {p['kv_pad']} cells",
        "swa_cache_extra": f"sliding-window cache window + {p['swa_cache_extra']} cells",
        "kv_skip_masked_tail": "over several sequences trailing masked KV tiles skipped",
        "decode_graphs": "one-token decode steps replayed from a CUDA graph",
    }
    parts = [said[k] for k in p["from_runtime"]]
    return f"{p['runtime']}: {', '.join(parts)}; a flag given overrides"


def _throughput_basis(e: Any) -> str:
    p, par = e.plan, e.parallel
    if p["pp"] > 1:
        basis = f"GPipe: {par['microbatches']} micro-batches over {p['pp']} stages of {par['stage_layers']} layers"
    else:
        basis = "batch x output / E2E"
    return basis + (f", x {p['dp']} replicas" if p["dp"] > 1 else "")


def _breakdown_text(rows: list[dict[str, Any]]) -> str:
    head = (
        f"  {'phase':<8} {'op':<20} {'layers':<34} {'GFLOP':>12} {'MB':>12} {'time ms':>10} {'bound':<8} {'FLOP/B':>8}"
    )
    lines = [head]
    for r in rows:
        inten = "" if r["intensity"] is None else f"{r['intensity']:.1f}"
        lines.append(
            f"  {r['phase']:<8} {r['op']:<20} {r['layer_group']:<34} {r['flops'] / 1e9:>12,.2f} "
            f"{r['bytes'] / 1e6:>12,.2f} {r['time_s'] * 1e3:>10.4f} {r['bound']:<8} {inten:>8}"
        )
    return "\n".join(lines)


@cli.command()
@click.option(
    "--op", default="allreduce", show_default=True, help="allreduce, allgather, reducescatter, alltoall, sendrecv."
)
@click.option("--ranks", type=int, required=True, help="Devices in the group.")
@click.option(
    "--size", default="4MiB", show_default=True, help="Message size (the full buffer): 4MiB, 1GiB, 65536, ..."
)
@click.option("--hardware", "-H", required=True, help="Catalog device name or alias.")
@click.option("--devices-per-node", type=int, default=None, help="Devices per node (default: catalog).")
@click.option("--scaleout-gbs", type=float, default=None, help="Scale-out GB/s per device per direction.")
@click.option("--scaleout-latency-us", type=float, default=None, help="Scale-out per-hop latency in us.")
@click.option("--sweep-sizes", is_flag=True, help="Sweep sizes 8 B .. 8 GiB by x2, as nccl-tests -b 8 -e 8G -f 2.")
@click.option(
    "--library", default="nccl", show_default=True,
    help="Whose all-reduce: nccl, or a runtime's own kernel measured on the device (vllm, sglang, trtllm).",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True)
def collective(
    op: str,
    ranks: int,
    size: str,
    hardware: str,
    devices_per_node: Optional[int],
    scaleout_gbs: Optional[float],
    scaleout_latency_us: Optional[float],
    sweep_sizes: bool,
    library: str,
    as_json: bool,
) -> None:
    """Time, algBW and busBW of one collective (alpha-beta, NCCL protocol table, the device's
    measured floor, latency and efficiency)."""
    from ..engine.collectives import collective as run
    from ..engine.collectives import parse_size

    sizes = [2**k for k in range(3, 34)] if sweep_sizes else [parse_size(size)]
    r = run(op, ranks, sizes, hardware, devices_per_node=devices_per_node, scaleout_gbs=scaleout_gbs,
            scaleout_latency_us=scaleout_latency_us, library=library)  # fmt: skip
    if as_json:
        out = {k: v for k, v in r.__dict__.items() if k not in ("size_bytes", "time_s", "algbw_gbs", "busbw_gbs")}
        click.echo(json.dumps({**out, "notes": list(r.notes), "rows": r.rows()}, indent=2))
        return
    click.echo(f"{r.op} over {r.ranks} x {r.hardware} ({r.nodes} node{'s' if r.nodes > 1 else ''}, "
               f"{'hierarchical' if r.hierarchical else 'ring'}; topology: {r.topology}; "
               f"link {r.link_gbs_per_direction:g} GB/s per direction)")  # fmt: skip
    click.echo(f"  {'size (B)':>14} {'time (us)':>12} {'algbw (GB/s)':>13} {'busbw (GB/s)':>13}")
    for row in r.rows():
        click.echo(
            f"  {row['size_bytes']:>14,} {row['time_us']:>12.2f} {row['algbw_gbs']:>13.2f} {row['busbw_gbs']:>13.2f}"
        )
    for n in r.notes:
        click.echo(f"  note: {n}")


@cli.command()
@click.option("--model", "-m", "models", multiple=True, help="Model(s); repeat or comma-separate.")
@click.option("--hardware", "-H", "hardware", multiple=True, help="Device(s); repeat or comma-separate.")
@plan_options("sweep")
@click.option("--grid", "grid_file", type=click.Path(exists=True, dir_okay=False), help="A YAML or JSON grid file.")
@click.option("--out", default=None, help="results.parquet, results.csv or results.duckdb:table.")
@click.option("--force", is_flag=True, help="Replace an existing --out file (or DuckDB table).")
@click.option("--threads", type=int, default=0, show_default=True, help="Threads (0: all cores).")
@click.option("--chunk-size", type=int, default=1 << 18, show_default=True, help="Plans per Rust call (bounds memory).")
@click.option("--columns", "show_columns", is_flag=True, help="Print the output columns with their units and exit.")
@click.option("--top", type=click.IntRange(min=1), default=5, show_default=True,
              help="Without --out: the best plans the summary lists per ranking.")  # fmt: skip
@INCLUDE_BOUND
@RAY
def sweep(
    models: tuple[str, ...],
    hardware: tuple[str, ...],
    grid_file: Optional[str],
    out: Optional[str],
    force: bool,
    threads: int,
    chunk_size: int,
    show_columns: bool,
    top: int,
    include_bound: bool,
    ray_address: Optional[str],
    calibrated: bool,
    amortise_years: Optional[float],
    **axes: tuple[str, ...],
) -> None:
    """Evaluate a grid of plans in the Rust core across all cores, or across a Ray cluster (--ray).

    --out DIR/ (a folder) writes the grid as Parquet parts, one per --chunk-size plans, that DuckDB
    and Polars read as one table (DIR/*.parquet); a rerun into the same folder resumes, skipping
    the parts already complete and verified. With --ray, --out is such a folder."""
    import resource
    import time

    import polars as pl

    from ..errors import PlanError
    from ..sweeps.sweep import (
        SWEEP_COLUMNS,
        gather,
        grid_size,
        is_folder,
        iter_sweep,
        load_grid_file,
        summary,
        write_folder,
    )
    from ..sweeps.sweep import write as write_file

    if show_columns:
        click.echo(_table(list(SWEEP_COLUMNS.items())))
        return
    grid: dict[str, Any] = load_grid_file(grid_file) if grid_file else {}
    grid.update({k: list(v) for k, v in {"model": models, "hardware": hardware, **axes}.items() if v})
    if chunk_size < 1:
        raise click.BadParameter("must be >= 1", param_hint="--chunk-size")
    backend = _ray_backend(ray_address)
    folder = out is not None and is_folder(out)
    if backend == "ray" and out is not None and not folder:
        raise PlanError(f"out: with --ray, --out names a folder for the sweep's Parquet parts (read as one table, "
                        f"resumed by a rerun), e.g. --out {Path(out).stem or 'results'}/")  # fmt: skip
    total = grid_size(grid)
    t0 = time.perf_counter()
    bar = None
    if sys.stderr.isatty():
        bar = click.progressbar(length=total, label="plans", file=sys.stderr)
        bar.__enter__()
    report = None
    kw: dict[str, Any] = {"chunk_size": chunk_size, "progress": bar.update if bar else None,
                          "calibrated": calibrated, "amortise_years": amortise_years}  # fmt: skip
    try:
        df = None
        if folder:
            assert out is not None
            d = write_folder(grid, out, backend=backend, ray_address=ray_address, force=force, threads=threads, **kw)
            rows, report = d.rows, d.report
        elif backend == "ray":
            df, report = gather(grid, backend=backend, ray_address=ray_address, **kw)
            rows = df.height
        elif out is not None:
            rows = write_file(iter_sweep(grid, threads=threads, **kw), out, force=force)
        else:
            df = pl.concat(list(iter_sweep(grid, threads=threads, **kw)))
            rows = df.height
    finally:
        if bar:
            bar.__exit__(None, None, None)
    dt = time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if df is not None:
        click.echo(summary(df, top, include_bound=include_bound))
    where = "" if out is None else f", written to {out}" + (f" (read as {Path(out) / '*.parquet'})" if folder else "")
    click.echo(f"{rows:,} plans in {dt:.2f} s ({rows / dt:,.0f} plans/s), peak RSS {rss_mb:,.0f} MB{where}", err=True)
    if report is not None:
        click.echo(report.text(), err=True)


@cli.command()
@click.option("--comm", is_flag=True, help="Fit the collectives (link measurements) instead of the runtime profiles.")
@click.option(
    "--production", is_flag=True,
    help="Fit vLLM, SGLang and TensorRT-LLM from their measured kernels and serving runs (kernel_fits.csv).",
)  # fmt: skip
@click.option(
    "--serving",
    is_flag=True,
    help="Fit the serving simulator's step overhead by replaying the serving runs (serving_fits.csv).",
)
@click.option(
    "--power", is_flag=True,
    help="Fit the memory-bound power share (spec 60) to measured GPU power during serving (data/constants.csv).",
)  # fmt: skip
@click.option(
    "--kernels", default="data/benchmarks/aic", show_default=True,
    help="With --comm: the folder of measured kernel tables (AIConfigurator layout).",
)  # fmt: skip
@click.option(
    "--out",
    default=None,
    help="Where to write the fitted rows (holdout.csv, the held-out ranges, goes beside it); default "
    "data/calibration/fits.csv, with --comm data/hardware/link_collectives.csv.",
)
@click.option("--force", is_flag=True, help="Replace fits.csv and holdout.csv when the fit differs from them.")
def calibrate(
    out: Optional[str], force: bool, comm: bool, production: bool, serving: bool, power: bool, kernels: str
) -> None:
    """Fit efficiencies per runtime profile and per device to the measured rows (deterministic).

    A file that already holds the fit is left alone; one that differs is replaced only with --force.
    With --comm: fit each device's collectives (floor, per-hop latency, efficiency per rank count)
    to the runtimes' measured collectives under --kernels, into data/hardware/link_collectives.csv.
    With --production: fit vLLM, SGLang and TensorRT-LLM from their GEMM kernels and serving runs
    under --kernels, into data/calibration/kernel_fits.csv."""
    if comm:
        _calibrate_comm(out or "data/hardware/link_collectives.csv", force, kernels)
        return
    if production:
        _calibrate_production(out or "data/calibration/kernel_fits.csv", force, kernels)
        return
    if serving:
        from ..engine.fits import SERVING_FITS

        _calibrate_serving(out or SERVING_FITS, force, kernels)
        return
    if power:
        _calibrate_power(out or "data/constants.csv", force)
        return
    out = out or "data/calibration/fits.csv"
    from .._io import changed_files, check_output, write_files
    from ..calibration.acceptance import holdout, holdout_csv
    from ..calibration.calibrate import calibrate as run
    from ..calibration.calibrate import to_csv
    from ..calibration.validate import validation
    from ..errors import PlanError

    hint = "run from the repository root, or pass --out"
    path = check_output(out, force=True, what="--out", hint=hint)  # before the fit: minutes
    held_path = path.with_name("holdout.csv")
    if held_path == path:
        raise PlanError(f"--out: {path} is where the held-out ranges go; name the fits file otherwise")
    check_output(held_path, force=True, what="--out", hint=hint)
    fits = run()
    # how far held-out devices land from the fit: the range an estimate quotes beside its numbers
    held = holdout(validation(fits=fits)["rows"])
    texts = {path: to_csv(fits), held_path: holdout_csv(held)}
    changed = changed_files(texts, force=force, what="calibrate")
    write_files(changed, what="calibrate")
    for f in fits:
        click.echo(
            f"  {f['runtime']:<15} {f['hardware']:<17} {f['memory']:<6} {f['precision']:<6} "
            f"eta_mem {f['eta_mem']:<7.3g} "
            f"eta_compute {f['eta_compute']:<7.3g} quant {f['eta_compute_quant']:<7.3g} eta_moe {f['eta_moe']:<7.3g} "
            f"t_launch {f['t_launch_us']:<6.3g} us "
            f"t_step {f['t_step_us']:<7.3g} us skew {f['routing_skew']:<5.3g} overlap {f['overlap']:<6.3g} "
            f"overlap_moe {f['overlap_moe']:<6.3g} "
            f"rows {f['n_rows']:<4} "
            f"rms_log {f['rms_log']:.3f}" + (f"  PINNED: {f['pinned']}" if f["pinned"] else "")
        )
    for h in held:
        click.echo(
            f"  held out: {h['runtime']:<15} {h['phase']:<8} {h['n_rows']:>4} rows on {h['n_devices']:>2} devices: "
            f"observed/predicted p10 {h['q10']:.3f}, median {h['q50']:.3f}, p90 {h['q90']:.3f}"
        )
    said = {path: f"{len(fits)} rows", held_path: f"{len(held)} held-out ranges"}
    click.echo("; ".join(f"{'wrote' if p in changed else 'unchanged'} {said[p]} in {p}" for p in texts))


def _calibrate_power(out: str, force: bool) -> None:
    """rho fitted to the measured power runs, written as its constants row (the rest of the file kept)."""
    from .. import _data
    from .._io import changed_files, check_output, read_text, write_files
    from ..calibration.power_fit import constant_row, constants_text, fit, priced, rows
    from ..errors import PlanError

    path = check_output(out, force=True, what="--out", hint="run from the repository root, or pass --out")
    current = read_text(path, what="--out", error=PlanError) if path.exists() else _data.read_text("data/constants.csv")
    p = priced(rows())
    rho, rms = fit(p)
    row = constant_row(p, rho, rms)
    changed = changed_files({path: constants_text(row, current)}, force=force, what="calibrate --power")
    write_files(changed, what="calibrate --power")
    click.echo(f"  power_memory_rho {row['value']} ({row['source']})")
    click.echo(f"{'wrote' if path in changed else 'unchanged'} power_memory_rho in {path}"
               + ("; then `ridgeline catalog export --force` and reinstall" if path in changed else ""))  # fmt: skip


SERVING_FIT_COLUMNS = ("runtime", "hardware", "t_step_us", "n_runs", "rms_log", "medape", "medape_transferred",
                       "transferred_to", "request_us", "request_runs", "ttft_medape", "ttft_medape_transferred",
                       "structure_version", "data_hash", "fitted_at", "source")  # fmt: skip


def _calibrate_serving(out: str, force: bool, kernels: str) -> None:
    from .._io import changed_files, check_output, csv_text, write_files
    from ..calibration.validate import serving_step_fits
    from ..errors import PlanError

    path = check_output(out, force=True, what="--out", hint="run from the repository root, or pass --out")
    runs = Path(kernels) / "silicon_calibration.csv"
    if not runs.is_file():
        raise PlanError(f"kernels: {kernels} holds no silicon_calibration.csv (the measured serving runs)")
    rows = serving_step_fits(str(runs))
    changed = changed_files({path: csv_text(rows, SERVING_FIT_COLUMNS)}, force=force, what="calibrate --serving")
    write_files(changed, what="calibrate --serving")
    for r in rows:
        moved = "" if r["medape_transferred"] is None else (
            f", on {r['transferred_to']} {r['medape_transferred']:.1%}")  # fmt: skip
        front = "" if r["request_us"] is None else (
            f"; request {r['request_us'] / 1e3:.3g} ms over {r['request_runs']} runs: "
            f"TTFT MedAPE {r['ttft_medape']:.1%}"
            + ("" if r["ttft_medape_transferred"] is None
               else f", moved {r['ttft_medape_transferred']:.1%}"))  # fmt: skip
        click.echo(f"  {r['runtime']:<7} {r['hardware']:<9} step {r['t_step_us']:<8.4g} us over {r['n_runs']:>4} runs: "
                   f"TPOT MedAPE {r['medape']:.1%}{moved}{front}")  # fmt: skip
    click.echo(f"{'wrote' if path in changed else 'unchanged'} {len(rows)} rows in {path}")


def _calibrate_production(out: str, force: bool, kernels: str) -> None:
    from .._io import changed_files, check_output, write_files
    from ..calibration.acceptance import holdout_csv
    from ..calibration.kernel_fit import (
        MEASURED_DIR,
        attention_holdout,
        fit_production,
        gemm_holdout,
        holdout_rows,
        kernel_fits_csv,
        measure,
        measured_holdout,
        transfer,
    )

    path = check_output(out, force=True, what="--out", hint="run from the repository root, or pass --out")
    held_path = path.with_name("kernel_holdout.csv")
    check_output(held_path, force=True, what="--out", hint="run from the repository root, or pass --out")
    measured = measure(kernels)  # the tables read and their kernels fitted once, for the three reports
    rows = fit_production(kernels, measured=measured)
    checks = transfer(kernels, rows, measured=measured)
    texts = {path: kernel_fits_csv(rows), held_path: holdout_csv(holdout_rows(checks))}
    changed = changed_files(texts, force=force, what="calibrate --production")
    write_files(changed, what="calibrate --production")
    for r in rows:
        if r["precision"] == "*":
            click.echo(f"  {r['runtime']:<7} {r['hardware']:<14} eta_mem {r['eta_mem']:<8.4g} eta_compute "
                       f"{r['eta_compute']:<8.4g} kernel floor {r['t_launch_us']:<7.4g} us "
                       f"step {r['t_step_us']:<8.4g} us")  # fmt: skip
    for t in checks:
        for label, v in t.items():
            if isinstance(v, dict):
                click.echo(f"  TPOT {t['runtime']:<7} {t['hardware']:<9} {t['rows']:>4} runs, {label:<15} MedAPE "
                           f"{v['medape']:6.1%}, within 1.5x {v['within_1_5x']:6.1%}, median obs/pred "
                           f"{v['median_obs_over_pred']:.3f}")  # fmt: skip
    for x in measured.skipped:
        click.echo(f"  left out x{x['rows']:,}: {x['file']}: {x['reason']}")
    for g in gemm_holdout(kernels, measured=measured):
        click.echo(f"  GEMM {g['runtime']:<7} {g['hardware']:<14} {g['format']:<13} {g['rows']:>6} rows within 1.5x: "
                   f"in sample {g['in_sample_within_1_5x']:6.1%}, held out {g['held_out_within_1_5x']:6.1%} "
                   f"(median obs/pred {g['held_out_median']:.2f})")  # fmt: skip
    for a in attention_holdout(kernels, measured=measured):
        pinned = f", pinned at a bound: {', '.join(a['pinned'])}" if a["pinned"] else ""
        click.echo(f"  attention {a['runtime']:<7} {a['hardware']:<14} {a['phase']:<8} {a['rows']:>6} rows "
                   f"({a['kernel']}) within 1.5x: in sample {a['in_sample_within_1_5x']:6.1%}, held out "
                   f"{a['held_out_within_1_5x']:6.1%} (median obs/pred {a['held_out_median']:.2f})"
                   f"{pinned}")  # fmt: skip
    if Path(MEASURED_DIR).is_dir():
        # devices without runtime tables, timed here: priced by the fits just made, as an estimate would
        for h in measured_holdout(MEASURED_DIR, fits=rows):
            click.echo(f"  measured {h['hardware']:<9} {h['kernel']:<40} {h['rows']:>5} rows within 1.5x "
                       f"{h['within_1_5x']:6.1%} (median obs/pred {h['median']:.2f}), {h['calibration']}")  # fmt: skip
    click.echo("; ".join(f"{'wrote' if p in changed else 'unchanged'} {p}" for p in texts))


def _calibrate_comm(out: str, force: bool, kernels: str) -> None:
    from .._io import changed_files, check_output, write_files
    from ..calibration.comm_fit import fit_links, holdout, links_csv
    from ..calibration.kernels import comm_rows

    path = check_output(out, force=True, what="--out", hint="run from the repository root, or pass --out")
    rows = comm_rows(kernels)
    fits = fit_links(rows)
    changed = changed_files({path: links_csv(fits)}, force=force, what="calibrate --comm")
    write_files(changed, what="calibrate --comm")
    for f in fits:
        click.echo(f"  {f['name']:<15} {f['library']:<7} {f['op']:<15} {f['ranks']:>2} ranks: "
                   f"floor {f['floor_us']:<7.4g} us hop {f['latency_us']:<7.4g} us efficiency "
                   f"{f['bw_efficiency']:<7.4g} within 1.5x {f['within_1_5x']:.1%} of {f['n_rows']}")  # fmt: skip
    for h in holdout(rows, fits):
        held = (
            "-"
            if h["within_1_5x"] is None
            else f"{h['within_1_5x']:.1%}, median obs/pred {h['median_obs_over_pred']:.3f}"
        )
        click.echo(f"  held out: {h['hardware']:<15} {h['library']:<7} {h['op']:<15} {h['rows']:>4} rows: {held}"
                   + (f" (from {', '.join(h['peers'])})" if h.get("peers") else f" ({h['reason']})"))  # fmt: skip
    click.echo(f"{'wrote' if path in changed else 'unchanged'} {len(fits)} link measurements in {path}")


@cli.command()
@click.option("--comm", is_flag=True, help="Communication and link rows: link-rate bound and protocol model.")
@click.option(
    "--kernels", default=None,
    help="With --comm: also the runtimes' measured collectives under this folder (AIConfigurator layout; "
         "a source checkout has data/benchmarks/aic, read by default when it is there).",
)  # fmt: skip
@click.option(
    "--rows", "rows_file", type=click.Path(exists=True),
    help="Predict the rows of this CSV, or price kernel tables in AIConfigurator's layout (a folder of "
         "<system>/<family>/<framework>/<version>/*.parquet, or one such table) as calibrate reports them.",
)  # fmt: skip
@click.option(
    "--serving",
    is_flag=True,
    help="Replay closed-loop serving runs through the simulator (--rows, default the source checkout's "
    "data/benchmarks/aic/silicon_calibration.csv).",
)
@click.option("--limit", type=int, default=None, help="With --serving: the first N runs only.")
@click.option("--power", is_flag=True, help="The power model against measured GPU power during serving.")
@click.option("--json", "as_json", is_flag=True, help="The summary as JSON.")
@click.option("--per-row", is_flag=True, help="With --json: every row with observed and predicted values.")
@click.option("--plot", "plot_dir", default=None, help="Write a log-log scatter and a residual plot (PNG) here.")
def validate(
    comm: bool, kernels: Optional[str], rows_file: Optional[str], serving: bool, limit: Optional[int], power: bool,
    as_json: bool, per_row: bool, plot_dir: Optional[str],
) -> None:  # fmt: skip
    """Predict measured rows and report the agreement (exit 1 on an unexplained bound violation)."""
    if power:
        from ..calibration.power_fit import priced, report, rows, validation

        v = validation(priced(rows()))
        click.echo(json.dumps(v, indent=2) if as_json else report(v))
        return
    if comm:
        _validate_comm(as_json, per_row, kernels)
    elif serving:
        _validate_serving(rows_file, limit, as_json)
    elif rows_file:
        _validate_rows(rows_file, as_json)
    else:
        _validate_models(as_json, per_row, plot_dir)


def _validate_models(as_json: bool, per_row: bool, plot_dir: Optional[str]) -> None:
    from .._io import check_folder
    from ..calibration.acceptance import envelope, group_summaries
    from ..calibration.validate import validation
    from ..plot import validation as plot

    if plot_dir is not None:  # before the validation runs, not after it
        check_folder(plot_dir, what="plot")
    v = validation()
    recs = v["rows"]
    if plot_dir:
        for p in plot(recs, plot_dir):
            click.echo(f"wrote {p}", err=True)
    groups = group_summaries(recs)
    beats = [r for r in recs if r["beats_bound"]]
    unexplained = [r for r in beats if r["explanation"] is None]
    env = envelope(recs, groups)
    out = {"rows": len(recs), "refused": v["refused"], "groups": groups, "beats_bound": beats, "envelope": env}
    if as_json:
        if per_row:
            out["per_row"] = recs
        click.echo(json.dumps(out, indent=2, default=str))
        if unexplained:
            sys.exit(1)
        return
    click.echo(f"priced model rows: {len(recs)} (refused by the engine: {len(v['refused'])})")
    click.echo(f"  {'group':<40} {'rows':>5} | {'in-sample: median  <1.5x  <2x':>30} | {'leave-one-device-out':>30}")
    for k, g in groups.items():
        a, b = g["in_sample"], g["lodo"]
        if a["rows"] == 0:
            continue
        lodo = f"{b['median']:>8.3f} {b['within_1_5x']:>6.1%} {b['within_2x']:>6.1%}" if b.get("rows") else "-"
        click.echo(f"  {k[:40]:<40} {a['rows']:>5} | {a['median']:>12.3f} {a['within_1_5x']:>6.1%} "
                   f"{a['within_2x']:>6.1%} | {lodo:>30}")  # fmt: skip
    click.echo(f"rows beating the efficiency-1 prediction by > 5%: {len(beats)} ({len(unexplained)} unexplained)")
    for r in beats:
        click.echo(f"  {r['id']} ({r['hardware']}, {r['model']}): observed/bound {r['vs_bound']:.3f}: "
                   f"{r['explanation'] or 'UNEXPLAINED'}")  # fmt: skip
    click.echo("spec 50 acceptance envelope:")
    for e in env:
        click.echo(f"  {'PASS' if e['ok'] else 'FAIL'}  {e['check']}: {e['figure']}")
    if unexplained:
        sys.exit(1)


#: How `validate --rows` prices a collective or link row (what `validate --comm` reports as "predicted").
_COMM_LABEL = "protocol model (NCCL protocol table, the catalog's link and latency)"


def _validate_kernel_tables(path: str, as_json: bool) -> None:
    """Kernel tables priced by the shipped calibration, per device, table and kernel (``kernel_table_report``)."""
    from ..calibration.validate import kernel_table_report

    rep = kernel_table_report(path)
    if as_json:
        click.echo(json.dumps(rep, indent=2, default=str))
        return
    left = sum(x["rows"] for x in rep["left_out"])
    click.echo(f"{rep['rows']:,} rows: {rep['priced']:,} priced, {left:,} left out, "
               f"{rep['rows'] - rep['priced'] - left:,} in tables not priced")  # fmt: skip
    head = ("hardware", "runtime", "kernel", "rows", "obs/pred", "<1.5x", "calibration or why not", "table")
    cells = [(r["hardware"], r["runtime"], r["kernel"], f"{r['rows']:,}",
              "-" if r["median_obs_over_pred"] is None else f"{r['median_obs_over_pred']:.3f}",
              "-" if r["within_1_5x"] is None else f"{r['within_1_5x']:.1%}",
              r["reason"] or r["calibration"], r["table"]) for r in rep["tables"]]  # fmt: skip
    widths = [max(len(str(c[i])) for c in (head, *cells)) for i in range(len(head))]
    for row in (head, *cells) if cells else ():
        click.echo(("  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths))).rstrip())
    for x in rep["left_out"]:
        click.echo(f"  left out x{x['rows']:,}: {x['file']}: {x['reason']}")


def _validate_rows(path: str, as_json: bool) -> None:
    if Path(path).is_dir() or path.endswith(".parquet"):
        _validate_kernel_tables(path, as_json)
        return
    from .._io import read_text
    from ..calibration.decompose import decompose
    from ..calibration.validate import COMM_METRICS, comm_record, predict_shipped
    from ..catalog.benchmarks import import_file
    from ..catalog.store import default_catalog
    from ..errors import CatalogError

    cat = default_catalog()
    rows = import_file(path, read_text(path, what="rows file", error=CatalogError), cat)
    dec, out = [], []
    for r in rows:
        refused = {"id": r["id"], "hardware": r["hardware"] or r["file_hardware"], "runtime": r["runtime"],
                   "metric": r["metric"], "observed": r["value"], "predicted": None, "unit": r["unit"]}  # fmt: skip
        if r["not_priced"]:
            out.append({**refused, "reason": str(r["not_priced"])})
            continue
        if r["metric"] in COMM_METRICS:  # a collective or a link: the protocol model, no model plan
            c = comm_record(cat, r)
            got = {"predicted": c["predicted"], "bound": c["bound"], "calibration": _COMM_LABEL}
            out.append({**refused, **(got if c["predicted"] else {"reason": c["reason"]})})
            continue
        try:
            dec.append(decompose(r, cat))
        except RidgelineError as e:
            out.append({**refused, "reason": str(e)})
    # every row of the file, in its order: priced ones with the calibration, the others with why not
    order = {r["id"]: i for i, r in enumerate(rows)}
    out = sorted(predict_shipped(dec, cat) + out, key=lambda o: order[o["id"]])
    _rows_report(out, as_json)


def _rows_report(out: list[dict[str, Any]], as_json: bool, per_row: bool = True) -> None:
    """Predicted rows (every one, or only the summary) and their agreement per runtime, device, metric."""
    if as_json:
        click.echo(json.dumps(out, indent=2, default=str))
        return
    if per_row:
        for o in out:
            pred = "-" if o["predicted"] is None else f"{o['predicted']:.4g}"
            label = o.get("calibration", o.get("reason", ""))
            click.echo(f"  {o['id']:<40} observed {o.get('observed', '-')!s:<10} predicted {pred:<10} {label}")
    from ..calibration.validate import rows_summary

    summary = rows_summary(out)
    click.echo(f"\n  {'runtime / hardware / metric':<46} {'rows':>5} {'MedAPE':>7} {'obs/pred':>9} {'<1.5x':>6}")
    for key, v in summary["groups"].items():
        click.echo(f"  {key:<46} {v['rows']:>5} {v['medape']:>7.1%} {v['median_obs_over_pred']:>9.3f} "
                   f"{v['within_1_5x']:>6.1%}")  # fmt: skip
    for reason, n in summary["not_priced"].items():
        click.echo(f"  not priced: {n:>5} rows: {reason}")


def _validate_serving(rows_file: Optional[str], limit: Optional[int], as_json: bool) -> None:
    from ..calibration.kernels import KERNEL_DIR
    from ..calibration.validate import max_throughput_rows, serving_runs
    from ..errors import PlanError

    path = rows_file or str(Path(KERNEL_DIR) / "silicon_calibration.csv")
    if not Path(path).is_file():
        raise PlanError(
            f"rows: {path} is not there (the serving runs ship only in a source checkout); pass --rows FILE"
        )
    if limit is not None and limit < 1:
        raise PlanError(f"limit: must be a whole number >= 1, got {limit}")
    _rows_report([*serving_runs(path, limit=limit), *max_throughput_rows(limit=limit)], as_json, per_row=False)


def _validate_comm(as_json: bool, per_row: bool, kernels: Optional[str]) -> None:
    from ..calibration.kernels import KERNEL_DIR
    from ..calibration.validate import comm_report

    if kernels is None and Path(KERNEL_DIR).is_dir():
        kernels = KERNEL_DIR
    rep = comm_report(kernels=kernels)
    if as_json:
        out = dict(rep)
        if not per_row:
            out.pop("per_row")
        click.echo(json.dumps(out, indent=2, default=str))
    else:
        click.echo(f"communication rows: {rep['rows']} ({rep['priced']} priced)"
                   + (f"; kernel tables: {kernels} ({rep['kernel_rows_left_out']:,} rows left out)"
                      if kernels else "; no kernel tables (--kernels)"))  # fmt: skip
        for why, n in sorted(rep["kernel_rows_left_out_by_reason"].items(), key=lambda x: (-x[1], x[0])):
            click.echo(f"  left out x{n:,}: {why}")
        click.echo("  obs/pred: observed over predicted rate (busBW); held out: predicted from the other devices' fits")
        for kind in ("metric", "size_bucket", "setup"):
            click.echo(f"\n  by {kind.replace('_', ' ')}:")
            click.echo(f"    {'group':<66} {'rows':>5} {'obs/pred':>9} {'<1.5x':>6} {'held out':>9} "
                       f"{'obs/bound':>10} {'max o/b':>8}")  # fmt: skip
            for key, v in rep["summary"][kind].items():
                held = v["median_obs_over_held_out"]
                click.echo(f"    {key[:66]:<66} {v['rows']:>5} {v['median_obs_over_pred']:>9.3f} "
                           f"{v['within_1_5x']:>6.1%} {'-' if held is None else f'{held:.3f}':>9} "
                           f"{v['median_obs_over_bound']:>10.3f} {v['max_obs_over_bound']:>8.3f}")  # fmt: skip
        for r in rep["not_priced"]:
            click.echo(f"  not priced: {r['id']}: {r['reason']}")
        for v in rep["violations"]:
            why = (
                "in-switch reduction (NVLink SHARP), a faster algorithm than the ring"
                if v["in_switch_reduction"]
                else "UNEXPLAINED"
            )
            click.echo(f"  beats the link bound: {v['id']} {v['observed']:.1f} > {v['bound']:.1f} GB/s: {why}")
    if rep["unexplained_violations"]:
        sys.exit(1)


@cli.group()
def snapshot() -> None:
    """Golden snapshots of a fixed panel of estimates."""


@snapshot.command("save")
@click.option("--db", default="snapshots.duckdb", show_default=True, help="DuckDB file holding the snapshots table.")
@click.option("--label", default=None, help="Label (default: ridgeline version + structure version).")
@click.option("--to-text", is_flag=True, help="Also rewrite data/snapshots/golden.csv (run from the repository root).")
@click.option("--force", is_flag=True, help="Replace a label already in --db, and a golden.csv that differs.")
def snapshot_save(db: str, label: Optional[str], to_text: bool, force: bool) -> None:
    """Evaluate the panel and store it; a label already saved is kept unless --force."""
    import duckdb

    from .._io import changed_files, check_output, write_files
    from .._version import __version__
    from ..engine.structure import structure_version
    from ..errors import PlanError
    from ..snapshot import GOLDEN, evaluate, has_label, save
    from ..snapshot import to_text as as_text

    label = label or f"{__version__}+{structure_version()}"
    if has_label(db, label) and not force:
        raise PlanError(f"--db: {db} already holds snapshot '{label}'; --force replaces it")
    # golden.csv is checked before the database changes: a refusal leaves both as they were
    golden: dict[Path, str] = {}
    if to_text:
        path = check_output(GOLDEN, force=True, what="--to-text", hint="run --to-text from the repository root")
        golden = changed_files({path: as_text(evaluate())}, force=force, what="--to-text")
    try:
        n = save(db, label)
    except duckdb.Error as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise PlanError(f"--db: cannot save to {db} ({first})") from None
    click.echo(f"saved {n} panel rows to {db} as '{label}'")
    if to_text:
        write_files(golden, what="--to-text")
        click.echo(f"{'wrote' if golden else 'unchanged'} {GOLDEN}")


@snapshot.command("diff")
@click.argument("a", default="shipped")
@click.argument("b", default="current")
@click.option("--db", default=None, help="DuckDB file for labels saved with `snapshot save`.")
@click.option("--tolerance", type=float, default=1e-9, show_default=True, help="Relative change that counts.")
@click.option("--expected", default="snapshot-expected.yaml", show_default=True, help="Declared changes (YAML/JSON).")
@click.option("--json", "as_json", is_flag=True)
def snapshot_diff(a: str, b: str, db: Optional[str], tolerance: float, expected: str, as_json: bool) -> None:
    """Changed cells between snapshots A and B (default: the shipped panel and the current code);
    exit 1 when a change above the tolerance is not declared in the expected file."""
    from ..snapshot import diff, load, load_expected

    rep = diff(load(a, db=db), load(b, db=db), tolerance=tolerance, expected=load_expected(expected))
    if as_json:
        click.echo(json.dumps(rep, indent=2, default=str))
    else:
        click.echo(f"{rep['changed']} changed cells ({rep['undeclared']} undeclared) between {a} and {b}")
        for g in rep["groups"]:
            tag = "declared" if g["declared"] else "UNDECLARED"
            click.echo(f"  {tag:<10} {g['model']} on {g['hardware']}: {g['column']} in {g['cells']} rows, "
                       f"max relative change {g['max_rel_change']:.3g}")  # fmt: skip
    if rep["undeclared"]:
        sys.exit(1)


@cli.group()
def catalog() -> None:
    """The hardware catalog (DuckDB, built from data/hardware/*.csv)."""


def _in_ms(seconds: Optional[float], digits: int) -> str:
    """Seconds as milliseconds with ``digits`` decimals; ``-`` where the metric has no value."""
    return "-" if seconds is None else f"{seconds * 1e3:.{digits}f}"


def _frame_out(df: Any, fmt: str) -> None:
    if fmt == "json":
        # JSON has no NaN or Infinity: a number that is not finite has no value (null)
        rows = [{k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in r.items()}
                for r in df.to_dicts()]  # fmt: skip
        click.echo(json.dumps(rows, indent=2, default=str))
    elif fmt == "csv":
        click.echo(df.write_csv(), nl=False)
    else:
        import polars as pl

        with pl.Config(tbl_rows=-1, tbl_cols=-1, fmt_str_lengths=60, tbl_width_chars=200):
            click.echo(str(df))


@catalog.command("list")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def catalog_list(fmt: str) -> None:
    """List devices with their dense peaks, memory and verified flag."""
    from ..catalog.store import default_catalog

    df = default_catalog().sql(
        "SELECT name, vendor, arch, tflops_bf16, tflops_fp8, tflops_fp4, tflops_fp32, memory_gb, memory_bw_gbs, "
        "scaleup_bw_gbs, verified FROM hardware ORDER BY vendor, name"
    )
    _frame_out(df, fmt)


@catalog.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
def catalog_show(name: str, as_json: bool) -> None:
    """Show one device row with its source."""
    from ..catalog.store import default_catalog

    cat = default_catalog()
    canonical = cat.resolve(name)
    dev = cat.get(canonical)
    row = cat.sql("SELECT * FROM hardware WHERE name = ?", [dev.chip]).to_dicts()[0]
    if dev.memory_of is not None:  # a memory configuration: its row with the size it states
        row.update(name=dev.name, memory_gb=dev.memory_gb, source=dev.source)
        row["memory_of"] = dev.memory_of
    aliases = cat.sql("SELECT alias FROM hardware_alias WHERE name = ? ORDER BY alias", [canonical])["alias"].to_list()
    row["aliases"] = aliases
    row["memory_sizes_gb"] = ", ".join(f"{s:g}" for s in cat.memory_sizes(dev.chip)) or None
    if as_json:
        click.echo(json.dumps(row, indent=2, default=str))
        return
    click.echo(_table([(k, "" if v is None else str(v)) for k, v in row.items()]))


@catalog.command("audit")
@click.option(
    "--format", "fmt", type=click.Choice(["summary", "csv", "json", "parquet"]), default="summary", show_default=True
)
@click.option(
    "--out", type=click.Path(dir_okay=False), default=None, help="Write the offending rows here (parquet needs it)."
)
@click.option("--force", is_flag=True, help="Replace an existing --out file.")
def catalog_audit(fmt: str, out: Optional[str], force: bool) -> None:
    """Run every audit query; exit 1 when a must-pass audit returns rows."""
    import polars as pl

    from .._io import atomic_output, check_output
    from ..catalog.store import default_catalog
    from ..errors import PlanError

    if out is not None:
        if fmt == "summary":
            raise PlanError("--out: the summary goes to the terminal; --format csv, json or parquet writes the rows")
        check_output(out, force=force, what="--out")  # before the audits run
    elif fmt == "parquet":
        raise click.UsageError("--format parquet needs --out PATH")
    results = default_catalog().audit()
    failed = [n for n, _, must, df in results if must and df.height > 0]
    frames = []
    for name, question, must, df in results:
        status = "ok" if df.height == 0 else ("FAIL" if must else "info")
        click.echo(f"{name:<32} {df.height:>4} rows  {status:<4}  {question}", err=fmt != "summary")
        if df.height:
            frames.append(
                pl.DataFrame({"audit": [name] * df.height, "row": [json.dumps(r, default=str) for r in df.to_dicts()]})
            )
    allrows = (
        pl.concat(frames)
        if frames
        else pl.DataFrame({"audit": [], "row": []}, schema={"audit": pl.Utf8, "row": pl.Utf8})
    )
    if fmt == "parquet" and out is not None:
        with atomic_output(out, force=force, what="--out") as tmp:
            allrows.write_parquet(tmp)
    elif fmt in ("csv", "json"):
        text = allrows.write_csv() if fmt == "csv" else json.dumps(allrows.to_dicts(), indent=2)
        if out is not None:
            with atomic_output(out, force=force, what="--out") as tmp:
                tmp.write_text(text, encoding="utf-8")
        else:
            click.echo(text)
    if failed:
        click.echo(f"audits failed: {', '.join(failed)}", err=True)
        sys.exit(1)


@catalog.command("export")
@click.option(
    "--out",
    default="data/hardware/engine_export.json",
    show_default=True,
    help="Where to write the export (the extension carries the one in data/hardware/).",
)
@click.option("--force", is_flag=True, help="Replace a file that differs from the fresh export.")
def catalog_export(out: str, force: bool) -> None:
    """Write what estimates read of the shipped catalog (devices, aliases, constants, measured
    runtimes), built now through DuckDB; rerun it after editing data/, then reinstall.

    A file that already holds the export is left alone; one that differs is replaced only with --force."""
    from .._io import changed_files, check_output, write_files
    from ..catalog.store import engine_export_text

    path = check_output(out, force=True, what="--out", hint="run from the repository root, or pass --out")
    changed = changed_files({path: engine_export_text()}, force=force, what="catalog export")
    write_files(changed, what="catalog export")
    click.echo(f"wrote {path}; reinstall (pip install .) to ship it" if changed else f"unchanged {path}")


@catalog.command("sql")
@click.argument("query")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def catalog_sql(query: str, fmt: str) -> None:
    """Run a read-only SQL query against the catalog database."""
    from ..catalog.store import default_catalog

    _frame_out(default_catalog().sql(query), fmt)


@cli.group()
def model() -> None:
    """Bundled models and their normalised structure."""


@model.command("list")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def model_list(fmt: str) -> None:
    """List bundled models: family, architecture, parameters, KV bytes per token, max_model_len,
    whether the engine prices them and the towers (vision, audio) left out of the counts."""
    import polars as pl

    from ..errors import ModelConfigError
    from ..models.config import Model, bundled_names

    rows: list[dict[str, Any]] = []
    for name in bundled_names():
        try:
            m = Model.from_config(name)
        except ModelConfigError as e:
            rows.append({"model": name, "engine": f"config error: {e}"})
            continue
        rows.append(
            {
                "model": name,
                "family": m.model_type,
                "architecture": m.architecture_class,
                "total_params_b": round(m.total_params / 1e9, 3),
                "active_params_b": round(m.active_params / 1e9, 3),
                "kv_bytes_per_token_bf16": int(m.kv_bytes_per_token(2.0)),
                "max_model_len": m.max_model_len,
                "engine": "priced" if m.unpriced is None else f"not priced yet: {m.unpriced}",
                "not_counted": "; ".join(m.towers) or None,
            }
        )
    _frame_out(pl.DataFrame(rows), fmt)


@model.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
def model_show(name: str, as_json: bool) -> None:
    """Show the normalised structure and parameter counts of a model."""
    from ..models.config import Model

    s = Model.from_config(name).summary()
    if as_json:
        click.echo(json.dumps(s, indent=2))
        return
    flat = [(k, str(v)) for k, v in s.items() if k not in ("layer_groups", "params")]
    flat += [(f"params.{k}", f"{v:,}") for k, v in s["params"].items()]
    flat += [(f"layer_group[{i}]", json.dumps(g)) for i, g in enumerate(s["layer_groups"])]
    click.echo(_table(flat))


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
@click.option("--requests", type=int, default=500, show_default=True, help="Requests per simulated run.")
@click.option("--max-devices", type=int, default=64, show_default=True, help="The most devices a plan may take.")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="Plans to list.")
@click.option("--verbose", "-v", is_flag=True, help="List each refused candidate with its reason.")
@click.option("--json", "as_json", is_flag=True, help="Every plan and refusal as JSON.")
@click.option("--plot", "plot_path", default=None, help="Write the cost-TTFT frontier here (.png or .svg).")
@click.option("--force", is_flag=True, help="Replace an existing --plot file.")
@INCLUDE_BOUND
@plan_options("recommend", only=("amortise_years",))
@RAY
def recommend(
    model: str, rate: Optional[float], concurrency: Optional[int], slo_ttft_ms: Optional[float],
    slo_tpot_ms: Optional[float], percentile: float,
    prompt: str, output: str, hardware: tuple[str, ...], tp: str, weight_dtype: Optional[str],
    runtime: Optional[str], disaggregate: bool, kv_link_gbs: Optional[float], kv_link_latency_us: Optional[float],
    requests: int, max_devices: int, top: int, verbose: bool,
    as_json: bool, plot_path: Optional[str], force: bool, include_bound: bool, amortise_years: Optional[float],
    ray_address: Optional[str],
) -> None:  # fmt: skip
    """The cheapest plans (device, runtime, weights, TP/EP, replicas, prefill/decode split) that serve a rate
    within TTFT and TPOT objectives, with the cost-TTFT Pareto frontier."""
    from .._io import check_output
    from ..recommend import recommend as run
    from ..sweeps.sweep import parse_axis

    if plot_path is not None:  # before the search, not after it
        check_output(plot_path, force=force, what="plot")
    bar = click.progressbar(length=1, label="candidates", file=sys.stderr) if sys.stderr.isatty() else None

    def progress(done: int, total: int) -> None:
        if bar is not None:
            bar.length = total
            bar.update(done - bar.pos)

    r = run(model, rate=rate, concurrency=concurrency, slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms,
            percentile=percentile, prompt=prompt, output=output, hardware=list(hardware) or None,
            tp=parse_axis("tp", tp), weight_dtype=weight_dtype, runtime=runtime, disaggregate=disaggregate,
            kv_link_gbs=kv_link_gbs, kv_link_latency_us=kv_link_latency_us, requests=requests,
            max_devices=max_devices, progress=progress, amortise_years=amortise_years,
            backend=_ray_backend(ray_address), ray_address=ray_address, include_bound=include_bound)  # fmt: skip
    if bar is not None:
        bar.render_finish()
    click.echo(json.dumps(r.to_dict(), indent=2) if as_json else r.summary(top, refused=verbose))
    if ray_address is not None and r.run is not None:
        click.echo(r.run.text(), err=True)
    if plot_path is not None:
        from .. import plot

        click.echo(f"frontier: {plot.save(plot.frontier(r), plot_path, force=force)}", err=as_json)


#: The plan settings the plot commands share with estimate (the plan, not the runtime's knobs).
PLOT_PLAN = (
    "batch",
    "prompt",
    "output",
    "tp",
    "ep",
    "pp",
    "dtype",
    "weight_dtype",
    "kv_dtype",
    "runtime",
    "calibrated",
)


def _plot_plan_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The model, the plan settings of ``PLOT_PLAN`` (from ``Plan``, as estimate shows them) and the figure."""
    opts = [
        click.option("--model", "-m", required=True, help="Bundled Hugging Face id, or a path to config.json."),
        plan_options("estimate", only=PLOT_PLAN),
        click.option("--out", "-o", required=True, help="The figure: a .png or .svg path."),
        click.option("--force", is_flag=True, help="Replace an existing --out file."),
        click.option("--allow-no-fit", is_flag=True,
                     help="Draw a plan that does not fit (its title says so) instead of failing (exit 4)."),
    ]  # fmt: skip
    for o in reversed(opts):
        f = o(f)
    return f


def _plot_estimate(hardware: str, kw: dict[str, Any], breakdown: bool = True) -> Any:
    from ..engine.estimate import estimate as run

    plan = {k: kw[k] for k in PLOT_PLAN}
    return run(kw["model"], hardware, **plan, breakdown=breakdown, allow_no_fit=kw["allow_no_fit"])


@cli.group()
def plot() -> None:
    """Figures of plans: roofline, decode waterfall, scaling curves, a comparison (PNG or SVG)."""


@plot.command("roofline")
@click.option("--hardware", "-H", required=True, help="Catalog device name or alias.")
@_plot_plan_options
def plot_roofline(hardware: str, **kw: Any) -> None:
    """Each operator's arithmetic intensity and achieved FLOP/s, prefill and decode, under the device's roofs."""
    from .. import plot as figures

    click.echo(f"wrote {figures.save(figures.roofline(_plot_estimate(hardware, kw)), kw['out'], force=kw['force'])}")


@plot.command("waterfall")
@click.option("--hardware", "-H", required=True, help="Catalog device name or alias.")
@click.option("--phase", type=click.Choice(["decode", "prefill"]), default="decode", show_default=True)
@_plot_plan_options
def plot_waterfall(hardware: str, phase: str, **kw: Any) -> None:
    """A decode step's time (TPOT) by operator class, communication and overheads included."""
    from .. import plot as figures

    fig = figures.waterfall(_plot_estimate(hardware, kw), phase)
    click.echo(f"wrote {figures.save(fig, kw['out'], force=kw['force'])}")


@plot.command("scaling")
@click.option("--hardware", "-H", "hardware", multiple=True, required=True, help="Device(s): one line each.")
@click.option("--over", type=click.Choice(["batch", "prompt", "output", "tp"]), required=True, help="The x axis.")
@click.option("--values", required=True, help="Its values: a list (1,2,4) or a range (1..256:x2).")
@_plot_plan_options
def plot_scaling(hardware: tuple[str, ...], over: str, values: str, **kw: Any) -> None:
    """TTFT, TPOT and throughput over batch, prompt, output or TP, one line per device."""
    from .. import plot as figures
    from ..sweeps.sweep import parse_axis

    plan = {k: kw[k] for k in PLOT_PLAN if k != over}
    fig = figures.scaling(kw["model"], list(hardware), over, parse_axis(over, values), **plan)
    click.echo(f"wrote {figures.save(fig, kw['out'], force=kw['force'])}")


@plot.command("compare")
@click.option("--hardware", "-H", required=True, help="Device of the base plan.")
@click.option(
    "--vs", "plans", multiple=True, required=True,
    help="A plan to compare: KEY=VALUE[,KEY=VALUE] over the base plan (hardware, batch, prompt, output, tp, ep, "
    "pp, dtype, weight_dtype, kv_dtype, runtime); give it once for base-vs-one, or more.",
)  # fmt: skip
@_plot_plan_options
def plot_compare(hardware: str, plans: tuple[str, ...], **kw: Any) -> None:
    """Plans side by side: TTFT, TPOT, throughput and memory per device."""
    from .. import plot as figures
    from ..errors import PlanError

    ints = ("batch", "prompt", "output", "tp", "ep", "pp")
    keys = ("hardware", *ints, "dtype", "weight_dtype", "kv_dtype", "runtime")
    estimates = [_plot_estimate(hardware, kw, breakdown=False)]
    for spec in plans:
        over: dict[str, Any] = {}
        for item in filter(None, spec.split(",")):
            k, sep, v = item.partition("=")
            k = k.strip().replace("-", "_")
            if not sep or k not in keys:
                raise PlanError(f"--vs: '{item}' must be KEY=VALUE with KEY one of {', '.join(keys)}")
            try:
                over[k] = int(v) if k in ints else v.strip()
            except ValueError:
                raise PlanError(f"--vs: {k} takes a whole number, got {v!r}") from None
        hw = over.pop("hardware", hardware)
        estimates.append(_plot_estimate(hw, {**kw, **over}, breakdown=False))
    fig = figures.compare(estimates)
    click.echo(f"wrote {figures.save(fig, kw['out'], force=kw['force'])}")


def _one_line(msg: str) -> str:
    return msg.replace("\r", "\\r").replace("\n", "\\n")


#: The options people reach for that name what ridgeline does not model yet: speculative
#: decoding (vLLM's --speculative-config, SGLang's --speculative-algorithm, llama.cpp's
#: --model-draft / -md) and weights kept in host memory (llama.cpp's -ngl / --n-gpu-layers and
#: --n-cpu-moe, vLLM's --cpu-offload-gb).
_NOT_MODELLED = {
    "speculative decoding (MTP, EAGLE, draft models, n-gram lookup)": (
        "--speculative", "--speculative-config", "--speculative-algorithm", "--mtp", "--eagle", "--draft",
        "--draft-model", "--model-draft", "--num-speculative-tokens", "--spec",
    ),
    "weights kept in host memory (offload)": (
        "--offload", "--cpu-offload-gb", "--n-cpu-moe", "--cpu-moe", "--ngl", "--n-gpu-layers", "--gpu-layers",
    ),
}  # fmt: skip


def _not_modelled(e: click.UsageError) -> str:
    """For an unknown option that names a feature ridgeline does not model yet, the error saying
    so (empty for any other error)."""
    if not isinstance(e, click.NoSuchOption):
        return ""
    for what, options in _NOT_MODELLED.items():
        if e.option_name in options:
            return (f"no such option {e.option_name}: {what} is not modelled yet; every estimate prices a plan "
                    "without it (docs/concepts.md)")  # fmt: skip
    return ""


def _command_path(e: click.UsageError) -> str:
    """The subcommand a usage error came from ("estimate", "catalog sql"), for its help hint."""
    path = e.ctx.command_path if e.ctx is not None else ""
    return path.split(" ", 1)[1] if " " in path else ""


def main(argv: Optional[list[str]] = None) -> None:
    """Entry point: every error ends as one line on stderr with its exit code."""
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    nul = next((a for a in args if "\x00" in a), None)
    if nul is not None:  # no path, name or number holds one (the OS refuses it in a path)
        click.echo(f"error: argument {nul!r} holds a NUL byte; no path, name or number does", err=True)
        sys.exit(2)
    try:
        cli.main(args=args, prog_name="ridgeline", standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.UsageError as e:
        # one line naming the option and what it takes, not click's usage block
        if debug:
            raise
        hint = " ".join(w for w in ("ridgeline", _command_path(e), "--help") if w)
        click.echo(f"error: {_not_modelled(e) or _one_line(e.format_message())} (see `{hint}`)", err=True)
        sys.exit(2)
    except click.ClickException as e:
        click.echo(f"error: {_one_line(e.format_message())}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except RidgelineError as e:
        if debug:
            raise
        # one line whatever a user's value held (a name with a newline in it)
        click.echo(f"error: {_one_line(str(e))}", err=True)
        sys.exit(exit_code(e))
    except BaseException as e:  # a Rust panic arrives as PanicException (a BaseException)
        if isinstance(e, (SystemExit, KeyboardInterrupt)) or debug:
            raise
        click.echo(
            f"internal error (please report): {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", err=True
        )
        sys.exit(70)
