"""Golden snapshots: a fixed panel of estimates, stored as text in data/ and as
DuckDB tables keyed by version, and diffed cell by cell so that every change
to the physics shows what it moved (and fails unless it was declared)."""

from __future__ import annotations

import fnmatch
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from . import _data
from ._version import __version__
from .catalog.store import Catalog
from .engine.structure import structure_version
from .errors import PlanError

KEYS = ("model", "hardware", "batch", "prompt", "output", "tp")
VALUES = ("ttft_s", "tpot_s", "e2e_s", "throughput_tok_s", "prefill_tok_s", "memory_gb", "mfu_prefill", "mbu_decode")
STATUS = ("fits", "error")
GOLDEN = "data/snapshots/golden.csv"


def panel() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_data.read_text("data/snapshots/panel.json"))
    return data


def evaluate(catalog: Optional[Catalog] = None) -> Any:
    """The panel, evaluated now: one row per (model, device, shape, TP)."""
    import polars as pl

    from .models.config import bundled_names
    from .sweeps.sweep import iter_sweep

    p = panel()
    frames: list[Any] = []
    for shape in p["shapes"]:
        grid = {"model": bundled_names(), "hardware": p["hardware"], "tp": p["tp"], "runtime": p["runtime"],
                **{k: [v] for k, v in shape.items()}}  # fmt: skip
        frames.extend(iter_sweep(grid, catalog=catalog, threads=1))
    df = pl.concat(frames).select([*KEYS, *VALUES, *STATUS])
    return df.sort(list(KEYS))


def to_text(df: Any) -> str:
    """The snapshot as CSV text with full float precision (repr), stable order."""
    return str(df.sort(list(KEYS)).write_csv(float_precision=None))


def load(ref: str, *, db: Optional[str] = None, catalog: Optional[Catalog] = None) -> Any:
    """A snapshot by reference: 'shipped' (data/snapshots/golden.csv), 'current'
    (evaluated now), a CSV path, or a label saved in the DuckDB file ``db``."""
    import polars as pl

    if ref == "shipped":
        return pl.read_csv(io.StringIO(_data.read_text(GOLDEN)), infer_schema_length=None)
    if ref == "current":
        return evaluate(catalog)
    p = Path(ref)
    if p.suffix == ".csv" and p.is_file():
        return pl.read_csv(p, infer_schema_length=None)
    if db:
        import duckdb

        con = duckdb.connect(db, read_only=True)
        try:
            rows = con.execute("SELECT * EXCLUDE (version, structure_version, label) FROM snapshots WHERE label = ?",
                               [ref]).fetchall()  # fmt: skip
            cols = [d[0] for d in con.description]
        finally:
            con.close()
        if rows:
            return pl.DataFrame({c: [r[i] for r in rows] for i, c in enumerate(cols)}, strict=False)
    raise PlanError(f"snapshot: unknown reference '{ref}'; use shipped, current, a CSV path or a label saved with --db")


def has_label(db: str, label: str) -> bool:
    """Whether the DuckDB file ``db`` already holds a snapshot saved as ``label`` (no file: no)."""
    import duckdb

    from ._io import check_output, duckdb_readonly, has_table

    check_output(db, force=True, what="--db")
    with duckdb_readonly(db, what="--db") as con:
        try:
            return (
                con is not None
                and has_table(con, "snapshots")
                and bool(con.execute("SELECT count(*) FROM snapshots WHERE label = ?", [label]).fetchall()[0][0])
            )
        except duckdb.Error as e:
            raise PlanError(f"--db: {db} holds a snapshots table that is not ridgeline's ({e})") from None


def save(db: str, label: str, catalog: Optional[Catalog] = None) -> int:
    """Evaluates the panel and stores it in ``db`` (table snapshots) under ``label``."""
    import duckdb

    df = evaluate(catalog)
    sv = structure_version(catalog)
    con = duckdb.connect(db)
    try:
        cols = [*KEYS, *VALUES, *STATUS]
        con.execute(
            "CREATE TABLE IF NOT EXISTS snapshots (version VARCHAR, structure_version VARCHAR, label VARCHAR, "
            "model VARCHAR, hardware VARCHAR, batch BIGINT, prompt BIGINT, output BIGINT, tp BIGINT, "
            + ", ".join(f"{c} DOUBLE" for c in VALUES)
            + ", fits BOOLEAN, error VARCHAR)"
        )
        con.execute("DELETE FROM snapshots WHERE label = ?", [label])
        rows = [[__version__, sv, label, *[r[c] for c in cols]] for r in df.iter_rows(named=True)]
        con.executemany(f"INSERT INTO snapshots VALUES ({', '.join('?' for _ in range(len(cols) + 3))})", rows)
    finally:
        con.close()
    return int(df.height)


def load_expected(path: Optional[str | Path]) -> list[dict[str, Any]]:
    """Declared changes: a YAML (or JSON) list under ``changes`` of {columns, why, and
    optional key filters such as model, hardware, tp (globs or lists)}."""
    if path is None or not Path(path).is_file():
        return []
    from ._io import load_json, load_yaml, read_text

    what = f"expected changes {path}"
    text = read_text(path, what="expected changes", error=PlanError)
    if str(path).endswith(".json"):
        data = load_json(text, what=what)
    else:
        data = load_yaml(text, what=what) or {}
    changes = data.get("changes", []) if isinstance(data, Mapping) else []
    for c in changes:
        if not isinstance(c, Mapping) or not c.get("columns") or not c.get("why"):
            raise PlanError(f"{path}: every change names its columns and says why, got {c!r}")
    return [dict(c) for c in changes]


def _declared(row: Mapping[str, Any], column: str, expected: Sequence[Mapping[str, Any]]) -> bool:
    for c in expected:
        if column not in c["columns"] and "*" not in c["columns"]:
            continue
        ok = True
        for key in KEYS:
            if key in c:
                allowed = c[key] if isinstance(c[key], list) else [c[key]]
                if not any(fnmatch.fnmatchcase(str(row[key]), str(a)) for a in allowed):
                    ok = False
                    break
        if ok:
            return True
    return False


def diff(a: Any, b: Any, *, tolerance: float = 1e-9, expected: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """Changed cells between two snapshots (relative change above ``tolerance``),
    grouped by model, device and column, split into declared and undeclared."""
    import polars as pl

    joined = a.join(b, on=list(KEYS), how="full", suffix="_b", coalesce=True)
    cells = []
    for r in joined.iter_rows(named=True):
        for col in (*VALUES, *STATUS):
            va, vb = r.get(col), r.get(f"{col}_b")
            if va == vb:
                continue
            if col in VALUES and va is not None and vb is not None:
                rel = abs(vb - va) / max(abs(va), 1e-300)
                if rel <= tolerance:
                    continue
            else:
                rel = float("inf")
            cells.append({**{k: r[k] for k in KEYS}, "column": col, "a": va, "b": vb, "rel_change": rel,
                          "declared": _declared(r, col, expected)})  # fmt: skip
    df = pl.DataFrame(cells, schema={**{k: a.schema[k] for k in KEYS}, "column": pl.Utf8, "a": pl.Utf8,
                                     "b": pl.Utf8, "rel_change": pl.Float64, "declared": pl.Boolean},
                      strict=False) if cells else None  # fmt: skip
    groups: list[dict[str, Any]] = []
    if df is not None:
        g = df.group_by(["model", "hardware", "column", "declared"]).agg(
            pl.len().alias("cells"), pl.col("rel_change").max().alias("max_rel_change")
        )
        groups = g.sort(["declared", "model", "hardware", "column"]).to_dicts()
    undeclared = [c for c in cells if not c["declared"]]
    return {"changed": len(cells), "undeclared": len(undeclared), "groups": groups, "cells": cells}
