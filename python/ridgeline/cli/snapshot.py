"""``ridgeline snapshot``: the golden panel saved and diffed."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import click

from .group import cli


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
