"""Frictions a user coming from vLLM meets, each answered (issue 46): vLLM's flag spellings, a
version, SQL from a file or with a leading comment, a missing config path, an HF id not bundled,
and errors naming the flag rather than the Python argument."""

import json

import ridgeline
from conftest import run

_ONE = ("-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM", "--json")


def test_version_is_the_package_version():
    r = run("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"ridgeline {ridgeline.__version__}"


def test_vllm_spellings_are_the_same_options():
    ours = json.loads(run("estimate", *_ONE, "--tp", "2", "--weight-dtype", "fp8", "--kv-dtype", "fp8").stdout)
    theirs = run("estimate", *_ONE, "--tensor-parallel-size", "2", "--quantization", "fp8", "--kv-cache-dtype", "fp8")
    assert theirs.returncode == 0, theirs.stderr
    got = json.loads(theirs.stdout)
    assert got["plan"] == ours["plan"] and got["plan"]["tp"] == 2 and got["tpot_s"] == ours["tpot_s"]


def test_max_model_len_on_estimate_says_where_it_lives():
    r = run("estimate", "-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM", "--max-model-len", "8192")
    assert r.returncode == 2 and "simulate --max-model-len" in r.stderr and "Did you mean" not in r.stderr


def test_catalog_sql_takes_a_comment_and_a_file(tmp_path):
    q = "-- devices\nselect count(*) as n from hardware"
    direct = run("catalog", "sql", q, "--format", "csv")
    assert direct.returncode == 0, direct.stderr
    f = tmp_path / "q.sql"
    f.write_text(q)
    from_file = run("catalog", "sql", "--file", str(f), "--format", "csv")
    assert from_file.returncode == 0 and from_file.stdout == direct.stdout and int(direct.stdout.split()[1]) > 10
    both = run("catalog", "sql", q, "--file", str(f))
    assert both.returncode == 2 and "not both" in both.stderr
    missing = run("catalog", "sql", "--file", str(tmp_path / "nope.sql"))
    assert missing.returncode != 0 and "nope.sql" in missing.stderr and "Traceback" not in missing.stderr


def test_missing_config_path_is_file_not_found(tmp_path):
    r = run("estimate", "-m", str(tmp_path / "config.json"), "-H", "H100_SXM")
    assert r.returncode == 3 and "file not found" in r.stderr and "unknown model" not in r.stderr


def test_unbundled_hf_id_says_how_to_use_its_config():
    r = run("estimate", "-m", "someorg/SomeModel-7B", "-H", "H100_SXM")
    assert r.returncode == 3 and "config.json" in r.stderr and "-m path/to/config.json" in r.stderr


def test_errors_name_the_flag_not_the_python_argument():
    r = run("simulate", "-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM", "--prefill-instances", "1",
            "--decode-instances", "1", "--kv-link-gbs", "-5", "--rate", "1", "--requests", "10")  # fmt: skip
    assert r.returncode == 2 and "--kv-link-gbs" in r.stderr and "kv_link_gbs" not in r.stderr


def test_validate_plot_draws_where_it_can_and_says_where_it_cannot(tmp_path):
    r = run("validate", "--serving", "--limit", "5", "--plot", str(tmp_path / "v"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "v" / "validation_rows.png").stat().st_size > 1000 and "validation_rows.png" in r.stderr
    for mode in ("--power", "--comm", "--speculation", "--offload"):
        bad = run("validate", mode, "--plot", str(tmp_path / "w"))
        assert bad.returncode == 2 and f"{mode} prints its report only" in bad.stderr
        assert not (tmp_path / "w").exists()
