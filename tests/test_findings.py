"""Regressions for issue 42's findings, one test a class: each input that was answered with a
hang, an abort, a panic, an internal error or a silent default now gets a typed error naming it
(or, where it is valid, its answer). The reproducer of each is the command in its test."""

from __future__ import annotations

import json
import time

import pytest
import ridgeline
from cli_in_process import run_main
from ridgeline import _core
from ridgeline.catalog.store import default_catalog
from ridgeline.errors import RidgelineError

MODEL8B = "meta-llama/Llama-3.1-8B"
SIM = ["simulate", "-m", MODEL8B, "-H", "H100_SXM", "--requests", "20"]

# under 500 bytes of YAML that expand to 10^9 values (anchors nested nine deep)
LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "\n".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]" for i in range(8)
)


def _one_error(code, err, want_code, *fragments):
    assert code == want_code, (code, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    for f in fragments:
        assert f in err, err


def test_a_billion_laughs_file_is_refused_not_expanded(tmp_path):
    for name, argv in (("s.yaml", [*SIM, "--rate", "1", "--scenario"]), ("g.yaml", ["sweep", "--grid"])):
        p = tmp_path / name
        p.write_text(LAUGHS)
        assert len(LAUGHS) < 500
        t0 = time.monotonic()
        code, _, err = run_main(*argv, str(p))
        assert time.monotonic() - t0 < 10
        _one_error(code, err, 2, "expands to more than 1000000 values")


@pytest.mark.parametrize(
    "body,fragment",
    [
        ("[" * 5000 + "]" * 5000, "nests deeper than"),  # deeply nested
        (b"\x00\xff\xfe binary", "not UTF-8"),  # binary
        ("rate: [1, 2\n", "not valid YAML (line"),  # truncated
        ("{a: 1, b: [" + ", ".join(["{c: 1}"] * 10) + "]}", "unknown key(s) a, b"),
    ],
    ids=["nested", "binary", "truncated", "unknown-keys"],
)
def test_damaged_scenario_files_name_the_file_and_what_is_wrong(tmp_path, body, fragment):
    p = tmp_path / "s.yaml"
    (p.write_bytes if isinstance(body, bytes) else p.write_text)(body)
    code, _, err = run_main(*SIM, "--rate", "1", "--scenario", str(p))
    _one_error(code, err, 2, fragment)


def test_a_scenario_may_reuse_parts_through_anchors_and_merge_keys(tmp_path):
    # valid YAML that was refused: an x- key holds the shared part, ``<<: *base`` merges it
    p = tmp_path / "s.yaml"
    p.write_text("x-base: &base {rate: 2, prompt: 512}\n<<: *base\noutput: 64\n")
    code, out, err = run_main(*SIM, "--scenario", str(p), "--json")
    assert code == 0, err
    plain = run_main(*SIM, "--rate", "2", "--prompt", "512", "--output", "64", "--json")
    assert plain[0] == 0
    merged, direct = json.loads(out), json.loads(plain[1])
    assert merged["ttft_s"] == direct["ttft_s"] and merged["tpot_s"] == direct["tpot_s"]


@pytest.mark.parametrize("value", ["1e-320", "1e308", "0", "nan"])
def test_burstiness_outside_what_the_sampler_draws_from_is_refused(value):
    # 1e-320 hung (an infinite gamma shape), 1e308 panicked (a zero shape)
    code, _, err = run_main(*SIM, "--rate", "1", "--burstiness", value)
    _one_error(code, err, 2, "burstiness")


@pytest.mark.parametrize("command", ["simulate", "recommend"])
def test_a_rate_whose_run_never_ends_is_refused(command):
    # recommend --rate 1e-320 panicked in a worker thread and still exited 0
    argv = (
        [*SIM, "--rate", "1e-320"]
        if command == "simulate"
        else ["recommend", "-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM", "--slo-tpot-ms", "50", "--rate", "1e-320"]
    )
    code, _, err = run_main(*argv)
    _one_error(code, err, 2, "rate:", "2^53 seconds")


@pytest.mark.parametrize(
    "flag,value,fragment",
    [
        ("--weight-dtype", "foo", "--weight-dtype: unknown weight format 'foo'"),
        ("--runtime", "nosuch", "runtime: unknown runtime 'nosuch'"),
        ("--kv-link-gbs", "-1", "--kv-link-gbs"),
    ],
)
def test_recommend_refuses_a_name_no_plan_could_take_instead_of_finding_no_plan(flag, value, fragment):
    code, _, err = run_main("recommend", "-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM", "--slo-tpot-ms", "50",
                            "--rate", "5", "--disaggregate", flag, value)  # fmt: skip
    _one_error(code, err, 2, fragment)


def test_the_core_refuses_an_unknown_key_naming_it():
    # an efficiency with a misspelt eta_mme was accepted and ignored; every input type of the
    # core now refuses it (rust/src/lib.rs tests each); here through the binding, as a typed error
    row = json.loads(json.dumps({"name": "X", "memory_gb": 80.0, "memory_bw_gbs": 3350.0, "tflops_bf16": 989.4}))
    _core.CoreDevice(json.dumps(row))  # the known keys alone are a device
    with pytest.raises(RidgelineError, match="unknown field `memory_gbs`"):
        _core.CoreDevice(json.dumps({**row, "memory_gbs": 80.0}))


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1"])
def test_ray_to_an_address_where_nothing_listens_is_exit_5_within_30_s(address, monkeypatch):
    pytest.importorskip("ray")
    t0 = time.monotonic()
    code, _, err = run_main(
        "sweep", "-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM", "--batch", "1", "--ray", address
    )
    assert time.monotonic() - t0 < 30
    _one_error(code, err, 5, "cannot connect to the Ray cluster at")
    monkeypatch.setenv("RAY_ADDRESS", address)
    with pytest.raises(ridgeline.errors.ClusterError, match="cannot connect"):
        ridgeline.sweep({"model": ["meta-llama/Llama-3.1-8B"], "hardware": ["H100_SXM"], "batch": [1]},
                        backend="ray", ray_address="auto")  # fmt: skip


def test_catalog_devices_resolve_with_their_memory_as_named():
    # every memory configuration listed is reachable by its own name and holds its size
    cat = default_catalog()
    for name in cat.names():
        for gb in cat.memory_sizes(name):
            dev = cat.get(f"{name}_{gb:g}GB") if gb != cat.get(name).memory_gb else cat.get(name)
            assert dev.memory_gb == gb and dev.chip == name


@pytest.mark.parametrize("argv", [["validate", "--rows"], [*SIM, "--rate", "1", "--scenario"], ["sweep", "--grid"]])
def test_a_device_file_is_refused_not_read_for_ever(argv):
    code, _, err = run_main(*argv, "/dev/zero")
    _one_error(code, err, 2, "/dev/zero", "not a regular file")


@pytest.mark.parametrize("option", ["--n-cpu-moe", "--cpu-offload-gb", "--n-gpu-layers"])
def test_the_runtimes_spellings_of_offload_name_the_option_that_prices_it(option):
    code, _, err = run_main("estimate", "-m", "openai/gpt-oss-20b", "-H", "RTX_4090", option, "1")
    _one_error(code, err, 2, f"no such option {option}", "estimate --offload experts:N|gpu-layers:N|stream-gb:G|auto")


EST = ["estimate", "-m", "openai/gpt-oss-20b", "-H", "RTX_4090"]


@pytest.mark.parametrize("argv", [[*EST, "--mtp"], [*EST, "--draft-model"], ["sweep", "--num-speculative-tokens"]])
def test_the_runtimes_spellings_of_speculation_name_the_option_that_prices_it(argv):
    code, _, err = run_main(*argv, "1")
    option = argv[-1]
    _one_error(code, err, 2, f"no such option {option}", "estimate --speculative eagle3|mtp|ngram|draft:MODEL")


def test_a_plan_that_does_not_fit_says_its_times_assume_every_weight_resident():
    e = ridgeline.estimate("openai/gpt-oss-120b", "RTX_4090", allow_no_fit=True)
    assert not e.fits and any("--offload auto prices it with weights kept in host memory" in w for w in e.warnings)
    assert not any("offload" in w for w in ridgeline.estimate("openai/gpt-oss-20b", "H100_SXM").warnings)


def test_impossible_configs_are_refused_not_priced():
    base = json.loads(ridgeline._data.read_text("data/models/meta-llama--Llama-3.1-8B.json"))
    # num_experts 0 with top-8 routing was priced as a dense model
    with pytest.raises(ridgeline.ModelConfigError, match="'num_experts_per_tok': routes each token to 8 experts of 0"):
        ridgeline.Model.from_dict({**base, "num_experts": 0, "num_experts_per_tok": 8})
    nemotron = json.loads(ridgeline._data.read_text("data/models/nvidia--Nemotron-H-56B-Base-8K.json"))
    heads = nemotron["mamba_num_heads"]
    with pytest.raises(ridgeline.ModelConfigError, match=f"'n_groups': {heads + 1} groups do not divide"):
        ridgeline.Model.from_dict({**nemotron, "n_groups": heads + 1})


@pytest.mark.parametrize(
    "kw", [{"rate": 10**400}, {"rate": 1, "horizon_s": 10**400}, {"rate": 1, "slo_ttft_ms": -(10**400)}]
)
def test_integers_beyond_a_float_are_typed_errors(kw):
    with pytest.raises(ridgeline.errors.PlanError, match="beyond any float"):
        ridgeline.simulate(MODEL8B, "H100_SXM", requests=10, **kw)


def test_wrong_types_at_the_python_doors_are_typed_errors():
    from ridgeline.serving.simulator import simulate_grid

    with pytest.raises(ridgeline.errors.PlanError, match="scenarios: a list of mappings"):
        simulate_grid(MODEL8B, "H100_SXM", {"rate": 1}, requests=10)
    for tp in (2.5, None):
        with pytest.raises(ridgeline.errors.PlanError, match="tp: must be a whole number"):
            ridgeline.recommend(MODEL8B, rate=1, slo_tpot_ms=50, hardware=["H100_SXM"], tp=tp, requests=10)
    code, _, err = run_main("sweep", "-m", MODEL8B, "-H", "H100_SXM", "--threads", "100000")
    _one_error(code, err, 2, "threads: this machine has")


def test_json_says_null_where_there_is_no_value():
    # an empty distribution was written as 0.0; catalog sql --format json printed NaN (not JSON)
    code, out, _ = run_main(*SIM, "--rate", "1", "--requests", "5", "--output", "1", "--json")
    assert code == 0
    tpot = json.loads(out)["tpot_s"]
    assert tpot["count"] == 0 and all(tpot[k] is None for k in ("mean", "p50", "p99", "max"))
    code, out, _ = run_main(
        "catalog", "sql", "SELECT 'nan'::DOUBLE AS x, 'inf'::DOUBLE AS y, 2.5 AS z", "--format", "json"
    )
    assert code == 0 and json.loads(out) == [{"x": None, "y": None, "z": "2.5"}]


def test_simulate_plot_keeps_figures_already_there(tmp_path):
    argv = [*SIM, "--rate", "2", "--plot", str(tmp_path)]
    (tmp_path / "latency_cdf.png").write_bytes(b"mine")
    code, _, err = run_main(*argv)
    _one_error(code, err, 2, "latency_cdf.png already exist", "--force")
    assert (tmp_path / "latency_cdf.png").read_bytes() == b"mine"
    code, _, err = run_main(*argv, "--force")
    assert code == 0 and (tmp_path / "latency_cdf.png").read_bytes() != b"mine"


def test_a_message_names_the_flag_that_exists():
    code, _, err = run_main(*SIM, "--rate", "1,2", "--max-rate", "0.9", "--slo-ttft-ms", "500")
    _one_error(code, err, 2, "--max-rate: one run at a time")


@pytest.mark.parametrize(
    "argv,fragment",
    [
        ([*SIM, "--rate", "1", "--plot", ""], "plot: an empty path"),
        ([*SIM, "--rate", "1", "--out", " "], "out: an empty path"),
        ([*SIM, "--rate", "1", "--scenario", ""], "scenario: an empty path"),
        (
            ["recommend", "-m", MODEL8B, "-H", "H100_SXM", "--rate", "1", "--slo-tpot-ms", "50", "--runtime", ""],
            "runtime: an empty name",
        ),
        (
            ["recommend", "-m", MODEL8B, "-H", "H100_SXM", "--rate", "1", "--slo-tpot-ms", "50", "--weight-dtype", ","],
            "--weight-dtype: an empty name",
        ),
    ],
)
def test_an_empty_string_is_an_error_never_a_default_or_the_current_folder(argv, fragment, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(*argv)
    _one_error(code, err, 2, fragment)
    assert list(tmp_path.iterdir()) == []  # nothing written to the current folder


def test_plots_of_plans_that_do_not_fit_are_refused_or_marked(tmp_path):
    argv = ["plot", "roofline", "-m", "meta-llama/Llama-3.1-70B", "-H", "RTX_4090", "-o", str(tmp_path / "r.png")]
    code, _, err = run_main(*argv)
    _one_error(code, err, 4, "needs", "--allow-no-fit")
    code, _, err = run_main(*argv, "--allow-no-fit")
    assert code == 0 and (tmp_path / "r.png").exists()
    code, _, err = run_main("plot", "scaling", "-m", "meta-llama/Llama-3.1-70B", "-H", "RTX_4090", "--over", "batch",
                            "--values", "1,2", "-o", str(tmp_path / "s.png"))  # fmt: skip
    _one_error(code, err, 2, "no plan of meta-llama/Llama-3.1-70B over batch 1, 2 fits on RTX_4090")


def test_an_overloaded_simulation_stops_in_bounded_memory():
    # --rate 1000 --requests 100000000 grew ~125 bytes a request until the allocator aborted
    import subprocess
    import sys

    code = (
        "from ridgeline.cli import main\n"
        "try:\n"
        f"    main({[*SIM[:5], '--rate', '1000', '--requests', '100000000']!r})\n"
        "except SystemExit as e:\n"
        "    hwm = next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
        "    print('peak_kb', hwm, 'exit', e.code)\n"
    )
    # VmHWM, the peak of this process's own memory: ru_maxrss also counts the parent's resident set
    # at the fork (the pytest process), so it read 545 MB on CI for a run that peaks near 170 MB
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stderr.startswith("error: --rate: the queue grew past 1048576 waiting requests"), r.stderr
    _, peak_kb, _, exit_code = r.stdout.split()
    assert exit_code == "2" and int(peak_kb) < 500 * 1024  # peak RSS under 500 MB (VmHWM in kB)


def test_a_time_series_finer_than_its_bound_is_refused(tmp_path):
    code, _, err = run_main(*SIM, "--rate", "10", "--out", str(tmp_path / "o"), "--sample-ms", "1e-4")
    _one_error(code, err, 2, "sample_s: the time series (--sample-ms) would pass 2097152 points")


def test_unbounded_work_is_refused_or_stopped(monkeypatch):
    code, _, err = run_main("recommend", "-m", MODEL8B, "-H", "H100_SXM", "--rate", "5", "--slo-tpot-ms", "50",
                            "--requests", "100000000")  # fmt: skip
    _one_error(code, err, 2, "requests: a search simulates each candidate several times")
    import ridgeline.catalog.store

    monkeypatch.setattr(ridgeline.catalog.store, "SQL_TIMEOUT_S", 1.0)
    t0 = time.monotonic()
    with pytest.raises(ridgeline.errors.CatalogError, match="the query ran past 1 s and was stopped"):
        default_catalog().sql("SELECT sum(a.range * b.range) FROM range(300000) a, range(300000) b")
    assert time.monotonic() - t0 < 20


@pytest.mark.parametrize(
    "body,fragment",
    [
        ("output: {kind: fixed, value: x}", "output value: must be a whole number"),
        ("output: {kind: normal, mean: 100}", "output: a normal distribution has hi, lo, mean, std"),
        ("prompt: {kind: uniform, lo: 10, hi: 20, mean: 3}", "prompt: a uniform distribution has hi, lo"),
    ],
)
def test_a_scenario_value_the_core_cannot_take_is_named_not_placed_by_column(tmp_path, body, fragment):
    # serde's "expected u64 at line 1 column 147" named neither the key nor the file
    p = tmp_path / "s.yaml"
    p.write_text(f"rate: 1\n{body}\n")
    code, _, err = run_main(*SIM, "--scenario", str(p))
    _one_error(code, err, 2, fragment)
    assert "line 1 column" not in err


@pytest.mark.parametrize(
    "argv",
    [
        [*SIM, "--rate", "1", "--out", "{f}/sub"],
        [*SIM, "--rate", "1", "--plot", "{f}"],
        [*SIM, "--rate", "1,2", "--plot", "{f}/x"],
        ["validate", "--plot", "{f}/x"],
        ["recommend", "-m", MODEL8B, "-H", "H100_SXM", "--rate", "1", "--slo-tpot-ms", "50", "--plot", "{f}/x.png"],
    ],
)
def test_an_output_under_a_file_is_refused_before_the_run(tmp_path, argv):
    f = tmp_path / "a_file"
    f.write_text("mine")
    t0 = time.monotonic()
    code, _, err = run_main(*(a.replace("{f}", str(f)) for a in argv))
    assert time.monotonic() - t0 < 10  # refused before the work, not after it
    _one_error(code, err, 2, str(f))
    assert f.read_text() == "mine"


@pytest.mark.parametrize("name", ["_ridgeline.json", "_ridgeline_parts.jsonl", "part-000000.parquet"])
def test_a_dataset_folder_holding_a_folder_where_a_file_goes_is_refused_and_kept(tmp_path, name):
    (tmp_path / name).mkdir()
    (tmp_path / name / "mine.txt").write_text("mine")
    code, _, err = run_main(
        "sweep", "-m", MODEL8B, "-H", "H100_SXM", "--batch", "1,2", "--out", f"{tmp_path}/", "--force"
    )
    _one_error(code, err, 2, "holds files ridgeline did not write", name)
    assert (tmp_path / name / "mine.txt").read_text() == "mine"


@pytest.mark.parametrize(
    "call,fragment",
    [
        (lambda: ridgeline.sweep(None), "grid: a mapping of axis names to values"),
        (lambda: ridgeline.sweep(""), "grid: a mapping of axis names to values"),
        (
            lambda: ridgeline.recommend(MODEL8B, rate=5, slo_tpot_ms=50, hardware=-1, tp=[1]),
            "hardware: expected a name",
        ),
        (
            lambda: ridgeline.recommend(MODEL8B, rate=5, slo_tpot_ms=50, hardware=[1], tp=[1]),
            "hardware: expected names",
        ),
        (
            lambda: ridgeline.recommend(
                MODEL8B, rate=5, slo_tpot_ms=50, hardware=["H100_SXM"], tp=[1], weight_dtype=[1]
            ),
            "weight_dtype: expected names",
        ),
        (lambda: ridgeline.recommend(MODEL8B, rate=5, slo_tpot_ms=50, hardware=[], tp=[1]), "hardware: an empty list"),
    ],
)
def test_the_python_doors_answer_wrong_types_with_typed_errors(call, fragment):
    with pytest.raises(ridgeline.errors.PlanError, match=fragment):
        call()


def test_a_top_beyond_any_count_lists_every_plan():
    code, out, err = run_main("sweep", "-m", MODEL8B, "-H", "H100_SXM", "--batch", "1,2", "--top", "9" * 30)
    assert code == 0, err
    assert "highest throughput (of 2 that fit)" in out


@pytest.mark.parametrize("argv", [["validate", "--rows"], ["sweep", "--grid"], ["simulate", "--scenario"]])
def test_a_nul_byte_in_an_argument_is_a_usage_error(argv):
    code, _, err = run_main(*argv, "a\x00b")
    _one_error(code, err, 2, "holds a NUL byte")
