"""``ridgeline calibrate`` and ``ridgeline validate``: the fits and the reports of measured rows beside
their predictions."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import click

from ..errors import RidgelineError
from .group import cli


@cli.command()
@click.option("--comm", is_flag=True, help="Fit the collectives (link measurements) instead of the runtime profiles.")
@click.option(
    "--production", is_flag=True,
    help="Fit vLLM, SGLang and TensorRT-LLM from their measured kernels and serving runs (kernel_fits.csv).",
)  # fmt: skip
@click.option(
    "--serving",
    is_flag=True,
    help="Fit the step overhead and a request's front-end time by replaying the serving runs through the "
    "simulator (serving_fits.csv); --production then takes them.",
)
@click.option(
    "--power", is_flag=True,
    help="Fit the memory-bound power share (spec 60) to measured GPU power during serving (data/constants.csv).",
)  # fmt: skip
@click.option(
    "--offload", is_flag=True,
    help="Fit llama.cpp's host terms (the share of host memory bandwidth its expert kernels reach and the round "
    "trip per offloaded layer) to the published --n-cpu-moe runs (data/calibration/offload_fits.csv).",
)  # fmt: skip
@click.option(
    "--speculation", is_flag=True,
    help="Fit the host's time a running sequence a speculating step where a rig turns its overlap off under "
    "speculation (SGLang 0.4.4) to the published batch ladders (data/calibration/speculation_fits.csv).",
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
    out: Optional[str],
    force: bool,
    comm: bool,
    production: bool,
    serving: bool,
    power: bool,
    offload: bool,
    speculation: bool,
    kernels: str,
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
    if offload:
        _calibrate_offload(out, force)
        return
    if speculation:
        _calibrate_speculation(out, force)
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


def _calibrate_speculation(out: Optional[str], force: bool) -> None:
    """The host term of a rig that turns its overlap off under speculation, written as
    speculation_fits.csv."""
    from ..calibration import speculation as spec

    s = spec.host_summary(spec.host_parts())
    _write_fit(out or spec.FITS, spec.fits_csv(s), spec.host_report(s), force, "--speculation",
               "the speculating host term")  # fmt: skip


def _calibrate_offload(out: Optional[str], force: bool) -> None:
    """llama.cpp's host terms fitted to the offload rows, written as offload_fits.csv."""
    from ..calibration import offload as off

    s = off.summary(off.parts())
    _write_fit(out or off.FITS, off.fits_csv(s), off.report(s), force, "--offload", "llama.cpp's host terms")


def _write_fit(out: str, text: str, report: str, force: bool, flag: str, what: str) -> None:
    """A fit's table written to ``out`` (replaced only with --force where it differs) and its report."""
    from .._io import changed_files, check_output, write_files

    path = check_output(out, force=True, what="--out", hint="run from the repository root, or pass --out")
    changed = changed_files({path: text}, force=force, what=f"calibrate {flag}")
    write_files(changed, what=f"calibrate {flag}")
    click.echo(report)
    click.echo(f"{'wrote' if path in changed else 'unchanged'} {what} in {path}"
               + ("; reinstall (maturin develop) to ship it" if path in changed else ""))  # fmt: skip


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
                       "handoff_us", "handoff_runs", "handoff_ttft_medape", "structure_version", "data_hash",
                       "fitted_at", "source")  # fmt: skip


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
@click.option("--speculation", is_flag=True,
              help="The published speculative speed-ups (data/speculation/speculative_pairs.csv: the same rig with "
                   "and without) against the speculation physics, each row priced or listed with why not.")  # fmt: skip
@click.option("--offload", is_flag=True,
              help="The published --n-cpu-moe runs (data/speculation/offload_pairs.csv) against the offload "
                   "physics, each device held out of the host terms' fit in turn; every row priced or listed with "
                   "why not.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="The summary as JSON.")
@click.option("--per-row", is_flag=True, help="With --json: every row with observed and predicted values.")
@click.option("--plot", "plot_dir", default=None,
              help="Write the figures (PNG) in this folder: observed against predicted, and for the llama.cpp rows "
                   "a residual plot by device (the default validation, --serving and --rows).")  # fmt: skip
def validate(
    comm: bool, kernels: Optional[str], rows_file: Optional[str], serving: bool, limit: Optional[int], power: bool,
    speculation: bool, offload: bool, as_json: bool, per_row: bool, plot_dir: Optional[str],
) -> None:  # fmt: skip
    """Predict measured rows and report the agreement (exit 1 on an unexplained bound violation)."""
    if plot_dir is not None:
        from .._io import check_folder
        from ..errors import PlanError

        other = [f for f, on in (("--comm", comm), ("--power", power), ("--speculation", speculation),
                                 ("--offload", offload)) if on]  # fmt: skip
        if other:
            raise PlanError(f"--plot: draws the default validation, --serving and --rows; {other[0]} prints its "
                            "report only (--json for its numbers)")  # fmt: skip
        check_folder(plot_dir, what="plot")  # before the validation runs, not after it
    if offload:
        from ..calibration import offload as off

        s = off.summary(off.parts())
        body = {k: v for k, v in s.items() if per_row or k != "held_out_rows"}
        click.echo(json.dumps(body, indent=2) if as_json else off.report(s))
        return
    if speculation:
        from ..calibration import speculation as spec

        recs = spec.priced_pairs()
        out = {**spec.summary(recs), **({"rows_priced": recs} if per_row else {})}
        click.echo(json.dumps(out, indent=2) if as_json else spec.report(recs))
        return
    if power:
        from ..calibration.power_fit import priced, report, rows, validation

        v = validation(priced(rows()))
        click.echo(json.dumps(v, indent=2) if as_json else report(v))
        return
    if comm:
        _validate_comm(as_json, per_row, kernels)
    elif serving:
        _validate_serving(rows_file, limit, as_json, plot_dir)
    elif rows_file:
        _validate_rows(rows_file, as_json, plot_dir)
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


def _validate_rows(path: str, as_json: bool, plot_dir: Optional[str] = None) -> None:
    if Path(path).is_dir() or path.endswith(".parquet"):
        if plot_dir is not None:
            from ..errors import PlanError

            raise PlanError("--plot: kernel tables print their report only (per device, table and dtype)")
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
    _rows_report(out, as_json, plot_dir=plot_dir)


def _rows_report(
    out: list[dict[str, Any]], as_json: bool, per_row: bool = True, plot_dir: Optional[str] = None
) -> None:
    """Predicted rows (every one, or only the summary) and their agreement per runtime, device, metric;
    with ``plot_dir`` the observed-against-predicted figure there too."""
    if plot_dir is not None:
        from ..plot import rows as plot_rows

        for p in plot_rows(out, plot_dir):
            click.echo(f"wrote {p}", err=True)
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


def _validate_serving(rows_file: Optional[str], limit: Optional[int], as_json: bool, plot_dir: Optional[str]) -> None:
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
    if rows_file is None:  # the shipped runs: the serving runs and the offline max-throughput rows
        _rows_report([*serving_runs(path, limit=limit), *max_throughput_rows(limit=limit)], as_json, per_row=False,
                     plot_dir=plot_dir)  # fmt: skip
        return
    from .._io import read_text
    from ..errors import CatalogError

    header = read_text(path, what="rows file", error=CatalogError).partition("\n")[0]
    if not {"silicon_ttft_ms", "silicon_tpot_ms", "mode"} <= {c.strip() for c in header.split(",")}:
        # not closed-loop serving runs: every row priced as validate --rows prices it, or why not
        if not as_json:
            click.echo(f"{path}: not in the serving-runs layout (silicon_calibration.csv's mode, isl, osl, "
                       "batch_size, silicon_ttft_ms, silicon_tpot_ms): each row priced as validate --rows "
                       "prices it, or why not", err=True)  # fmt: skip
        _validate_rows(path, as_json, plot_dir)
        return
    _rows_report(serving_runs(path, limit=limit), as_json, per_row=False, plot_dir=plot_dir)


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
