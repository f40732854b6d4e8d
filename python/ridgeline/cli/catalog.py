"""``ridgeline catalog``: the hardware catalog listed, shown, audited, exported and queried."""

from __future__ import annotations

import json
import math
import sys
from typing import Any, Optional

import click

from .._fmt import table as _table
from .group import cli


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
    from ..catalog.export import engine_export_text

    path = check_output(out, force=True, what="--out", hint="run from the repository root, or pass --out")
    changed = changed_files({path: engine_export_text()}, force=force, what="catalog export")
    write_files(changed, what="catalog export")
    click.echo(f"wrote {path}; reinstall (pip install .) to ship it" if changed else f"unchanged {path}")


@catalog.command("sql", context_settings={"ignore_unknown_options": True})
@click.argument("query", required=False, type=click.UNPROCESSED)
@click.option("--file", "path", default=None, help="Read the query from this file instead.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def catalog_sql(query: Optional[str], path: Optional[str], fmt: str) -> None:
    """Run a read-only SQL query against the catalog database (a query may begin with a -- comment)."""
    from .._io import read_text
    from ..catalog.store import default_catalog
    from ..errors import PlanError

    if (query is None) == (path is None):
        raise PlanError("catalog sql: give a query, or --file with one, not both")
    text = read_text(path, what="--file", error=PlanError) if path is not None else str(query)
    _frame_out(default_catalog().sql(text), fmt)
