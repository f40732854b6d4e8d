"""The hardware catalog: a DuckDB database built from the text files under data/.

The database is built on first use into a cache folder (or a path the user
names) and rebuilt whenever the shipped data or a user's extra CSV changes.
It is the single source of truth: the engine reads its device rows through a
JSON export written beside the database at build time, so an estimate does
not pay for opening DuckDB.
"""

from __future__ import annotations

import csv
import dataclasses
import difflib
import functools
import hashlib
import io
import json
import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Optional

from . import _data
from .errors import CatalogError, UnknownNameError

_TABLE_FILES = {
    "hardware": "data/hardware/devices.csv",
    "hardware_alias": "data/hardware/hardware_alias.csv",
    "host_links": "data/hardware/host_links.csv",
    "arch_ratios": "data/hardware/arch_ratios.csv",
    "constants": "data/constants.csv",
}
_OPTIONAL_FILES = {
    "hardware_sources": "data/hardware/hardware_sources.csv",
    "hardware_bins": "data/hardware/hardware_bins.csv",
    "hardware_cost": "data/hardware/hardware_cost.csv",
    "link_measurements": "data/hardware/link_measurements.csv",
    "calibration": "data/calibration/fits.csv",
}


def cache_dir() -> Path:
    """``$RIDGELINE_CACHE_DIR``, else ``$XDG_CACHE_HOME/ridgeline``, else ``~/.cache/ridgeline``."""
    env = os.environ.get("RIDGELINE_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ridgeline"


def _normalise_name(s: str) -> str:
    return re.sub(r"[^A-Z0-9]+", "_", s.strip().upper()).strip("_")


@dataclasses.dataclass(frozen=True)
class Device:
    """One catalog row as the engine sees it (units in the names)."""

    name: str
    vendor: str
    arch: str
    kind: str
    verified: bool
    tflops_bf16: Optional[float]
    tflops_fp16: Optional[float]
    tflops_fp16_acc16: Optional[float]
    tflops_fp8: Optional[float]
    tflops_int8: Optional[float]
    tflops_tf32: Optional[float]
    tflops_fp32: Optional[float]
    memory_gb: float
    memory_bw_gbs: float
    memory_type: Optional[str]
    scaleup_bw_gbs: Optional[float]
    scaleup_latency_us: Optional[float]
    scaleup_latency_source: Optional[str]
    scaleup_domain: Optional[int]
    scaleout_bw_gbs: Optional[float]
    scaleout_latency_us: Optional[float]
    host_link: Optional[str]
    host_link_bw_gbs: Optional[float]
    tdp_w: Optional[float]
    idle_w: Optional[float]
    source: Optional[str]

    @functools.cached_property
    def core(self) -> Any:
        from . import _core

        fields = {"name", "memory_gb", "memory_bw_gbs", "scaleup_bw_gbs", "scaleup_latency_us", "host_link_bw_gbs"}
        row = {k: v for k, v in dataclasses.asdict(self).items() if k in fields or k.startswith("tflops_")}
        return _core.CoreDevice(json.dumps(row))


class Catalog:
    """The DuckDB-backed hardware catalog.

    >>> Catalog().get("H100_SXM").tflops_bf16
    989.4
    """

    def __init__(
        self,
        path: Optional[str | Path] = None,
        extra: Sequence[str | Path] = (),
        constants: Optional[str | Path] = None,
    ) -> None:
        env_extra = [p for p in os.environ.get("RIDGELINE_HARDWARE", "").split(os.pathsep) if p]
        self.extra = tuple(Path(p) for p in (*env_extra, *extra))
        for p in self.extra:
            if not p.is_file():
                raise CatalogError(
                    f"extra hardware file '{p}' does not exist (expected a CSV with the devices.csv columns)"
                )
        env_constants = os.environ.get("RIDGELINE_CONSTANTS")
        self.constants_file = Path(constants) if constants else (Path(env_constants) if env_constants else None)
        if self.constants_file is not None and not self.constants_file.is_file():
            raise CatalogError(
                f"constants override '{self.constants_file}' does not exist (expected name,value,unit,source,note rows)"
            )
        self.fingerprint = self._fingerprint()
        if path is None:
            path = cache_dir() / f"catalog-{self.fingerprint}.duckdb"
        self.path = Path(path)
        self.export_path = self.path.with_suffix(".json")
        if not (self.path.exists() and self.export_path.exists()):
            self._build()

    def _fingerprint(self) -> str:
        h = hashlib.sha256(_data.data_hash().encode())
        for p in (*self.extra, *([self.constants_file] if self.constants_file else [])):
            h.update(str(p).encode())
            h.update(p.read_bytes())
        return h.hexdigest()[:16]

    # -- building ---------------------------------------------------------
    def _build(self) -> None:
        import duckdb

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".catalog-", suffix=".duckdb", dir=self.path.parent)
        os.close(fd)
        os.unlink(tmp)
        try:
            con = duckdb.connect(tmp)
            con.execute(_data.read_text("data/schema.sql"))
            shipped = set(_data.list_files("data/"))
            for table, f in {**_TABLE_FILES, **_OPTIONAL_FILES}.items():
                if f in shipped:
                    _load_csv(con, table, _data.read_text(f), f)
            for p in self.extra:
                _load_csv(con, "hardware", p.read_text(), str(p), replace=True)
            if self.constants_file:
                _load_csv(con, "constants", self.constants_file.read_text(), str(self.constants_file), replace=True)
            with tempfile.TemporaryDirectory(prefix=".bench-", dir=self.path.parent) as work:
                _load_benchmarks(con, Path(work))
            rows = con.execute(_data.query("device_for_engine")).fetchall()
            cols = [d[0] for d in con.description]
            export = {
                "devices": [dict(zip(cols, r)) for r in rows],
                "aliases": dict(con.execute("SELECT alias, name FROM hardware_alias").fetchall()),
                "constants": {
                    n: {"value": v, "unit": u, "source": s}
                    for n, v, u, s in con.execute("SELECT name, value, unit, source FROM constants").fetchall()
                },
            }
            con.close()
            fd, tmp_json = tempfile.mkstemp(prefix=".catalog-", suffix=".json", dir=self.path.parent)
            with os.fdopen(fd, "w") as fh:
                json.dump(export, fh)
            os.replace(tmp, self.path)
            os.replace(tmp_json, self.export_path)
        finally:
            for leftover in (tmp, tmp + ".wal"):
                if os.path.exists(leftover):
                    os.unlink(leftover)

    # -- the engine's fast path -------------------------------------------
    @functools.cached_property
    def _export(self) -> dict[str, Any]:
        export: dict[str, Any] = json.loads(self.export_path.read_text())
        return export

    @functools.cached_property
    def _devices(self) -> dict[str, Device]:
        fields = {f.name for f in dataclasses.fields(Device)}
        return {r["name"]: Device(**{k: v for k, v in r.items() if k in fields}) for r in self._export["devices"]}

    def names(self) -> list[str]:
        return sorted(self._devices)

    def find(self, name: str) -> Optional[str]:
        """Canonical device name for a name or alias, else None (no closest match)."""
        key = _normalise_name(name)
        if key in self._devices:
            return key
        alias = self._export["aliases"].get(key)
        return None if alias is None else str(alias)

    def resolve(self, name: str) -> str:
        """Canonical device name for a name or alias; unknown names list the closest."""
        found = self.find(name)
        if found is not None:
            return found
        key = _normalise_name(name)
        aliases = self._export["aliases"]
        pool = self.names() + sorted(aliases)
        close = difflib.get_close_matches(key, pool, n=3, cutoff=0.5)
        if not close:
            close = [n for n in pool if key[:3] and n.startswith(key[:3])][:3]
        names = list(dict.fromkeys(aliases.get(c, c) for c in close))
        hint = f"; closest: {', '.join(names)}" if names else ""
        raise UnknownNameError(f"unknown hardware '{name}'{hint} (see `ridgeline catalog list`)")

    def get(self, name: str) -> Device:
        return self._devices[self.resolve(name)]

    def constant(self, name: str) -> float:
        try:
            return float(self._export["constants"][name]["value"])
        except KeyError:
            raise CatalogError(f"constant '{name}' is missing from data/constants.csv") from None

    # -- SQL --------------------------------------------------------------
    def connect(self) -> Any:
        """A read-only DuckDB connection to the catalog database."""
        import duckdb

        return duckdb.connect(str(self.path), read_only=True)

    def sql(self, query: str, params: Optional[Sequence[Any]] = None) -> Any:
        """Runs a read-only query and returns a Polars DataFrame."""
        import duckdb

        con = duckdb.connect(str(self.path), read_only=True, config={"enable_external_access": False})
        try:
            rel = con.execute(query, params or [])
            if rel.description is None:
                raise CatalogError("the query returned no result set")
            return _frame(rel.fetchall(), [d[0] for d in rel.description])
        except duckdb.Error as e:
            raise CatalogError(f"query failed: {str(e).splitlines()[0]}") from None
        finally:
            con.close()

    def audit(self) -> list[tuple[str, str, bool, Any]]:
        """Runs every ``queries/audit_*.sql``: (name, question, must_pass, rows)."""
        out = []
        for f in sorted(_data.list_files("queries/audit_")):
            text = _data.read_text(f)
            question = _header(text, "question")
            must = _header(text, "must_pass").lower() == "true"
            out.append((f.rsplit("/", 1)[1][:-4], question, must, self.sql(text)))
        return out


def _frame(rows: list[tuple[Any, ...]], cols: list[str]) -> Any:
    """Rows as a Polars DataFrame (no pyarrow needed)."""
    import polars as pl

    data = {c: [r[i] for r in rows] for i, c in enumerate(cols)}
    return pl.DataFrame(data, strict=False)


def _header(sql: str, key: str) -> str:
    """A ``-- key: value`` header of a query file; the value may run over comment lines."""
    out: list[str] = []
    for line in sql.splitlines():
        if not line.startswith("--"):
            break
        body = line[2:].strip()
        m = re.match(r"(\w+):\s*(.*)", body)
        if m:
            if out:
                break
            if m.group(1) == key:
                out.append(m.group(2))
        elif out:
            out.append(body)
    return " ".join(out)


def _load_csv(con: Any, table: str, text: str, origin: str, replace: bool = False) -> None:
    import duckdb

    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise CatalogError(f"{origin}: empty file (expected a header row)") from None
    cols = [c for c, _ in con.execute(f"SELECT column_name, column_type FROM (DESCRIBE {table})").fetchall()]
    unknown = [h for h in header if h not in cols]
    if unknown:
        raise CatalogError(f"{origin}: unknown column(s) {', '.join(unknown)}; accepted: {', '.join(cols)}")
    rows = [[None if v == "" else v for v in r] for r in reader if r]
    placeholders = ", ".join(f"CAST(? AS {t})" for t in _types(con, table, header))
    names = ", ".join(f'"{h}"' for h in header)
    for i, r in enumerate(rows, start=2):
        if len(r) != len(header):
            raise CatalogError(f"{origin}:{i}: {len(r)} fields, the header has {len(header)}")
        try:
            if replace and "name" in header:
                con.execute(f"DELETE FROM {table} WHERE name = ?", [r[header.index("name")]])
            con.execute(f"INSERT INTO {table} ({names}) VALUES ({placeholders})", r)
        except duckdb.Error as e:
            label = r[0] if r else "?"
            raise CatalogError(f"{origin}:{i} ({label}): {str(e).splitlines()[0]}") from None


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


def _types(con: Any, table: str, header: Iterable[str]) -> list[str]:
    types = dict(con.execute(f"SELECT column_name, column_type FROM (DESCRIBE {table})").fetchall())
    return [types[h] for h in header]


@functools.lru_cache(maxsize=1)
def default_catalog() -> Catalog:
    return Catalog()
