"""Nothing the user has is lost: every writer refuses an existing output unless forced, checks
the directory before any work, writes beside the target and moves into place only when done,
so a run that fails leaves the target byte for byte as it was and no temporary file behind."""

import os
import re
import subprocess
import sys

import duckdb
import polars as pl
import pytest
from cli_in_process import run_main
from ridgeline._io import atomic_output, changed_files, write_files
from ridgeline.errors import PlanError, UnknownNameError
from ridgeline.sweeps.sweep import iter_sweep, write

GRID = {"model": "meta-llama/Llama-3.2-1B", "hardware": "L4", "batch": [1, 8]}  # 2 plans
OLD = b"the user's own file\n"


def _cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "ridgeline.cli", *args], capture_output=True, text=True, cwd=cwd, env=os.environ.copy()
    )


def _one_line_error(stderr):
    lines = stderr.strip().splitlines()
    return len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in stderr


def _read(path):
    return pl.read_csv(path) if str(path).endswith(".csv") else pl.read_parquet(path)


def _failing_after_one_frame():
    """A sweep that fails after it priced its first plans (as an interrupt would)."""
    yield from iter_sweep(GRID, chunk_size=1)
    raise PlanError("boom: the sweep failed part way")


def test_atomic_output_replaces_only_when_the_block_succeeds(tmp_path):
    target = tmp_path / "t.csv"
    target.write_bytes(OLD)
    target.chmod(0o640)
    with pytest.raises(PlanError, match=re.escape(f"'{target}' exists; --force (CLI) or force=True (Python)")):
        with atomic_output(target, force=False):
            pass
    with pytest.raises(RuntimeError):
        with atomic_output(target, force=True) as tmp:
            assert tmp.parent == tmp_path and tmp != target
            tmp.write_text("half written")
            raise RuntimeError("failed mid-way")
    assert target.read_bytes() == OLD and os.listdir(tmp_path) == ["t.csv"]
    with atomic_output(target, force=True) as tmp:
        tmp.write_text("new\n")
    # replaced whole, with the replaced file's permissions (a temporary file is created 0600)
    assert target.read_text() == "new\n" and (target.stat().st_mode & 0o777) == 0o640
    assert os.listdir(tmp_path) == ["t.csv"]


@pytest.mark.parametrize("ext", ["csv", "parquet"])
def test_sweep_write_keeps_an_existing_file_unless_forced(tmp_path, ext):
    target = tmp_path / f"r.{ext}"
    target.write_bytes(OLD)
    priced = []

    def frames():
        priced.append(True)
        yield from iter_sweep(GRID)

    with pytest.raises(PlanError, match=re.escape(f"out: '{target}' exists; --force (CLI) or force=True")):
        write(frames(), str(target))
    assert target.read_bytes() == OLD and priced == []  # refused before a single plan was priced
    assert write(frames(), str(target), force=True) == 2
    assert _read(target).height == 2 and os.listdir(tmp_path) == [target.name]


@pytest.mark.parametrize("ext", ["csv", "parquet", "duckdb"])
def test_a_sweep_failing_part_way_leaves_the_target_and_no_temporary_files(tmp_path, ext):
    target = tmp_path / f"r.{ext}"
    if ext == "duckdb":
        con = duckdb.connect(str(target))
        con.execute("CREATE TABLE plans AS SELECT 42 AS answer")
        con.close()
    else:
        target.write_bytes(OLD)
    before = target.read_bytes()
    out = f"{target}:plans" if ext == "duckdb" else str(target)
    with pytest.raises(PlanError, match="boom"):
        write(_failing_after_one_frame(), out, force=True)
    assert target.read_bytes() == before
    assert os.listdir(tmp_path) == [target.name]  # no temporary file, no parts folder


def test_a_failing_sweep_on_a_new_path_creates_nothing(tmp_path):
    for out in ("new.csv", "new.parquet", "new.duckdb:plans"):
        with pytest.raises(PlanError, match="boom"):
            write(_failing_after_one_frame(), str(tmp_path / out))
    with pytest.raises(UnknownNameError):
        write(iter_sweep({**GRID, "model": "bogus/model"}), str(tmp_path / "x.csv"))
    assert os.listdir(tmp_path) == []


def test_duckdb_output_keeps_an_existing_table_unless_forced(tmp_path):
    db = tmp_path / "r.duckdb"
    assert write(iter_sweep(GRID), f"{db}:plans") == 2
    with pytest.raises(PlanError, match=re.escape(f"out: table 'PLANS' exists in '{db}'; --force (CLI)")):
        write(iter_sweep({**GRID, "batch": [1, 2, 4, 8]}), f"{db}:PLANS")  # DuckDB names ignore case
    assert write(iter_sweep({**GRID, "batch": [1]}), f"{db}:other") == 1  # another table: both kept
    assert write(iter_sweep({**GRID, "batch": [1, 2, 4, 8]}), f"{db}:plans", force=True) == 4
    con = duckdb.connect(str(db), read_only=True)
    counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in ("plans", "other")}
    con.close()
    assert counts == {"plans": 4, "other": 1}
    text = tmp_path / "t.duckdb"
    text.write_bytes(OLD)
    with pytest.raises(PlanError, match="is not a DuckDB database"):
        write(iter_sweep(GRID), f"{text}:plans", force=True)
    assert text.read_bytes() == OLD


@pytest.mark.parametrize(
    "out,message",
    [
        ("", "out: an empty path"),
        ("plans.txt", "must end in .parquet or .csv, be file.duckdb:table, or name a folder"),
        ("plans.duckdb", "must end in .parquet or .csv, be file.duckdb:table, or name a folder"),
        ("plans.duckdb:bad-name", "table name 'bad-name' must be a plain identifier"),
        ("/nonexistent/dir/x.csv", "out: directory '/nonexistent/dir' does not exist"),
        ("/nonexistent/dir/x.parquet", "out: directory '/nonexistent/dir' does not exist"),
        ("/nonexistent/dir/x.duckdb:plans", "out: directory '/nonexistent/dir' does not exist"),
        ("{tmp}/a_dir.csv", "is a directory; give a file path"),
        ("{tmp}/a_file.csv/x.csv", "is a file, not a directory"),
    ],
)
def test_bad_out_paths_are_plan_errors_before_any_plan_is_priced(tmp_path, out, message):
    (tmp_path / "a_file.csv").write_bytes(OLD)
    (tmp_path / "a_dir.csv").mkdir()
    priced = []

    def frames():
        priced.append(True)
        yield from iter_sweep(GRID)

    with pytest.raises(PlanError, match=re.escape(message)):
        write(frames(), out.format(tmp=tmp_path))
    assert priced == [] and sorted(os.listdir(tmp_path)) == ["a_dir.csv", "a_file.csv"]


def test_cli_sweep_unknown_model_leaves_the_out_file_byte_identical(tmp_path):
    (tmp_path / "r.csv").write_bytes(OLD)
    for force in ((), ("--force",)):
        r = _cli("sweep", "-m", "bogus/model", "-H", "H100_SXM", "--out", "r.csv", *force, cwd=tmp_path)
        # without --force the existing file is refused (2) before the model is read; with it, the unknown model (3)
        assert r.returncode == (3 if force else 2) and _one_line_error(r.stderr), r.stderr
        assert (tmp_path / "r.csv").read_bytes() == OLD and os.listdir(tmp_path) == ["r.csv"]
    r = _cli("sweep", "-m", "meta-llama/Llama-3.2-1B", "-H", "L4", "--batch", "1,8", "--out", "r.csv", cwd=tmp_path)
    assert r.returncode == 2 and "--force" in r.stderr and (tmp_path / "r.csv").read_bytes() == OLD
    r = _cli("sweep", "-m", "meta-llama/Llama-3.2-1B", "-H", "L4", "--batch", "1,8", "--out", "r.csv", "--force",
             cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert pl.read_csv(tmp_path / "r.csv")["batch"].to_list() == [1, 8]
    r = _cli("sweep", "-m", "meta-llama/Llama-3.2-1B", "-H", "L4", "--out", "/nonexistent/dir/x.csv", cwd=tmp_path)
    assert r.returncode == 2 and _one_line_error(r.stderr) and "/nonexistent/dir" in r.stderr
    r = _cli("sweep", "-m", "meta-llama/Llama-3.2-1B", "-H", "L4", "--out", "", cwd=tmp_path)
    assert r.returncode == 2 and "an empty path" in r.stderr  # not the table on stdout


def test_catalog_audit_out_keeps_an_existing_file_unless_forced(tmp_path):
    out = tmp_path / "audit.csv"
    out.write_bytes(OLD)
    code, _, err = run_main("catalog", "audit", "--format", "csv", "--out", str(out))
    assert code == 2 and _one_line_error(err) and "--force" in err and out.read_bytes() == OLD
    code, _, err = run_main("catalog", "audit", "--format", "csv", "--out", str(out), "--force")
    assert code == 0, err
    assert out.read_text().startswith("audit,row") and os.listdir(tmp_path) == ["audit.csv"]
    code, _, err = run_main("catalog", "audit", "--out", str(tmp_path / "summary.txt"))
    assert code == 2 and "--format csv, json or parquet" in err and not (tmp_path / "summary.txt").exists()
    code, _, err = run_main("catalog", "audit", "--format", "parquet", "--out", "/nonexistent/dir/a.parquet")
    assert code == 2 and _one_line_error(err) and "/nonexistent/dir" in err


@pytest.fixture
def quick_fit(monkeypatch):
    """calibrate's fit (minutes) replaced by fixed texts: these tests are about the files."""
    import ridgeline.calibration.acceptance as acc
    import ridgeline.calibration.calibrate as cal
    import ridgeline.calibration.validate as val

    monkeypatch.setattr(cal, "calibrate", lambda: [])
    monkeypatch.setattr(val, "validation", lambda fits: {"rows": []})
    monkeypatch.setattr(acc, "holdout", lambda rows: [])
    monkeypatch.setattr(cal, "to_csv", lambda fits: "fits\n")
    monkeypatch.setattr(acc, "holdout_csv", lambda held: "held\n")


def test_calibrate_refreshes_its_files_only_when_asked(tmp_path, quick_fit):
    fits, held = tmp_path / "fits.csv", tmp_path / "holdout.csv"
    fits.write_bytes(OLD)
    code, _, err = run_main("calibrate", "--out", str(fits))
    assert code == 2 and _one_line_error(err) and "differs" in err and "--force" in err
    assert fits.read_bytes() == OLD and not held.exists()  # nothing written when any file is refused
    code, out, err = run_main("calibrate", "--out", str(fits), "--force")
    assert code == 0, err
    assert fits.read_text() == "fits\n" and held.read_text() == "held\n"
    os.utime(fits, (1, 1))
    code, out, _ = run_main("calibrate", "--out", str(fits))  # the same fit again: a no-op
    assert code == 0 and out.count("unchanged") == 2 and fits.stat().st_mtime == 1
    assert sorted(os.listdir(tmp_path)) == ["fits.csv", "holdout.csv"]


def test_calibrate_checks_its_directory_before_the_fit(tmp_path, monkeypatch):
    import ridgeline.calibration.calibrate as cal

    def no_fit():
        raise AssertionError("the fit ran before the output was checked")

    monkeypatch.setattr(cal, "calibrate", no_fit)
    code, _, err = run_main("calibrate", "--out", str(tmp_path / "missing" / "fits.csv"))
    assert code == 2 and _one_line_error(err) and "does not exist (run from the repository root" in err
    code, _, err = run_main("calibrate", "--out", str(tmp_path / "holdout.csv"))
    assert code == 2 and "held-out ranges" in err


def test_refresh_refuses_every_differing_file_before_writing_any(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("same\n")
    b.write_bytes(OLD)
    with pytest.raises(PlanError, match=re.escape(f"'{b}' differs from what would be written; pass --force")):
        changed_files({a: "same\n", b: "new\n"}, force=False, what="calibrate")
    todo = changed_files({a: "same\n", b: "new\n"}, force=True, what="calibrate")
    assert todo == {b: "new\n"}  # the file already holding its text is not rewritten
    write_files(todo, what="calibrate")
    assert b.read_text() == "new\n" and sorted(os.listdir(tmp_path)) == ["a.csv", "b.csv"]


@pytest.fixture
def quick_panel(monkeypatch):
    """The panel (seconds) replaced by one row: these tests are about the files."""
    import ridgeline.snapshot as snap

    keys = {"model": "m", "hardware": "h", "batch": 1, "prompt": 2, "output": 3, "tp": 1}
    row = {**keys, **dict.fromkeys(snap.VALUES, 1.5), "fits": True, "error": None}
    monkeypatch.setattr(snap, "evaluate", lambda catalog=None: pl.DataFrame([row]))
    monkeypatch.setattr(snap, "structure_version", lambda catalog=None: "test")


def test_snapshot_save_keeps_a_saved_label_and_golden_text_unless_forced(tmp_path, quick_panel):
    db = tmp_path / "s.duckdb"
    (tmp_path / "data" / "snapshots").mkdir(parents=True)
    golden = tmp_path / "data" / "snapshots" / "golden.csv"
    golden.write_bytes(OLD)
    cwd = os.getcwd()
    os.chdir(tmp_path)  # --to-text writes data/snapshots/golden.csv under the working directory
    try:
        code, _, err = run_main("snapshot", "save", "--db", str(db), "--label", "a")
        assert code == 0, err
        code, _, err = run_main("snapshot", "save", "--db", str(db), "--label", "a")
        assert code == 2 and _one_line_error(err) and "already holds snapshot 'a'; --force" in err
        # a golden.csv that differs is refused before the database changes
        code, _, err = run_main("snapshot", "save", "--db", str(db), "--label", "b", "--to-text")
        assert code == 2 and "differs" in err and golden.read_bytes() == OLD
        labels = duckdb.connect(str(db), read_only=True).execute("SELECT DISTINCT label FROM snapshots").fetchall()
        assert labels == [("a",)]
        code, out, err = run_main("snapshot", "save", "--db", str(db), "--label", "a", "--to-text", "--force")
        assert code == 0 and "wrote" in out and golden.read_bytes() != OLD, err
        code, out, _ = run_main("snapshot", "save", "--db", str(db), "--label", "b", "--to-text")
        assert code == 0 and "unchanged" in out  # the same panel again: golden.csv already holds it
        code, _, err = run_main("snapshot", "save", "--db", str(golden))
        assert code == 2 and "is not a DuckDB database" in err
    finally:
        os.chdir(cwd)
