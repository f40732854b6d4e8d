"""``ridgeline sweep``: a grid of plans, summarised or written to a file or a dataset folder."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import click

from .._fmt import table as _table
from .group import _ray_backend, cli
from .options import INCLUDE_BOUND, RAY, plan_options


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
    price_tier: Optional[str],
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
                          "calibrated": calibrated, "amortise_years": amortise_years,
                          "price_tier": price_tier}  # fmt: skip
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
