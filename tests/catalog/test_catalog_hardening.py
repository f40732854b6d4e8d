"""Every input to the catalog answered: non-finite numbers, shipped names taken without
override=true, unreadable files, empty and oversized queries, a damaged cache, the leftovers
of a killed build. Each refusal is a CatalogError of one line naming the input."""

import json
import os
import pathlib
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import REPO
from ridgeline import Catalog, CatalogError
from ridgeline.catalog import export as export_module
from ridgeline.catalog import sources as sources_module
from ridgeline.catalog import store as catalog_module
from ridgeline.catalog.store import default_catalog

REPO = REPO
HEADER = "name,vendor,arch,family,kind,year,tflops_bf16,tflops_fp32,memory_gb,memory_bw_gbs,verified,source"
GOOD = "MY_GPU,Acme,hopper,acme,gpu,2025,500,35,96,2000,false,my measurements"


def _csv(tmp_path: Path, name: str, *rows: str, header: str = HEADER) -> Path:
    p = tmp_path / name
    p.write_text(header + "\n" + "\n".join(rows) + "\n")
    return p


def _refused(match: str, **kw: object) -> str:
    with pytest.raises(CatalogError, match=match) as e:
        Catalog(**kw)  # type: ignore[arg-type]
    msg = str(e.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


# -- 1. non-finite numbers ------------------------------------------------------------------


def _schema_con() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute((REPO / "data/schema.sql").read_text())
    return con


def test_every_double_column_refuses_nan_and_infinities():
    # DuckDB sorts NaN above every number, so `x > 0` alone lets NaN (and inf) through.
    con = _schema_con()
    doubles = con.execute("SELECT table_name, column_name FROM duckdb_columns() WHERE data_type = 'DOUBLE'").fetchall()
    checks = con.execute(
        "SELECT table_name, expression, constraint_column_names FROM duckdb_constraints() "
        "WHERE constraint_type = 'CHECK'"
    ).fetchall()
    assert len(doubles) >= 36
    unguarded = []
    for table, col in doubles:
        own = [expr for t, expr, cols in checks if t == table and set(cols) == {col}]

        def refuses(v: str, expr: str, col: str = col) -> bool:
            return con.execute(f'SELECT {expr} FROM (SELECT ?::DOUBLE AS "{col}")', [v]).fetchall()[0][0] is False

        refused = {v: any(refuses(v, expr) for expr in own) for v in ("nan", "inf", "-inf")}
        if not all(refused.values()):
            unguarded.append((table, col, refused))
    assert unguarded == []
    # and a finite value still passes: 3350 GB/s is the H100 SXM's datasheet bandwidth
    (expr,) = [e for t, e, c in checks if t == "hardware" and c == ["memory_bw_gbs", "memory_bw_gbs"]]
    assert con.execute(f"SELECT {expr} FROM (SELECT 3350.0::DOUBLE AS memory_bw_gbs)").fetchall() == [(True,)]


def test_every_shipped_row_passes_the_finite_checks(tmp_path, monkeypatch):
    # The schema in the working tree (the extension embeds the one it was built with).
    from ridgeline import _data

    embedded = _data.read_text
    monkeypatch.setattr(_data, "read_text", lambda p: (REPO / p).read_text() if p == "data/schema.sql" else embedded(p))
    built = Catalog(path=tmp_path / "finite.duckdb")
    shipped = default_catalog()
    assert built.names() == shipped.names()
    for table in ("hardware", "benchmarks", "calibration", "constants", "host_links", "link_measurements"):
        q = f"SELECT count(*) AS n FROM {table}"
        assert built.sql(q)["n"][0] == shipped.sql(q)["n"][0], table


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999"])
def test_a_non_finite_user_value_names_file_line_and_column(tmp_path, value):
    bad = GOOD.replace("MY_GPU", "BAD_GPU").replace(",2000,", f",{value},")
    p = _csv(tmp_path, "mine.csv", GOOD, "", bad)  # a blank line: the bad row is line 4
    msg = _refused(r"mine\.csv:4 \(BAD_GPU\): column memory_bw_gbs is ", path=tmp_path / "c.duckdb", extra=[p])
    assert f"'{value}', not a finite number" in msg and str(p) in msg


def test_a_constraint_failure_names_the_column_and_value(tmp_path):
    p = _csv(tmp_path, "neg.csv", GOOD.replace(",2000,", ",-5,"))
    msg = _refused(r"neg\.csv:2 \(MY_GPU\): memory_bw_gbs = '-5' fails CHECK", path=tmp_path / "c.duckdb", extra=[p])
    assert "memory_bw_gbs > 0" in msg


# -- 2. a user row adds devices; replacing a shipped one needs override=true ------------------


def test_a_shipped_name_or_alias_needs_override(tmp_path):
    assert default_catalog().find("H100") == "H100_SXM"  # H100 is a shipped alias
    p = _csv(tmp_path, "h.csv", GOOD.replace("MY_GPU", "H100_SXM"))
    _refused(
        r"h\.csv:2: 'H100_SXM' is a shipped device; set override=true in that row to replace it$",
        path=tmp_path / "a.duckdb",
        extra=[p],
    )
    p = _csv(tmp_path, "f.csv", GOOD.replace("MY_GPU", "H100_SXM") + ",false", header=HEADER + ",override")
    _refused(r"f\.csv:2: 'H100_SXM' is a shipped device", path=tmp_path / "b.duckdb", extra=[p])
    p = _csv(tmp_path, "alias.csv", GOOD.replace("MY_GPU", "H100"))
    _refused(
        r"alias\.csv:2: 'H100' is a shipped alias of H100_SXM; set override=true", path=tmp_path / "c.duckdb", extra=[p]
    )
    p = _csv(tmp_path, "yes.csv", GOOD + ",yes", header=HEADER + ",override")
    _refused(r"yes\.csv:2 \(MY_GPU\): column override is 'yes'; accepted: true, false or empty", extra=[p])


def test_an_override_replaces_the_shipped_row_and_says_so(tmp_path):
    p = _csv(
        tmp_path,
        "mine.csv",
        GOOD.replace("MY_GPU", "H100_SXM").replace(",2000,", ",1234,") + ",TRUE",
        GOOD + ",",
        header=HEADER + ",override",
    )
    c = Catalog(path=tmp_path / "o.duckdb", extra=[p])
    assert c.get("H100").memory_bw_gbs == 1234 and c.get("H100_SXM").tflops_bf16 == 500
    assert c.sql("SELECT count(*) AS n FROM hardware WHERE name = 'H100_SXM'")["n"][0] == 1
    assert "override" not in c.sql("SELECT * FROM hardware LIMIT 1").columns
    assert c.overridden == {"H100_SXM": str(p)}
    note = f"H100_SXM is the user's row from {p} (override=true), not the shipped one"
    assert c.override_note("h100") == note and c.override_note("H100_SXM") == note
    assert c.override_note("MY_GPU") is None and c.override_note("B200") is None
    # the JSON export carries it: a catalog opened from the cache knows without rebuilding
    assert json.loads(c.export_path.read_text())["overridden"] == {"H100_SXM": str(p)}
    mtime = c.path.stat().st_mtime_ns
    again = Catalog(path=tmp_path / "o.duckdb", extra=[p])
    assert again.overridden == {"H100_SXM": str(p)} and again.path.stat().st_mtime_ns == mtime
    assert default_catalog().overridden == {} and default_catalog().get("H100_SXM").memory_bw_gbs == 3350


def test_two_user_files_naming_one_new_device(tmp_path):
    a = _csv(tmp_path, "a.csv", GOOD)
    b = _csv(tmp_path, "b.csv", GOOD.replace(",2000,", ",4000,"))
    msg = _refused(
        r"b\.csv:2: 'MY_GPU' is already a device of .*a\.csv; set override=true",
        path=tmp_path / "x.duckdb",
        extra=[a, b],
    )
    assert str(a) in msg
    b2 = _csv(tmp_path, "b2.csv", GOOD.replace(",2000,", ",4000,") + ",true", header=HEADER + ",override")
    c = Catalog(path=tmp_path / "y.duckdb", extra=[a, b2])
    assert c.get("MY_GPU").memory_bw_gbs == 4000 and c.overridden == {}
    # one file holding a device twice: which row was meant is not guessed
    twice = _csv(tmp_path, "twice.csv", GOOD, GOOD.replace(",2000,", ",4000,"))
    _refused(r"twice\.csv:3 \(MY_GPU\): 'MY_GPU' is already a row of this file \(line 2\)", extra=[twice])


# -- 3. files that cannot be read -------------------------------------------------------------


def _bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    files = {
        "latin1": (b"name,vendor\nGPU,Soci\xe9t\xe9\n", r":2: byte 0xe9 is not UTF-8 text"),
        "empty": (b"", r": empty file"),
        "blank": (b"\n\n  \n", r": empty file"),
        "header only": (HEADER.encode() + b"\n", r": a header but no rows"),
        "ragged": (f"{HEADER}\n{GOOD}\n{GOOD},extra\n".encode(), r":3: 13 fields, the header has 12"),
    }
    out = {}
    for i, (k, (data, match)) in enumerate(files.items()):
        p = tmp_path / f"bad{i}.csv"
        p.write_bytes(data)
        out[k] = (p, match)
    out["directory"] = (tmp_path, r"is a directory")
    out["missing"] = (tmp_path / "nope.csv", r"does not exist")
    return out


def test_unreadable_hardware_and_constants_files_name_the_path(tmp_path, monkeypatch):
    for what, (p, match) in _bad_files(tmp_path).items():
        monkeypatch.setenv("RIDGELINE_HARDWARE", str(p))
        msg = _refused(match)
        assert str(p) in msg, what
        monkeypatch.delenv("RIDGELINE_HARDWARE")
        monkeypatch.setenv("RIDGELINE_CONSTANTS", str(p))
        msg = _refused(match)
        assert str(p) in msg, what
        monkeypatch.delenv("RIDGELINE_CONSTANTS")
    # a file the process may not read (as root, chmod does not stop a read: the OS error is simulated)
    locked = _csv(tmp_path, "locked.csv", GOOD)
    real = pathlib.Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self == locked:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(pathlib.Path, "read_bytes", read_bytes)
    assert str(locked) in _refused(r"cannot be read: permission denied", extra=[locked])


def test_a_constants_override_must_name_a_shipped_constant(tmp_path):
    p = tmp_path / "constants.csv"
    p.write_text("name,value,unit,source,note\nnccl_beta_simpel,0.5,fraction,test,typo\n")
    _refused(r"constants\.csv:2 \(nccl_beta_simpel\): .*not a shipped constant.*closest: nccl_beta_simple", constants=p)
    p.write_text("name,value,unit,source,note\nnccl_beta_simple,nan,fraction,test,x\n")
    _refused(r"constants\.csv:2 \(nccl_beta_simple\): column value is 'nan', not a finite number", constants=p)


# -- 4. Catalog.sql: empty queries, results too large to hold ---------------------------------


@pytest.mark.parametrize("query", ["", "   ", "-- only a comment", "/* a comment */ ;\n"])
def test_an_empty_query_is_refused(query):
    with pytest.raises(CatalogError, match=r"^empty query"):
        default_catalog().sql(query)


def test_a_query_error_stays_a_query_error():
    cat = default_catalog()
    cat.connect().close()  # the database is built on first use
    mtime = cat.path.stat().st_mtime_ns
    for q in ("SELEC 1", "SELECT * FROM hardwar", "SET memory_limit = '1PB'", "CREATE TABLE t (a INT)"):
        with pytest.raises(CatalogError, match=r"^query failed: "):
            cat.sql(q)
    with pytest.raises(CatalogError, match="more than one column named a"):
        cat.sql("SELECT 1 AS a, 2 AS a")
    assert cat.path.stat().st_mtime_ns == mtime  # none of them rebuilt the catalog


@pytest.mark.parametrize("rows", [300_000_000, 30_000_000_000])
def test_a_result_over_the_memory_budget_is_refused_before_it_is_fetched(monkeypatch, rows):
    monkeypatch.setattr(catalog_module, "_memory_limit_bytes", lambda: 2 * 2**26)  # a 64 MiB frame budget
    cat = default_catalog()
    cap = 2**26 // 8  # rows of one BIGINT (8 bytes) that fill it
    with pytest.raises(
        CatalogError, match=rf"does not fit in memory \(more than {cap:,} rows, .*add a LIMIT or aggregate$"
    ):
        cat.sql("SELECT * FROM range(?)", [rows])
    with pytest.raises(CatalogError, match=r"does not fit in memory \(100,000 rows, about 0\.1 GiB"):
        cat.sql("SELECT repeat('x', 1000) AS s FROM range(100000)")  # wide rows: counted by their bytes
    n = cap // 8  # 33 bytes a row: a quarter of the budget, so it is fetched
    df = cat.sql("SELECT range AS i, range::INTEGER AS j, 'x' AS s FROM range(?)", [n])
    assert df.height == n and df["i"].sum() == n * (n - 1) // 2
    assert str(df.schema["j"]) == "Int64"  # widened to the type the frame has always had


def test_a_query_that_outgrows_duckdbs_memory_is_refused(monkeypatch):
    monkeypatch.setattr(catalog_module, "_memory_limit_bytes", lambda: 2 * 2**26)
    # one row, but an 800 MB list to build it: DuckDB runs out of its 64 MiB before a row exists
    with pytest.raises(CatalogError, match=r"^the result does not fit in memory \(the query ran out of the 0\.1 GiB"):
        default_catalog().sql("SELECT list(range) AS l FROM range(100000000)")


def test_duckdb_runs_a_query_under_half_of_its_own_default_limit():
    limit = catalog_module._memory_limit_bytes()
    # DuckDB's default is 80% of the memory it detects: at most the machine's
    assert 0 < limit <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    half = duckdb.connect(config={"memory_limit": f"{limit // 2}B"})
    expected = half.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
    assert default_catalog().sql("SELECT current_setting('memory_limit') AS m")["m"][0] == expected


def test_sql_keeps_parameters_and_the_columns_callers_read():
    cat = default_catalog()
    h100 = cat.get("H100_SXM")
    df = cat.sql("SELECT name, year, memory_bw_gbs, verified FROM hardware WHERE name = ?", ["H100_SXM"])
    assert df.to_dicts() == [{"name": "H100_SXM", "year": 2022, "memory_bw_gbs": h100.memory_bw_gbs, "verified": True}]
    assert [str(t) for t in df.dtypes] == ["String", "Int64", "Float64", "Boolean"]
    n = cat.sql("SELECT count(*) AS n, sum(n_rows) AS s FROM calibration").row(0)
    assert n == (
        len(cat.sql("SELECT * FROM calibration")),
        int(cat.sql("SELECT n_rows FROM calibration")["n_rows"].sum()),
    )


# -- 5. a damaged cache is rebuilt ------------------------------------------------------------


def test_a_damaged_json_export_is_rebuilt(tmp_path):
    # a catalog with a user's file caches its export (the shipped data's is compiled in)
    mine = _csv(tmp_path, "mine.csv", GOOD)
    c = Catalog(path=tmp_path / "c.duckdb", extra=[mine])
    good = c.export_path.read_bytes()
    export = json.loads(good)
    damages = {
        "truncated": good[: len(good) // 2],
        "garbled": b"\xff\x00" * 64 + good[128:],
        "zero bytes": b"",
        "no devices": json.dumps({**export, "devices": []}).encode(),
        "older layout": json.dumps({k: v for k, v in export.items() if k != "overridden"}).encode(),
    }
    for what, data in damages.items():
        c.export_path.write_bytes(data)
        again = Catalog(path=tmp_path / "c.duckdb", extra=[mine])
        assert again.get("H100_SXM").tflops_bf16 == 989.4, what  # NVIDIA H100 datasheet, dense bf16
        assert again.get("MY_GPU").memory_bw_gbs == 2000, what
        assert json.loads(c.export_path.read_bytes()) == export, what


@pytest.mark.parametrize("shipped", [None, b"", b'{"devices": []}'], ids=["missing", "empty", "no devices"])
def test_a_build_without_a_readable_shipped_export_says_how_to_make_one(monkeypatch, shipped):
    from ridgeline import _data

    files, read = _data.list_files, _data.read_bytes
    export = export_module.EXPORT_FILE
    monkeypatch.setattr(_data, "list_files", lambda p: [f for f in files(p) if shipped is not None or f != export])
    monkeypatch.setattr(_data, "read_bytes", lambda p: shipped if p == export and shipped is not None else read(p))
    export_module._shipped_export.cache_clear()
    try:
        with pytest.raises(CatalogError) as e:
            Catalog().get("H100_SXM")
    finally:
        export_module._shipped_export.cache_clear()  # the next test reads the real one
    assert str(e.value) == (
        "data/hardware/engine_export.json is missing from this build or unreadable; "
        "run `ridgeline catalog export --force` from the repository root and reinstall"
    )


def test_a_damaged_database_is_rebuilt_where_it_is_opened(tmp_path):
    path = tmp_path / "c.duckdb"
    Catalog(path=path).connect().close()  # the database is built on first use
    good = path.read_bytes()
    garbled = bytearray(good)
    garbled[:8192] = b"\x55" * 8192
    damages = {
        "zero bytes": b"",
        "truncated header": good[:100],
        "garbled header": bytes(garbled),
        "truncated body": good[:300_000],  # opens; a block read fails inside the query
        "not a database": b"hello\n" * 1000,
    }
    q = "SELECT count(*) AS n, sum(length(source)) AS chars FROM benchmarks"
    expected = default_catalog().sql(q).row(0)
    for what, data in damages.items():
        path.write_bytes(data)
        assert Catalog(path=path).sql(q).row(0) == expected, what
        assert path.read_bytes() != data, what
    con = duckdb.connect(str(path))
    con.execute("DROP TABLE calibration")
    con.close()
    c = Catalog(path=path)
    # a typo is the user's, even on a file that lacks a table; the lack is mended on the way
    with pytest.raises(CatalogError, match=r"^query failed: .*nosuch"):
        c.sql("SELECT * FROM nosuch")
    assert (
        c.sql("SELECT count(*) AS n FROM calibration")["n"][0]
        == default_catalog().sql("SELECT count(*) AS n FROM calibration")["n"][0]
    )
    path.write_bytes(b"")
    con = c.connect()
    assert con.execute("SELECT count(*) FROM hardware").fetchall() == [(len(c.names()),)]
    con.close()


# -- 6. temp files of a killed build ----------------------------------------------------------


def test_a_build_removes_the_temp_files_of_dead_builders_only(tmp_path, monkeypatch):
    monkeypatch.setenv("RIDGELINE_CACHE_DIR", str(tmp_path))
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead, live, host = child.pid, os.getpid(), sources_module._host()
    stale = [
        tmp_path / f".catalog-{dead}-{host}-k1ll3d.duckdb",
        tmp_path / f".catalog-{dead}-{host}-k1ll3d.duckdb.wal",
        tmp_path / f".catalog-{dead}-{host}-x_y_z.json",
    ]
    kept = [
        tmp_path / f".catalog-{live}-{host}-busy.duckdb",  # a build in progress
        tmp_path / f".catalog-{dead}-{host}zz-other.duckdb",  # another host's (shared folder)
        tmp_path / ".catalog-abc123.duckdb",  # an old name without a pid
        tmp_path / f"catalog-{dead}-{host}-x.duckdb",  # not a temp name
    ]
    for p in stale + kept:
        p.write_bytes(b"x")
    bench = tmp_path / f".bench-{dead}-{host}-w0rk"
    bench.mkdir()
    (bench / "benchmarks.csv").write_text("id\n")
    live_bench = tmp_path / f".bench-{live}-{host}-w0rk"
    live_bench.mkdir()
    c = Catalog()
    assert c.path.parent == tmp_path and c.sql("SELECT tflops_bf16 FROM hardware WHERE name = 'B200'").item() == 2250
    assert [p.name for p in [*stale, bench] if p.exists()] == []
    assert [p.name for p in [*kept, live_bench] if not p.exists()] == []
    # nothing of this build is left behind (the shipped data's export is compiled in, not written)
    assert {p.name for p in tmp_path.iterdir()} == {p.name for p in [*kept, live_bench, c.path]}


def test_a_failed_build_leaves_no_temp_files(tmp_path, monkeypatch):
    monkeypatch.setenv("RIDGELINE_CACHE_DIR", str(tmp_path / "cache"))
    p = _csv(tmp_path, "bad.csv", GOOD.replace(",2000,", ",nan,"))
    _refused(r"bad\.csv:2 \(MY_GPU\)", extra=[p])
    assert list((tmp_path / "cache").iterdir()) == []


def test_builders_at_once_spare_each_others_temp_files(tmp_path):
    # Each build sweeps the folder for dead builders' files while the others write theirs.
    env = {**os.environ, "RIDGELINE_CACHE_DIR": str(tmp_path)}
    query = "SELECT tflops_bf16 FROM hardware WHERE name = 'H100_SXM'"
    code = f"from ridgeline import Catalog; print(Catalog().sql({query!r}).item())"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [(p.returncode, out.strip()) for p, (out, _) in zip(procs, outs)] == [(0, "989.4")] * 4, outs
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".duckdb"]
