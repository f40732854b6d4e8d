"""The Ray backend (ridgeline.sweeps.cluster) and the dataset folders it writes (ridgeline.sweeps.parts).

The tests on a cluster start a real one on 127.0.0.1: a head with no CPUs of its own and two
workers of one CPU each (``ray start --head``, then ``ray start --address``), run a sweep, a grid
of simulations and a small recommend search on it, kill a worker process in the middle of a run,
and compare every result with the same work done locally. They stop the cluster they started.
Where Ray is not installed they are skipped, except under .ci/run (RIDGELINE_REQUIRE_INSTALLED),
which installs the extra: there a missing Ray fails them.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import polars as pl
import pytest
from cli_in_process import run_main
from ray_local import local_cluster
from ridgeline import ClusterError, PlanError
from ridgeline.recommend import recommend
from ridgeline.serving.simulator import simulate_grid
from ridgeline.sweeps.cluster import RunReport, check_backend, run_tasks
from ridgeline.sweeps.parts import HEADER, LOG, part_name
from ridgeline.sweeps.sweep import sweep, sweep_parts, write_folder

GRID = {"model": "meta-llama/Llama-3.1-8B", "hardware": ["H100_SXM", "B200"], "batch": "1..256:x2", "tp": [1, 2],
        "prompt": "128..8192:x4"}  # fmt: skip


def _sha(files):
    return [hashlib.sha256(Path(f).read_bytes()).hexdigest() for f in files]


# -- the backend's contract, without Ray -------------------------------------------------


def test_run_tasks_returns_values_in_task_order_and_reports_where_they_ran():
    values, report = run_tasks(divmod, [(7, 2), (9, 4), (1, 5)])
    assert values == [(3, 1), (2, 1), (0, 1)]
    assert report.tasks == 3 and report.skipped == 0 and sum(n["tasks"] for n in report.nodes.values()) == 3
    assert report.text().startswith("3 tasks on 1 node (")


def test_a_ridgeline_error_in_a_task_reaches_the_caller_as_itself():
    with pytest.raises(PlanError, match="grid: needs at least one model"):
        run_tasks(sweep, [({"hardware": "H100_SXM"},)])


@pytest.mark.parametrize(("backend", "address", "message"), [
    ("dask", None, "backend: 'dask' is not one of local, ray"),
    ("local", "auto", "ray_address: goes with backend='ray'"),
    ("ray", "  ", "ray_address: expected 'local', 'auto' or host:port"),
])  # fmt: skip
def test_bad_backends_are_plan_errors(backend, address, message):
    with pytest.raises(PlanError, match=message):
        check_backend(backend, address)


def test_on_ray_a_model_travels_by_name_and_a_catalog_not_at_all():
    from ridgeline import Catalog, Model

    m = Model.from_config("meta-llama/Llama-3.1-8B")
    with pytest.raises(PlanError, match="model: with backend='ray' give it by name .*not as a loaded Model"):
        simulate_grid(m, "H100_SXM", [{"rate": 2}], backend="ray")
    with pytest.raises(PlanError, match="model: with backend='ray' give it by name"):
        recommend(m, rate=2, slo_ttft_ms=500, backend="ray")
    with pytest.raises(PlanError, match="catalog: Ray workers use their own default catalog"):
        sweep(GRID, backend="ray", catalog=Catalog())
    with pytest.raises(PlanError, match="scenarios: each is a mapping"):
        simulate_grid("meta-llama/Llama-3.1-8B", "H100_SXM", [3], backend="ray")


def test_without_ray_the_flag_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    m = ["-m", "meta-llama/Llama-3.1-8B"]
    for argv in (["sweep", *m, "-H", "H100_SXM", "--ray", "--out", str(tmp_path / "s")],
                 ["simulate", *m, "-H", "H100_SXM", "--rate", "2,4", "--ray"],
                 ["recommend", *m, "--rate", "2", "--slo-ttft-ms", "500", "--ray", "auto"]):  # fmt: skip
        code, out, err = run_main(*argv)
        assert code == 2 and out == "", err
        assert 'pip install "ridgeline[ray]"' in err and err.count("\n") == 1, err
    assert not (tmp_path / "s").exists()  # refused before any work


GRID_FILE = """model: meta-llama/Llama-3.1-8B
hardware: H100_SXM
requests: 120
prompt: 512
output: 64
grid:
  - {tp: 1}
  - {tp: 2, seed: 3}
  - {hardware: B200, prompt: "lognormal:700:0.5:16:4000"}
"""


def test_a_scenario_grid_runs_each_entry_as_its_own_simulation(tmp_path):
    f = tmp_path / "grid.yaml"
    f.write_text(GRID_FILE)
    code, text, err = run_main("simulate", "--scenario", str(f), "--rate", "4,16", "--json")
    assert code == 0, err
    runs = json.loads(text)
    assert len(runs) == 6  # three entries x two rates, entry by entry
    base = {"requests": 120, "prompt": 512, "output": 64}
    for (entry, rate), got in zip([(e, r) for e in ({"tp": 1}, {"tp": 2, "seed": 3},
                                                     {"hardware": "B200", "prompt": "lognormal:700:0.5:16:4000"})
                                   for r in (4.0, 16.0)], runs):  # fmt: skip
        kw = {**base, **entry}
        one = simulate_grid("meta-llama/Llama-3.1-8B", kw.pop("hardware", "H100_SXM"), [{"rate": rate}], **kw)[0]
        assert got == one.to_dict()
    code, text, _ = run_main("simulate", "--scenario", str(f), "--rate", "4")
    rows = text.splitlines()
    assert rows[0] == "meta-llama/Llama-3.1-8B" and rows[1].split()[:2] == ["hardware", "tp"]
    assert [r.split()[:2] for r in rows[2:]] == [["H100_SXM", "1"], ["H100_SXM", "2"], ["B200", "-"]]
    f.write_text(GRID_FILE + "  - {tpp: 2}\n")
    code, _, err = run_main("simulate", "--scenario", str(f))
    assert code == 2 and "grid entry 4: unknown key(s) tpp" in err


# -- the dataset folder --------------------------------------------------------------------


def test_a_folder_holds_the_sweep_row_for_row_and_a_rerun_resumes(tmp_path):
    out = tmp_path / "plans"
    d = write_folder(GRID, out, chunk_size=16)
    pieces = sweep_parts(GRID, 16)
    assert d.report.tasks == len(pieces) == len(d.files) == 10 and d.report.skipped == 0
    assert sorted(os.listdir(out)) == sorted([HEADER, LOG, *(part_name(i) for i in range(len(pieces)))])
    whole = sweep(GRID)
    assert pl.scan_parquet(f"{out}/*.parquet").collect().equals(whole)  # one table, in grid order
    import duckdb

    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{out}/*.parquet')").fetchall() == [(whole.height,)]
    header = json.loads((out / HEADER).read_text())
    assert header["complete"] and header["rows"] == whole.height == d.rows and header["parts"] == len(pieces)
    before = _sha(d.files)
    # nothing to do: every part is there and verified
    again = write_folder(GRID, out, chunk_size=16)
    assert (again.report.tasks, again.report.skipped) == (0, len(pieces))
    # a part lost, a part damaged, a log line torn, a temporary file of a killed run: those two are redone
    Path(d.files[3]).unlink()
    with open(d.files[7], "r+b") as fh:
        fh.seek(100)
        fh.write(b"\0\0\0\0")
    with open(out / LOG, "a") as fh:
        fh.write('{"part": 2, "ro')
    (out / ".part-000004.parquet.x1.tmp").write_bytes(b"half")
    third = write_folder(GRID, out, chunk_size=16)
    assert (third.report.tasks, third.report.skipped) == (2, len(pieces) - 2)
    assert _sha(third.files) == before and not (out / ".part-000004.parquet.x1.tmp").exists()
    assert third.frame().equals(whole)


def test_a_folder_of_another_run_or_of_other_files_is_refused(tmp_path):
    out = tmp_path / "plans"
    write_folder(GRID, out, chunk_size=16)  # 10 parts
    other = {**GRID, "batch": [1, 2]}
    with pytest.raises(PlanError, match="holds another run .*--force"):
        write_folder(other, out)
    with pytest.raises(PlanError, match="holds another run"):  # the chunk size cuts other parts
        write_folder(GRID, out, chunk_size=8)
    d = write_folder(other, out, force=True)
    # the other run's ten parts are gone: two parts, the header and the log
    assert d.frame().equals(sweep(other)) and sorted(os.listdir(out)) == sorted(
        [HEADER, LOG, part_name(0), part_name(1)]
    )
    (out / "notes.txt").write_text("mine")
    with pytest.raises(PlanError, match=r"files ridgeline did not write \(notes.txt\)"):
        write_folder(GRID, out, force=True)
    assert (out / "notes.txt").read_text() == "mine"
    (tmp_path / "f").write_text("x")
    with pytest.raises(PlanError, match="is a file; a dataset is written to a folder"):
        write_folder(GRID, tmp_path / "f")


def test_the_cli_writes_a_folder_and_resumes_it(tmp_path):
    out = tmp_path / "plans"
    args = ["sweep", "-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM,B200", "--batch", "1..64:x2", "--out",
            f"{out}/", "--chunk-size", "4"]  # fmt: skip
    code, _, err = run_main(*args)
    assert code == 0, err
    assert "28 tasks" not in err and "4 tasks on 1 node" in err and f"read as {out}/*.parquet" in err
    code, _, err = run_main(*args)
    assert code == 0 and "0 tasks (none to run); 4 already complete and verified, skipped" in err, err
    assert pl.read_parquet(f"{out}/*.parquet").equals(
        sweep({"model": "meta-llama/Llama-3.1-8B", "hardware": "H100_SXM,B200", "batch": "1..64:x2"})
    )


# -- on a real cluster -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    """A Ray head (no CPUs) and two one-CPU workers on 127.0.0.1; yields the address."""
    try:
        import ray  # noqa: F401
    except ImportError:
        if os.environ.get("RIDGELINE_REQUIRE_INSTALLED") == "1":
            pytest.fail(".ci/run installs ridgeline[ray]: Ray must be importable here")
        pytest.skip('Ray is not installed (pip install "ridgeline[ray]")')
    with local_cluster(workers=2) as address:
        yield address


#: Big enough that its parts outlast the moment a worker is killed (about 2.4 million plans).
BIG = {"model": "meta-llama/Llama-3.1-70B", "hardware": ["H100_SXM", "A100_SXM_80GB", "B200", "L40S", "H200",
       "MI300X", "RTX_4090", "GB10"], "batch": "1..2048:+1", "tp": [1, 2, 4, 8], "prompt": "128..32768:x2",
       "output": [128, 256, 512, 1024]}  # fmt: skip


def test_a_sweep_on_the_cluster_is_the_local_one_even_when_a_worker_is_killed(cluster, tmp_path):
    chunk = 1 << 16
    log = tmp_path / "ray" / LOG
    killed = []

    def kill_one_worker_mid_run():
        # once a part has landed, SIGKILL a worker process while it computes another
        for _ in range(3000):
            time.sleep(0.01)
            busy = subprocess.run(["pgrep", "-f", "ray::ridgeline part"], capture_output=True, text=True).stdout.split()
            if busy and log.exists() and log.stat().st_size > 0:
                os.kill(int(busy[0]), signal.SIGKILL)
                killed.append(int(busy[0]))
                return

    killer = threading.Thread(target=kill_one_worker_mid_run)
    killer.start()
    on_ray = write_folder(BIG, tmp_path / "ray", backend="ray", ray_address=cluster, chunk_size=chunk)
    killer.join()
    assert killed, "no worker was killed: the run ended first"
    local = write_folder(BIG, tmp_path / "local", chunk_size=chunk)
    n = len(sweep_parts(BIG, chunk))
    assert on_ray.rows == local.rows == 2_359_296 and on_ray.report.tasks == n
    assert len(on_ray.report.nodes) == 2  # both workers took parts
    # the same bytes, part by part: the killed worker's part was computed again, whole
    assert _sha(on_ray.files) == _sha(local.files)
    # resume on the cluster: two parts lost are the only tasks run
    for i in (1, n - 1):
        Path(on_ray.files[i]).unlink()
    again = write_folder(BIG, tmp_path / "ray", backend="ray", ray_address=cluster, chunk_size=chunk)
    assert (again.report.tasks, again.report.skipped) == (2, n - 2) and _sha(again.files) == _sha(local.files)


def test_sweep_simulate_and_recommend_on_the_cluster_are_the_local_ones(cluster):
    assert sweep(GRID, backend="ray", ray_address=cluster).equals(sweep(GRID))
    scenarios = [{"rate": r} for r in (2, 8, 32)]
    kw = {"requests": 200, "prompt": "lognormal:1024:0.6:16:4096", "output": 128}
    reports: list[RunReport] = []
    here = simulate_grid("meta-llama/Llama-3.1-8B", "H100_SXM", scenarios, **kw)
    there = simulate_grid("meta-llama/Llama-3.1-8B", "H100_SXM", scenarios, backend="ray", ray_address=cluster,
                          on_report=reports.append, **kw)  # fmt: skip
    assert [s.to_dict() for s in there] == [s.to_dict() for s in here]
    assert reports[0].tasks == 3 and reports[0].backend == "ray"
    search = {"rate": 6, "slo_ttft_ms": 800, "slo_tpot_ms": 60, "hardware": ["H100_SXM", "A100_SXM_80GB", "L40S"],
              "tp": [1, 2], "requests": 100}  # fmt: skip
    a = recommend("meta-llama/Llama-3.1-8B", **search)
    b = recommend("meta-llama/Llama-3.1-8B", backend="ray", ray_address=cluster, **search)
    assert a.plans and a.to_dict() == b.to_dict()
    assert b.run is not None and b.run.tasks == 6 and len(b.run.nodes) <= 2


def test_a_worker_running_another_ridgeline_is_refused(cluster):
    import ray
    from ridgeline.sweeps import cluster as backend

    ray.init(address=cluster, logging_level="WARNING")
    try:
        got = backend._call(divmod, (7, 2), {**backend.fingerprint(), "version": "0.0.0"})
    finally:
        ray.shutdown()
    name, message = got["error"]
    assert (
        name == "ClusterError" and "runs another ridgeline: version" in message and "(the driver's: 0.0.0)" in message
    )
    with pytest.raises(ClusterError, match="runs another ridgeline"):
        backend._raise(name, message)


def test_the_cli_runs_on_the_cluster(cluster, tmp_path):
    out = tmp_path / "s"
    code, _, err = run_main("sweep", "-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM,B200", "--batch", "1..64:x2",
                            "--ray", cluster, "--out", str(out))  # fmt: skip
    assert code == 0 and "2 tasks on " in err and "[ray]" in err, err
    code, _, err = run_main("sweep", "-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM", "--ray", cluster, "--out",
                            str(tmp_path / "x.parquet"))  # fmt: skip
    assert code == 2 and "with --ray, --out names a folder" in err
    sim = ["simulate", "-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM", "--rate", "2,4", "--requests", "100",
           "--json"]  # fmt: skip
    code, text, err = run_main(*sim, "--ray", cluster)
    assert code == 0 and "2 tasks on " in err, err
    assert json.loads(text) == json.loads(run_main(*sim)[1]) and len(json.loads(text)) == 2
    (tmp_path / "grid.yaml").write_text(GRID_FILE)
    grid = ["simulate", "--scenario", str(tmp_path / "grid.yaml"), "--rate", "4", "--json"]
    code, text, err = run_main(*grid, "--ray", cluster)
    assert code == 0 and "3 tasks on " in err, err
    assert json.loads(text) == json.loads(run_main(*grid)[1])
