"""The text files the catalog is built from: the shipped CSVs under data/ and a user's extra hardware,
price and constants files, each read with a typed error naming the file and checked against the
shipped rows it would override."""

from __future__ import annotations

import csv
import dataclasses
import difflib
import functools
import io
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from .. import _data
from ..errors import CatalogError

_TABLE_FILES = {
    "hardware": "data/hardware/devices.csv",
    "hardware_alias": "data/hardware/hardware_alias.csv",
    "host_links": "data/hardware/host_links.csv",
    "arch_ratios": "data/hardware/arch_ratios.csv",
    "constants": "data/constants.csv",
}


_OPTIONAL_FILES = (
    ("hardware_sources", "data/hardware/hardware_sources.csv"),
    ("hardware_bins", "data/hardware/hardware_bins.csv"),
    ("hardware_memory", "data/hardware/hardware_memory.csv"),
    ("hardware_cost", "data/hardware/hardware_cost.csv"),
    ("hardware_purchase", "data/hardware/hardware_purchase.csv"),
    ("link_measurements", "data/hardware/link_measurements.csv"),
    ("link_collectives", "data/hardware/link_collectives.csv"),
    # the benchmark-row fits and the production runtimes' kernel fits: one calibration table
    ("calibration", "data/calibration/fits.csv"),
    ("calibration", "data/calibration/kernel_fits.csv"),
)


# Every table of data/schema.sql: a catalog database that lacks one is damaged.
_TABLES = frozenset({*_TABLE_FILES, *(t for t, _ in _OPTIONAL_FILES), "benchmarks"})


_HARDWARE_FILE = "expected a CSV with the devices.csv columns"


_CONSTANTS_FILE = "expected name,value,unit,source,note rows"


@functools.lru_cache(maxsize=1)
def _host() -> str:
    """This host's name as a build's temp files carry it (asked only when a build runs: the
    socket module, and tempfile and shutil where they are used, are no cost to an estimate)."""
    import socket

    return re.sub(r"[^A-Za-z0-9]+", "_", socket.gethostname()).strip("_") or "host"


@dataclasses.dataclass
class _Claims:
    """Which device names are taken, and by whom, while a user's hardware files load."""

    shipped: set[str]
    aliases: dict[str, str]
    user: dict[str, str] = dataclasses.field(default_factory=dict)  # name -> the user file that added it
    overridden: dict[str, str] = dataclasses.field(default_factory=dict)  # shipped name -> user file

    def take(self, con: Any, name: str, override: bool, where: str, origin: str) -> None:
        """Claims ``name`` for a row of ``origin``; a name already taken needs override=true."""
        replace = "set override=true in that row to replace it"
        if name in self.user:
            if not override:
                raise CatalogError(f"{where}: '{name}' is already a device of {self.user[name]}; {replace}")
            con.execute("DELETE FROM hardware WHERE name = ?", [name])
            if name in self.overridden:
                self.overridden[name] = origin
        elif name in self.shipped:
            if not override:
                raise CatalogError(f"{where}: '{name}' is a shipped device; {replace}")
            con.execute("DELETE FROM hardware WHERE name = ?", [name])
            self.overridden[name] = origin
        elif name in self.aliases:
            if not override:
                raise CatalogError(f"{where}: '{name}' is a shipped alias of {self.aliases[name]}; {replace}")
            con.execute("DELETE FROM hardware_alias WHERE alias = ?", [name])
            self.overridden[name] = origin
        self.user[name] = origin


def _read_user_file(p: Path, what: str, expected: str) -> bytes:
    """The bytes of a user's file, or a CatalogError naming it and what is wrong."""
    try:
        if p.is_dir():
            raise CatalogError(f"{what} '{p}' is a directory ({expected})")
        if not p.exists():
            raise CatalogError(f"{what} '{p}' does not exist ({expected})")
        if not p.is_file():
            raise CatalogError(f"{what} '{p}' is not a regular file ({expected})")
        return p.read_bytes()
    except PermissionError:
        raise CatalogError(f"{what} '{p}' cannot be read: permission denied ({expected})") from None
    except OSError as e:
        raise CatalogError(f"{what} '{p}' cannot be read: {e.strerror or e} ({expected})") from None
    except MemoryError:
        raise CatalogError(f"{what} '{p}' is too large to read into memory ({expected})") from None


def _user_text(data: bytes, origin: str, expected: str) -> str:
    """A user's CSV as UTF-8 text with a header, rows under it and no ragged row, else a CatalogError.

    A byte-order mark, as spreadsheets write, is dropped. The shape is checked here, before
    any build, so that a broken file costs no time; the columns are checked as it loads.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise CatalogError(
            f"{origin}:{line}: byte 0x{data[e.start]:02x} is not UTF-8 text; save the file as UTF-8 ({expected})"
        ) from None
    if not text.strip():
        raise CatalogError(f"{origin}: empty file ({expected}, a header row first)")
    header, rows = _parse_csv(text, origin)
    if not rows:
        raise CatalogError(f"{origin}: a header but no rows ({expected} under it)")
    for line, r in rows:
        if len(r) != len(header):
            raise CatalogError(
                f"{origin}:{line}: {len(r)} fields, the header has {len(header)} (quote a value that holds a comma)"
            )
    return text


def _fill(
    con: Any, folder: Path, extra: Sequence[tuple[Path, str]] = (), constants: Optional[tuple[Path, str]] = None
) -> dict[str, Any]:
    """Loads the shipped rows, and the user's (``extra`` hardware files and a ``constants``
    override, each with its text), into ``con``; returns the engine export. ``folder`` holds the
    benchmarks' work file while they load."""
    import tempfile

    con.execute(_data.read_text("data/schema.sql"))
    shipped = set(_data.list_files("data/"))
    for table, f in (*_TABLE_FILES.items(), *_OPTIONAL_FILES):
        if f in shipped:
            _load_csv(con, table, _data.read_text(f), f)
    claims = _Claims(
        shipped={n for (n,) in con.execute("SELECT name FROM hardware").fetchall()},
        aliases=dict(con.execute("SELECT alias, name FROM hardware_alias").fetchall()),
    )
    for p, text in extra:
        _load_csv(con, "hardware", text, str(p), user=True, claims=claims)
    if constants is not None:
        known = {n for (n,) in con.execute("SELECT name FROM constants").fetchall()}
        _load_csv(con, "constants", constants[1], str(constants[0]), replace=True, user=True, known=known)
    with tempfile.TemporaryDirectory(prefix=f".bench-{os.getpid()}-{_host()}-", dir=folder) as work:
        _load_benchmarks(con, Path(work))
    rows = con.execute(_data.query("device_for_engine")).fetchall()
    cols = [d[0] for d in con.description]
    return {
        "devices": [dict(zip(cols, r)) for r in rows],
        "aliases": dict(con.execute("SELECT alias, name FROM hardware_alias").fetchall()),
        "constants": {
            n: {"value": v, "unit": u, "source": s}
            for n, v, u, s in con.execute("SELECT name, value, unit, source FROM constants").fetchall()
        },
        "overridden": claims.overridden,
        "runtimes": [r for (r,) in con.execute(_data.query("measured_runtimes")).fetchall()],
        "prices": _prices(con),
        "purchases": _purchases(con),
        "memory": _memory(con),
    }


def _memory(con: Any) -> dict[str, list[dict[str, Any]]]:
    """Each device's memory configurations (``hardware_memory``), smallest first, with their sources."""
    out: dict[str, list[dict[str, Any]]] = {}
    q = "SELECT name, memory_gb, source FROM hardware_memory ORDER BY name, memory_gb"
    for name, gb, source in con.execute(q).fetchall():
        out.setdefault(name, []).append({"memory_gb": gb, "source": source})
    return out


def memory_config_name(name: str, memory_gb: float) -> str:
    """The catalog name of a row's memory configuration: ``M3_MAX`` at 64 GB is ``M3_MAX_64GB``.

    >>> memory_config_name("M3_MAX_30C", 36.0)
    'M3_MAX_30C_36GB'
    """
    return f"{name}_{memory_gb:g}GB"


def _purchases(con: Any) -> dict[str, list[dict[str, Any]]]:
    """Each device's purchase prices (``hardware_purchase``), cheapest first, its source's address kept."""
    out: dict[str, list[dict[str, Any]]] = {}
    q = ("SELECT name, vendor, kind, usd_per_device, CAST(as_of AS VARCHAR), split_part(source, ' | ', 1) "
         "FROM hardware_purchase ORDER BY name, usd_per_device, as_of DESC, vendor")  # fmt: skip
    for name, vendor, kind, usd, as_of, url in con.execute(q).fetchall():
        out.setdefault(name, []).append({"vendor": vendor, "kind": kind, "usd_per_device": usd, "as_of": as_of,
                                         "source": url})  # fmt: skip
    return out


def _prices(con: Any) -> dict[str, list[dict[str, Any]]]:
    """Each device's price rows (``hardware_cost``), cheapest first, its source's address kept."""
    out: dict[str, list[dict[str, Any]]] = {}
    q = (
        "SELECT name, provider, sku, tier, devices_per_sku, usd_per_device_hour, region, CAST(as_of AS VARCHAR), "
        "split_part(source, ' | ', 1) FROM hardware_cost ORDER BY name, tier, usd_per_device_hour, provider, sku"
    )
    for name, provider, sku, tier, n, usd, region, as_of, url in con.execute(q).fetchall():
        out.setdefault(name, []).append({"provider": provider, "sku": sku, "tier": tier, "devices_per_sku": n,
                                         "usd_per_device_hour": usd, "region": region, "as_of": as_of,
                                         "source": url})  # fmt: skip
    return out


def _parse_csv(text: str, origin: str) -> tuple[list[str], list[tuple[int, list[Optional[str]]]]]:
    """The header and the (line, fields) of each row; blank lines skipped, quoted newlines kept."""
    reader = csv.reader(io.StringIO(text, newline=""))
    rows: list[tuple[int, list[Optional[str]]]] = []
    header: Optional[list[str]] = None
    last = 0
    try:
        for r in reader:
            start, last = last + 1, reader.line_num
            if not r:
                continue
            if header is None:
                header = r
            else:
                rows.append((start, [None if v == "" else v for v in r]))
    except csv.Error as e:
        raise CatalogError(f"{origin}:{reader.line_num}: not readable as CSV ({e})") from None
    if header is None:
        raise CatalogError(f"{origin}: empty file (expected a header row)")
    return header, rows


def _load_csv(
    con: Any,
    table: str,
    text: str,
    origin: str,
    replace: bool = False,
    user: bool = False,
    claims: Optional[_Claims] = None,
    known: Optional[set[str]] = None,
) -> None:
    """Inserts the rows of one CSV into ``table``; every refusal names the file, line and column.

    ``user``: a user's file (a header alone is refused). ``claims``: user hardware rows, whose
    names must not take a shipped or earlier one without ``override=true`` (a column of the
    file, not of the table). ``replace``: a row replaces the one of its name, which must be
    in ``known`` when given.
    """
    import duckdb

    header, rows = _parse_csv(text, origin)
    described = con.execute(f'SELECT column_name, column_type, "null" FROM (DESCRIBE {table})').fetchall()
    types = {c: t for c, t, _ in described}
    accepted = [*types, *(["override"] if claims is not None else [])]
    unknown = [h for h in header if h not in accepted]
    if unknown:
        raise CatalogError(f"{origin}:1: unknown column(s) {', '.join(unknown)}; accepted: {', '.join(accepted)}")
    twice = sorted({h for h in header if header.count(h) > 1})
    if twice:
        raise CatalogError(f"{origin}:1: column(s) {', '.join(twice)} appear more than once in the header")
    required = [c for c, _, null in described if null == "NO" and c not in header]
    if required:
        raise CatalogError(f"{origin}:1: missing required column(s) {', '.join(required)}")
    if user and not rows:
        raise CatalogError(f"{origin}: a header but no rows (expected at least one row under it)")
    cols = [h for h in header if h != "override"]
    pick = [header.index(c) for c in cols]
    finite = [(j, c) for j, c in enumerate(cols) if types[c] in ("DOUBLE", "FLOAT", "REAL")]
    placeholders = ", ".join(f"CAST(? AS {types[c]})" for c in cols)
    names = ", ".join(f'"{c}"' for c in cols)
    seen: dict[str, int] = {}
    batch: list[tuple[str, list[Optional[str]]]] = []
    for line, r in rows:
        if len(r) != len(header):
            raise CatalogError(
                f"{origin}:{line}: {len(r)} fields, the header has {len(header)} (quote a value that holds a comma)"
            )
        values = [r[i] for i in pick]
        name = r[header.index("name")] if "name" in header else None
        where = f"{origin}:{line} ({name or r[0] or '?'})"
        for j, c in finite:
            v = values[j]
            if v is not None and _non_finite(v):
                raise CatalogError(f"{where}: column {c} is '{v}', not a finite number; accepted: a finite number")
        if name is not None and (claims is not None or known is not None):
            if name in seen:
                raise CatalogError(f"{where}: '{name}' is already a row of this file (line {seen[name]}); keep one")
            seen[name] = line
        if known is not None and name is not None and name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
            hint = f"; closest: {', '.join(close)}" if close else ""
            raise CatalogError(f"{where}: '{name}' is not a shipped constant, so nothing would read it{hint}")
        if claims is None and not replace:
            batch.append((where, values))
            continue
        try:
            if claims is not None and name is not None:
                override = _override(r[header.index("override")] if "override" in header else None, where)
                claims.take(con, name, override, f"{origin}:{line}", origin)
            if replace and name is not None:
                con.execute(f"DELETE FROM {table} WHERE name = ?", [name])
            con.execute(f"INSERT INTO {table} ({names}) VALUES ({placeholders})", values)
        except duckdb.Error as e:
            raise CatalogError(f"{where}: {_explain(con, table, cols, values, e)}") from None
    if batch:
        # One statement for a whole file (a row at a time costs milliseconds each); should it
        # fail, nothing of it is in and the rows go in one by one to name the one at fault.
        try:
            rows_sql = ", ".join([f"({placeholders})"] * len(batch))
            con.execute(f"INSERT INTO {table} ({names}) VALUES {rows_sql}", [v for _, vs in batch for v in vs])
        except duckdb.Error:
            for where, values in batch:
                try:
                    con.execute(f"INSERT INTO {table} ({names}) VALUES ({placeholders})", values)
                except duckdb.Error as e:
                    raise CatalogError(f"{where}: {_explain(con, table, cols, values, e)}") from None


def _non_finite(v: str) -> bool:
    try:
        return not math.isfinite(float(v))
    except ValueError:
        return False  # not a number at all: DuckDB's cast says so, with the column


def _override(v: Optional[str], where: str) -> bool:
    if v is None or v.strip().lower() == "false":
        return False
    if v.strip().lower() == "true":
        return True
    raise CatalogError(f"{where}: column override is '{v}'; accepted: true, false or empty")


def _explain(con: Any, table: str, cols: Sequence[str], values: Sequence[Optional[str]], e: Exception) -> str:
    """A DuckDB insert error restated with the column(s) and value(s) it is about."""
    msg = str(e).splitlines()[0]
    given = dict(zip(cols, values))

    def shown(c: str) -> str:
        return f"{c} = '{given[c]}'" if given.get(c) is not None else f"{c} empty"

    if "CHECK constraint failed" in msg:
        q = "SELECT constraint_text, constraint_column_names FROM duckdb_constraints() WHERE table_name = ?"
        for text, columns in con.execute(q + " AND constraint_type = 'CHECK'", [table]).fetchall():
            if text in msg:
                return f"{', '.join(shown(c) for c in dict.fromkeys(columns))} fails {text}"
    m = re.search(r"NOT NULL constraint failed: \w+\.(\w+)", msg)
    if m:
        return f"column {m.group(1)} is empty; it is required"
    m = re.search(r"Could not convert string '(.*)' to (\w+)", msg)
    if m:
        bad = [c for c in cols if given.get(c) == m.group(1)]
        if bad:
            return f"column {bad[0]} is '{m.group(1)}', not a {m.group(2)}"
    return msg


def _load_benchmarks(con: Any, workdir: Path) -> None:
    """Imports the measured rows through one CSV scan (row-by-row inserts take seconds)."""
    from .benchmarks import COLUMNS, shipped_rows

    rows = shipped_rows()
    known = {n for (n,) in con.execute("SELECT name FROM hardware").fetchall()}
    path = workdir / "benchmarks.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(COLUMNS)
        for r in rows:
            if r["hardware"] is not None and r["hardware"] not in known and not r["not_priced"]:
                r = {**r, "not_priced": f"no catalog row for {r['hardware']}"}
            w.writerow(["\\N" if r[c] is None else r[c] for c in COLUMNS])
    con.execute(
        "INSERT INTO benchmarks BY NAME SELECT * FROM read_csv(?, header = true, all_varchar = true, "
        "nullstr = '\\N', quote = '\"', escape = '\"')",
        [str(path)],
    )
