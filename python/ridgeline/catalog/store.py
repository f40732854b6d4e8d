"""The hardware catalog: a DuckDB database built from the text files under data/.

The database is the single source of truth. The engine reads what it needs of it
(device rows, aliases, constants, the runtimes with measured rows) through a JSON
export, so an estimate does not pay for DuckDB:

- the shipped data's export is data/hardware/engine_export.json, written from a
  DuckDB build by ``ridgeline catalog export`` and compiled into the extension
  (tests/test_catalog.py checks it against a fresh build, byte for byte). A
  catalog of the shipped data alone reads it and writes nothing until a query
  asks for the database, which is then built into a cache folder (or a path the
  user names), once per version of the data;
- with a user's hardware or constants file, the catalog builds the database and
  its export into the cache when it is created, keyed by the files' contents.

Either cache file found damaged (truncated, garbled, empty, lacking a table or a
key) is rebuilt from the embedded text where it is opened; a build leaves no temp
file, and removes those of killed builds.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional, TypeVar

from .. import _data
from .. import names as _names
from ..errors import CatalogError, PlanError, UnknownNameError
from .device import _NO_NAMES, Device, _normalise_name
from .export import _read_export, _shipped_export
from .sources import (
    _CONSTANTS_FILE,
    _HARDWARE_FILE,
    _TABLES,
    _fill,
    _host,
    _read_user_file,
    _user_text,
    memory_config_name,
)

T = TypeVar("T")


#: How long ``Catalog.sql`` lets a query run before interrupting it: a work bound, not a model
#: constant (the catalog's tables hold hundreds to thousands of rows and its audits take
#: milliseconds; a cross join of the catalog four times or range(10^10) would run for minutes).
SQL_TIMEOUT_S = 60.0


#: Hours in a year (365.25 days), the unit a purchase price is amortised over.
HOURS_PER_YEAR = 365.25 * 24
#: The price tiers an offer falls in by who rents it (data/hardware/providers.csv): a hyperscaler's
#: list price, a GPU cloud's (a neocloud), or a marketplace of independent hosts' asks.
PRICE_TIERS = ("hyperscaler", "neocloud", "marketplace")
_PROVIDERS = "data/hardware/providers.csv"


@functools.lru_cache(maxsize=1)
def _provider_rows() -> tuple[dict[str, str], ...]:
    import csv

    return tuple(csv.DictReader(_data.read_text(_PROVIDERS).splitlines()))


def price_tier_of(provider: str, sku: str) -> str:
    """The price tier of an offer (``PRICE_TIERS``): the first row of data/hardware/providers.csv
    naming its provider whose ``sku_contains`` is empty or in the SKU. A provider the file does not
    class is an error naming it (a new offer's provider is classed when it is added).

    >>> [price_tier_of(p, s) for p, s in (("RunPod", "H100 (Community Cloud)"), ("RunPod", "H100 pod"), ("GCP", "a3"))]
    ['marketplace', 'neocloud', 'hyperscaler']
    """
    for r in _provider_rows():
        if r["provider"] == provider and (not r["sku_contains"] or r["sku_contains"] in sku):
            return r["class"]
    raise CatalogError(f"provider {provider!r} has no price tier in {_PROVIDERS}; add a row for it")


# Temp files of a build carry the builder's pid and host (`.catalog-<pid>-<host>-XXXX.duckdb`,
# `.bench-<pid>-<host>-XXXX/`, the host from `_host()`) so that a later build can remove the
# leftovers of a builder that was killed (its pid gone on this host) and never touch a live
# one's, on this host or another that shares the cache folder.
_TEMP_NAME = re.compile(r"\.(?:catalog|bench)-(\d+)-([A-Za-z0-9_]+)-")


def cache_dir() -> Path:
    """``$RIDGELINE_CACHE_DIR``, else ``$XDG_CACHE_HOME/ridgeline``, else ``~/.cache/ridgeline``."""
    env = os.environ.get("RIDGELINE_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ridgeline"


class Catalog:
    """The DuckDB-backed hardware catalog.

    Names, devices, aliases and constants come from the engine export (no DuckDB);
    ``sql``, ``connect`` and ``audit`` open the database, built on first use.

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
        # The same file named twice (in the variable and as an argument) is one set of rows.
        unique: dict[str, Path] = {}
        for p in (Path(p) for p in (*env_extra, *extra)):
            unique.setdefault(os.path.realpath(p), p)
        self.extra = tuple(unique.values())
        # Each user file is read once: the fingerprint and the build see the same bytes.
        raw = [_read_user_file(p, "extra hardware file", _HARDWARE_FILE) for p in self.extra]
        self._extra_text = [_user_text(b, str(p), _HARDWARE_FILE) for p, b in zip(self.extra, raw)]
        env_constants = os.environ.get("RIDGELINE_CONSTANTS")
        self.constants_file = Path(constants) if constants else (Path(env_constants) if env_constants else None)
        self._constants: Optional[tuple[Path, str]] = None  # the override and its text
        if self.constants_file is not None:
            b = _read_user_file(self.constants_file, "constants override", _CONSTANTS_FILE)
            self._constants = (self.constants_file, _user_text(b, str(self.constants_file), _CONSTANTS_FILE))
            raw.append(b)
        self.fingerprint = self._fingerprint(raw)
        self._memo: dict[str, Any] = {}
        if path is None:
            path = cache_dir() / f"catalog-{self.fingerprint}.duckdb"
        self.path = Path(path)
        self.export_path = self.path.with_suffix(".json")
        # The shipped data alone: its export is compiled in, the database waits for a query.
        # A user's file: its rows are checked and exported now, as the catalog is created.
        self._shipped = not self.extra and self.constants_file is None
        if not self._shipped and not (self.path.exists() and self.export_path.exists()):
            self._build()

    def _fingerprint(self, raw: Sequence[bytes]) -> str:
        h = hashlib.sha256(_data.data_hash().encode())
        for p, b in zip((*self.extra, *([self.constants_file] if self.constants_file else [])), raw):
            h.update(str(p).encode())
            h.update(b)
        return h.hexdigest()[:16]

    # -- building ---------------------------------------------------------
    def _build(self) -> None:
        """Builds the database (and, with a user's file, its export) into temp files, then moves
        them into place; the shipped data's export is the compiled-in one, so none is written.

        Many processes may build the same catalog at once: each writes its own temp
        files and ``os.replace`` makes the move atomic, so a reader sees a whole file.
        """
        import tempfile

        import duckdb

        folder = self.path.parent
        prefix = f".catalog-{os.getpid()}-{_host()}-"
        tmp = tmp_json = ""
        try:
            try:
                folder.mkdir(parents=True, exist_ok=True)
                _remove_stale_temps(folder)
                fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".duckdb", dir=folder)
                os.close(fd)
                os.unlink(tmp)
                con = duckdb.connect(tmp)
                try:
                    export = _fill(con, folder, list(zip(self.extra, self._extra_text)), self._constants)
                finally:
                    con.close()
                if not self._shipped:
                    fd, tmp_json = tempfile.mkstemp(prefix=prefix, suffix=".json", dir=folder)
                    with os.fdopen(fd, "w") as fh:
                        json.dump(export, fh)
                # A WAL left beside the final path (never written there by a build) would be
                # replayed onto the new file.
                stale_wal = Path(f"{self.path}.wal")
                if stale_wal.exists():
                    stale_wal.unlink()
                os.replace(tmp, self.path)
                if tmp_json:
                    os.replace(tmp_json, self.export_path)
            except (OSError, duckdb.IOException) as e:
                why = e.strerror if isinstance(e, OSError) and e.strerror else str(e).splitlines()[0]
                raise CatalogError(
                    f"cannot write the catalog cache in '{folder}': {why}; set RIDGELINE_CACHE_DIR to a writable folder"
                ) from None
        finally:
            for leftover in (tmp, f"{tmp}.wal", tmp_json):
                if leftover and os.path.exists(leftover):
                    os.unlink(leftover)

    # -- the engine's fast path -------------------------------------------
    @functools.cached_property
    def _export(self) -> dict[str, Any]:
        if self._shipped:
            return _shipped_export()
        export = _read_export(self.export_path)
        if export is None:
            # Truncated, garbled, empty or from an older layout: rebuild it from the embedded text.
            self._build()
            export = _read_export(self.export_path)
            if export is None:
                raise CatalogError(
                    f"the catalog export '{self.export_path}' is unreadable even after a rebuild; "
                    "delete it (or set RIDGELINE_CACHE_DIR to another folder) and run again"
                )
        return export

    @property
    def overridden(self) -> dict[str, str]:
        """Shipped device (or alias) names that a user's row replaced, each with the file it came from.

        >>> Catalog().overridden
        {}
        """
        return {str(k): str(v) for k, v in self._export["overridden"].items()}

    def override_note(self, name: str) -> Optional[str]:
        """A one-line note when ``name`` resolves to a user's row that replaced a shipped one, else None.

        >>> Catalog().override_note("H100_SXM") is None
        True
        """
        overridden = self._export["overridden"]
        key = _normalise_name(name)
        if key not in overridden:
            found = self.find(name)
            if found is None or found not in overridden:
                return None
            key = found
        return f"{key} is the user's row from {overridden[key]} (override=true), not the shipped one"

    @functools.cached_property
    def _devices(self) -> dict[str, Device]:
        fields = {f.name for f in dataclasses.fields(Device)}
        out = {}
        for r in self._export["devices"]:
            kw: dict[str, Any] = {k: (tuple(v) if k == "links" else v) for k, v in r.items() if k in fields}
            out[r["name"]] = Device(**kw)
        return out

    @functools.cached_property
    def _configurations(self) -> dict[str, Device]:
        """The memory configurations of rows that hold one of several sizes (``M3_MAX_64GB``):
        each its row with memory_gb replaced and the configuration's source added. Reached by
        name only: listings, sweeps over the catalog and recommend search the rows."""
        out = {}
        for name, sizes in self._export.get("memory", {}).items():
            dev = self._devices.get(name)
            for c in sizes:
                if dev is None or c["memory_gb"] == dev.memory_gb:
                    continue
                key = memory_config_name(name, c["memory_gb"])
                src = f"{dev.source} | memory {c['memory_gb']:g} GB: {c['source']}"
                out[key] = dataclasses.replace(dev, name=key, memory_gb=c["memory_gb"], source=src, memory_of=name)
        return out

    def memory_sizes(self, name: str) -> list[float]:
        """The memory sizes the device ``name`` is sold with (data/hardware/hardware_memory.csv),
        smallest first; [] where the catalog lists none (its row's size is the only one known).

        >>> Catalog().memory_sizes("M3_MAX")
        [48.0, 64.0, 128.0]
        """
        return [float(c["memory_gb"]) for c in self._export.get("memory", {}).get(name, [])]

    def names(self) -> list[str]:
        return sorted(self._devices)

    def find(self, name: str) -> Optional[str]:
        """Canonical device name for a name or alias (or a memory configuration's, ``M3_MAX_64GB``),
        else None (no closest match)."""
        found = self.name_index.find(name)
        if found is None and _names.normalise(name) in self._configurations:
            return _names.normalise(name)
        return found

    def resolve(self, name: str) -> str:
        """Canonical device name for a name or alias, or for a name as people write it that names
        one device (``identify``); unknown or ambiguous names list the closest or the candidates.

        >>> Catalog().resolve("NVIDIA H100 SXM5 80GB")
        'H100_SXM'
        """
        found = self.find(name)
        if found is not None:
            return found
        found, count = self.identify(name)
        if count is not None and count != 1:
            raise PlanError(
                f"hardware '{name}' names {count} devices; give the one device ({found}) and the count "
                f"as the plan's parallelism (--tp / --pp)"
            )
        return self._sized(name, found)

    def _sized(self, name: str, found: str) -> str:
        """The memory configuration of ``found`` a name states (``"M3 Max 64GB"``: M3_MAX_64GB),
        the row itself where it states none or the row's own size; a size the part is not listed
        with is refused with those it is (a name matched the row only because the row holds the
        largest of its sizes: priced at that size, a 64 GB Mac would hold a 75 GB model)."""
        stated = _names.stated_memory(name)
        dev = self._devices[found]
        if stated is None or stated == dev.memory_gb:
            return found
        key = memory_config_name(found, stated)
        if key in self._configurations:
            return key
        sizes = self.memory_sizes(found)
        if sizes:
            listed = ", ".join(f"{s:g}" for s in sizes)
            raise UnknownNameError(
                f"hardware '{name}': {found} is sold with {listed} GB (data/hardware/hardware_memory.csv), not "
                f"{stated:g} GB; name one of those sizes"
            )
        raise UnknownNameError(
            f"hardware '{name}': {found}'s catalog row holds {dev.memory_gb:g} GB, the largest it is sold with, and "
            f"no other memory size of it is listed in data/hardware/hardware_memory.csv; name it without a size for "
            f"the {dev.memory_gb:g} GB part, or add the {stated:g} GB configuration there with its source"
        )

    def identify(self, name: str, curated: Mapping[str, str] = _NO_NAMES) -> tuple[str, Optional[int]]:
        """The device a name as people write it names and the device count written with it
        (``names.DeviceIndex.identify``): a name or alias, or the one device whose product words
        the name has and whose stated memory size, form factor, GPU cores and memory technology
        agree; an ambiguous name, or one whose stated fields no device holds, is an
        UnknownNameError listing the candidates.

        >>> Catalog().identify("3070 8GB * 4")
        ('RTX_3070', 4)
        """
        return self.name_index.identify(name, curated)

    @functools.cached_property
    def name_index(self) -> _names.DeviceIndex:
        """This catalog's device names and aliases, parsed (``names.DeviceIndex``)."""
        return _names.DeviceIndex(self._export)

    def get(self, name: str) -> Device:
        key = self.resolve(name)
        return self._devices.get(key) or self._configurations[key]

    def memo(self, key: str, build: Callable[[Catalog], T]) -> T:
        """``build(self)``, computed once for this catalog (hot paths derive tables from a catalog,
        which never changes once made).

        >>> Catalog().memo("devices", lambda c: len(c.names())) > 100
        True
        """
        if key not in self._memo:
            self._memo[key] = build(self)
        out: T = self._memo[key]
        return out

    def constant(self, name: str) -> float:
        try:
            return float(self._export["constants"][name]["value"])
        except KeyError:
            raise CatalogError(f"constant '{name}' is missing from data/constants.csv") from None

    def constant_or_none(self, name: str) -> Optional[float]:
        """A constant the engine can go without (its outputs then say what is missing)."""
        c = self._export["constants"].get(name)
        return None if c is None else float(c["value"])

    def prices(self, name: str, tier: Optional[str] = None) -> list[dict[str, Any]]:
        """A device's published rental offers (``hardware_cost``), cheapest first within a tier:
        provider, sku, tier, devices_per_sku, usd_per_device_hour, region, as_of and source; empty
        where none is known (cost is then missing, never defaulted).

        >>> Catalog().prices("H100_SXM", "on-demand")[0]["usd_per_device_hour"] > 0
        True
        """
        prices = self._export.get("prices", {})
        rows: list[dict[str, Any]] = prices.get(self.find(name) or name, [])  # a device of one's own has none
        return [{**r, "price_tier": price_tier_of(r["provider"], r["sku"])} for r in rows
                if tier is None or r["tier"] == tier]  # fmt: skip

    def purchases(self, name: str) -> list[dict[str, Any]]:
        """A device's published purchase prices (``hardware_purchase``), cheapest first: vendor,
        kind (list price, launch list price, street price or analyst estimate), usd_per_device,
        as_of and source; empty where none is known."""
        rows: list[dict[str, Any]] = self._export.get("purchases", {}).get(self.find(name) or name, [])
        return rows

    def offers(
        self, name: str, amortise_years: Optional[float] = None, price_tier: Optional[str] = None
    ) -> list[dict[str, Any]]:
        """The offers a cost is reckoned from, cheapest first: the published on-demand rentals (of
        one ``price_tier`` where given: hyperscaler, neocloud or marketplace), or with
        ``amortise_years`` the published purchase prices spread evenly over that many years of
        hours (tier ``purchase``, the price per device-hour ``usd_per_device / (years x 8766)``)."""
        if price_tier is not None:
            if price_tier not in PRICE_TIERS:
                raise PlanError(f"price_tier: one of {', '.join(PRICE_TIERS)}, got {price_tier!r}")
            if amortise_years is not None:
                raise PlanError("price_tier and amortise_years: a price tier chooses among rentals; give one")
        if amortise_years is None:
            return [r for r in self.prices(name, "on-demand") if price_tier in (None, r["price_tier"])]
        hours = amortise_years * HOURS_PER_YEAR
        return [{"provider": r["vendor"],
                 "sku": f"{r['kind']} ${r['usd_per_device']:,.0f} over {amortise_years:g} years", "tier": "purchase",
                 "devices_per_sku": 1, "usd_per_device_hour": r["usd_per_device"] / hours,
                 "region": None, "as_of": r["as_of"], "source": r["source"]} for r in self.purchases(name)]  # fmt: skip

    def measured_runtimes(self) -> list[str]:
        """The runtimes of the measured model rows (the ``benchmarks`` table), from the export.

        >>> "vllm" in Catalog().measured_runtimes()
        True
        """
        return [str(r) for r in self._export["runtimes"]]

    # -- SQL --------------------------------------------------------------
    def connect(self) -> Any:
        """A read-only DuckDB connection to the catalog database (built on first use, rebuilt first
        if the file is damaged)."""
        return self._open({}, check_tables=True)

    def _open(self, config: dict[str, Any], check_tables: bool) -> Any:
        """A read-only connection; a file not built yet is built, one DuckDB cannot open (or,
        checked, lacking a table) is rebuilt once."""
        import duckdb

        if not self.path.exists():
            self._build()
        for attempt in (1, 2):
            try:
                con = duckdb.connect(str(self.path), read_only=True, config=config)
            except duckdb.ConnectionException as e:
                # another connection of this process holds the file with other settings: not damage
                raise CatalogError(f"cannot open the catalog database: {str(e).splitlines()[0]}") from None
            except duckdb.Error as e:
                problem: Optional[str] = str(e).splitlines()[0]
            else:
                problem = _missing_tables(con) if check_tables else None
                if problem is None:
                    return con
                con.close()
            if attempt == 1:
                self._build()
        raise CatalogError(
            f"the catalog database '{self.path}' is damaged ({problem}) even after a rebuild; "
            "delete it (or set RIDGELINE_CACHE_DIR to another folder) and run again"
        )

    def sql(self, query: str, params: Optional[Sequence[Any]] = None) -> Any:
        """Runs a read-only, sandboxed query and returns a Polars DataFrame.

        The result must fit in memory (see ``_memory_limit_bytes``): a larger one is refused
        before it is fetched, with a CatalogError that asks for a LIMIT or an aggregate.

        >>> Catalog().sql("SELECT name FROM hardware WHERE name = ?", ["H100_SXM"])["name"][0]
        'H100_SXM'
        """
        if not isinstance(query, str):
            raise CatalogError(f"a query is SQL text, not {type(query).__name__}")
        budget = _memory_limit_bytes() // 2
        # DuckDB gets half of its own default limit and the frame the other half, so the two
        # together stay within what DuckDB alone would take. The settings are locked: a query
        # cannot SET them (nor re-enable file access).
        config = {"enable_external_access": False, "memory_limit": f"{budget}B", "lock_configuration": True}

        def run() -> Any:
            import threading

            con = self._open(config, check_tables=False)
            # a query that runs past SQL_TIMEOUT_S is interrupted (DuckDB has no statement timeout)
            timer = threading.Timer(SQL_TIMEOUT_S, con.interrupt)
            timer.daemon = True
            timer.start()
            try:
                return _query_frame(con, query, params, budget, str(self.path))
            finally:
                timer.cancel()
                con.close()

        try:
            return run()
        except _Damaged:
            self._build()  # once: the file is rebuilt from the embedded text and the query runs again
        try:
            return run()
        except _Damaged as e:
            # a fresh file fails the same way: the query's own doing (or DuckDB's), not the file's
            raise CatalogError(f"query failed: {e} (also on a freshly rebuilt catalog)") from None

    def audit(self) -> list[tuple[str, str, bool, Any]]:
        """Runs every ``queries/audit_*.sql``: (name, question, must_pass, rows)."""
        out = []
        for f in sorted(_data.list_files("queries/audit_")):
            text = _data.read_text(f)
            question = _header(text, "question")
            must = _header(text, "must_pass").lower() == "true"
            out.append((f.rsplit("/", 1)[1][:-4], question, must, self.sql(text)))
        return out


class _Damaged(Exception):
    """A DuckDB error that means the database file is damaged, not that the query is wrong."""


# Columns of these DuckDB types cross to Polars through the Arrow C stream (columnar, no
# pyarrow); the bytes a value takes in the frame, the variable-width ones plus their length.
_ARROW_BYTES = {
    "boolean": 1,
    "tinyint": 8,  # integers and floats are widened to 64 bits (see _widen)
    "smallint": 8,
    "integer": 8,
    "bigint": 8,
    "utinyint": 8,
    "usmallint": 8,
    "uinteger": 8,
    "ubigint": 8,
    "hugeint": 16,
    "float": 8,
    "double": 8,
    "decimal": 16,
    "date": 4,
    "time": 8,
    "timestamp": 8,
    "varchar": 16,
    "blob": 16,
    "null": 0,
}


# Other types (intervals, UUIDs, enums, nested values) go through Python objects, as before;
# a Python object and its slot in a row take about this many bytes (CPython: a float is 24,
# a small str about 50, a pointer 8), plus its text's length.
_PY_VALUE_BYTES = 64


def _query_frame(con: Any, query: str, params: Optional[Sequence[Any]], budget: int, db_path: str) -> Any:
    """The result of ``query`` as a Polars frame, refused before fetching when over ``budget`` bytes."""
    import duckdb

    try:
        empty = not con.extract_statements(query)
    except duckdb.Error:
        empty = False  # a syntax error: reported below, by the query itself
    if empty:
        raise CatalogError("empty query: the text holds no SQL statement (expected e.g. SELECT name FROM hardware)")
    try:
        rel = con.sql(query, params=list(params) if params else None)
        if rel is None:
            raise CatalogError("the query returned no result set (expected a SELECT)")
        cols, ids = list(rel.columns), [t.id for t in rel.types]
        twice = sorted({c for c in cols if cols.count(c) > 1})
        if twice:
            raise CatalogError(f"the query returns more than one column named {', '.join(twice)}; give each an AS name")
        arrow = all(i in _ARROW_BYTES for i in ids)
        fixed = sum(_ARROW_BYTES[i] if arrow else _PY_VALUE_BYTES for i in ids)
        sized = [(c, i) for c, i in zip(cols, ids) if not arrow or i in ("varchar", "blob")]
        # Rows of the smallest size that fill the budget: no result of more rows can fit.
        cap = budget // max(fixed, 1)
        exprs = ["count(*)", *(f"coalesce(sum({_length_sql(c, i)}), 0)" for c, i in sized)]
        probe = rel.limit(cap + 1).aggregate(", ".join(exprs)).fetchall()[0]
        n, size = int(probe[0]), int(probe[0]) * fixed + sum(int(v) for v in probe[1:])
        if n > cap or size > budget:
            what = f"more than {cap:,} rows" if n > cap else f"{n:,} rows, about {_gib(size)}"
            raise CatalogError(
                f"the result does not fit in memory ({what}, over the {_gib(budget)} a result may hold); "
                "add a LIMIT or aggregate"
            )
        if arrow:
            import polars as pl

            return _widen(pl.DataFrame(rel), ids)
        return _frame(rel.fetchall(), cols)
    except duckdb.InterruptException:
        raise CatalogError(
            f"the query ran past {SQL_TIMEOUT_S:g} s and was stopped (a cross join or a range of billions of rows); "
            "narrow it, or query the tables from your own DuckDB"
        ) from None
    except (duckdb.OutOfMemoryException, MemoryError):
        raise CatalogError(
            f"the result does not fit in memory (the query ran out of the {_gib(budget)} DuckDB may use here); "
            "add a LIMIT or aggregate"
        ) from None
    except duckdb.Error as e:
        first = str(e).splitlines()[0]
        if _is_damage(e, db_path):
            raise _Damaged(first) from None
        # A missing table is the user's typo unless the file lacks one of its own tables.
        missing = _missing_tables(con) if isinstance(e, duckdb.CatalogException) else None
        if missing is not None:
            raise _Damaged(missing) from None
        raise CatalogError(f"query failed: {first}") from None


def _missing_tables(con: Any) -> Optional[str]:
    """What is wrong when the database lacks a table of the schema (or cannot list them), else None."""
    import duckdb

    try:
        found = {t for (t,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    except duckdb.Error as e:
        return str(e).splitlines()[0]
    missing = sorted(_TABLES - found)
    return f"tables missing: {', '.join(missing)}" if missing else None


def _is_damage(e: Exception, db_path: str) -> bool:
    """Whether a DuckDB error during a query comes from the database file rather than the query.

    File access is disabled for queries, so an I/O error can only be the catalog file's; the
    serialization and internal errors are what DuckDB raises on blocks that do not decode.
    """
    import duckdb

    if isinstance(e, (duckdb.SerializationException, duckdb.InternalException, duckdb.FatalException)):
        return True
    return isinstance(e, duckdb.IOException) and (db_path in str(e) or "orrupt" in str(e) or "checksum" in str(e))


def _widen(df: Any, ids: Sequence[str]) -> Any:
    """Integers to Int64, floats to Float64, HUGEINT to Int64 (Int128 when needed): the types
    the frame had when it was built from Python values, so callers see the same columns."""
    import polars as pl

    small = {pl.Int8, pl.Int16, pl.Int32, pl.UInt8, pl.UInt16, pl.UInt32}
    out = []
    for c, dtype, i in zip(df.columns, df.dtypes, ids):
        col = df.get_column(c)
        if dtype in small or dtype == pl.Float32:
            col = col.cast(pl.Float64 if dtype == pl.Float32 else pl.Int64)
        elif i in ("hugeint", "ubigint"):
            try:
                col = col.cast(pl.Int64, strict=True)
            except pl.exceptions.PolarsError:
                col = col.cast(pl.Int128, strict=True) if i == "hugeint" else col
        out.append(col)
    return pl.DataFrame(out)


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _length_sql(col: str, type_id: str) -> str:
    """SQL for the bytes of a value of ``col``: its own for text and blobs, its text's for others."""
    if type_id == "blob":
        return f"octet_length({_ident(col)})"
    return f"strlen({_ident(col) if type_id == 'varchar' else f'CAST({_ident(col)} AS VARCHAR)'})"


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


@functools.lru_cache(maxsize=1)
def _memory_limit_bytes() -> int:
    """DuckDB's own default memory limit, in bytes: 80% of the memory it detects (cgroup-aware).

    ``Catalog.sql`` splits it: half for DuckDB's working memory, half for the result frame.
    """
    import duckdb

    con = duckdb.connect()
    try:
        row = con.execute("SELECT current_setting('memory_limit')").fetchone()
    finally:
        con.close()
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGTP]?i?B|bytes)\s*", str(row[0] if row else ""))
    if m:
        unit = m.group(2)
        scale = 1 if unit in ("B", "bytes") else (1024 if "i" in unit else 1000) ** ("KMGTP".index(unit[0]) + 1)
        return int(float(m.group(1)) * scale)
    # DuckDB's documented default (80% of physical memory), should its display ever change.
    try:
        return int(0.8 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 4 * 2**30  # no way to ask the machine: a small one's worth


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


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this host (one we may not signal runs too)."""
    if pid <= 0 or pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True
    return True


def _remove_stale_temps(folder: Path) -> None:
    """Removes the temp files and folders of builds on this host whose process is gone."""
    import shutil

    if os.name == "nt":  # os.kill(pid, 0) there would send a console event, not probe
        return
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        m = _TEMP_NAME.match(entry.name)
        if m is None or m.group(2) != _host() or _alive(int(m.group(1))):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
        except OSError:
            pass  # another build removed it first


@functools.lru_cache(maxsize=1)
def default_catalog() -> Catalog:
    return Catalog()
