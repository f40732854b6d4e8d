"""The command line from outside the repository, as a user runs it."""

import json
import os
import re
from pathlib import Path

import pytest
import ridgeline
from conftest import REPO, run

REPO = REPO
_AIC = REPO / "tests" / "data" / "aic_model_configs"


def test_installed_package_not_the_source_tree():
    # The tests exercise the installed wheel; data comes from the compiled extension.
    if os.environ.get("RIDGELINE_REQUIRE_INSTALLED") == "1":
        assert REPO not in Path(ridgeline.__file__).resolve().parents


def test_readme_command_prints_the_headline(tmp_path):
    r = run("estimate", "--model", "meta-llama/Llama-3.1-8B", "--hardware", "H100_SXM", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # no --runtime: vLLM on a data-centre part, calibrated from its kernels and serving runs, said in the output
    for word in ("TTFT", "TPOT", "throughput", "fits", "the default runtime on data-centre parts",
                 "calibrated (H100_SXM, vllm", "verified", "held-out"):  # fmt: skip
        assert word in r.stdout
    # the answer first: TTFT, TPOT with the decode speed it gives, throughput and memory after the title
    assert [ln.split()[0] for ln in r.stdout.splitlines()[1:6]] == ["TTFT", "TPOT", "decode", "throughput", "memory"]
    bound = run("estimate", "-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM", "--uncalibrated", cwd=tmp_path)
    assert "uncalibrated" in bound.stdout and "optimistic bound" in bound.stdout and "held-out" not in bound.stdout
    tpot = [float(ln.split()[1]) for out in (r.stdout, bound.stdout) for ln in out.splitlines()
            if ln.strip().startswith("TPOT")]  # fmt: skip
    assert tpot[0] > tpot[1]  # the calibration is slower than the bound


EXPONENT = re.compile(r"\d[eE][+-]?\d")


@pytest.mark.parametrize(("model", "hardware"), [("meta-llama/Llama-3.1-8B", "H100_SXM"),
                                                 ("meta-llama/Llama-3.1-8B", "RTX_4090"),
                                                 ("Qwen/Qwen3-30B-A3B", "GB10")])  # fmt: skip
def test_estimate_output_has_no_exponent_and_verbose_gives_fitted_parameters_in_units(tmp_path, model, hardware):
    # The llama.cpp fits leave their overlap and launch overhead at the search's lower bound (1e-18-ish
    # numbers): the default shows none of them, --verbose shows each rounded, in units, marked.
    r = run("estimate", "-m", model, "-H", hardware, cwd=tmp_path)
    v = run("estimate", "-m", model, "-H", hardware, "--verbose", cwd=tmp_path)
    assert r.returncode == 0 and v.returncode == 0, r.stderr + v.stderr
    for out in (r.stdout, v.stdout):
        assert not EXPONENT.search(out), out
    assert "search bound)" not in r.stdout
    fitted = {ln.strip().split("  ")[0]: ln for ln in v.stdout.splitlines() if ln.startswith("    ")}
    assert fitted["memory efficiency"].rstrip().endswith("of the memory roof")
    step = fitted["step overhead"].split()
    assert step[-2] in ("us", "ms") or step[-3] in ("us", "ms")
    from ridgeline.engine.fits import lookup

    row = lookup(hardware, ridgeline.estimate(model, hardware).plan["runtime"])[1]
    assert row is not None
    eta = float(fitted["memory efficiency"].split()[-5].rstrip("%")) / 100
    assert eta == pytest.approx(float(row["eta_mem"]), abs=0.006)  # two significant digits of the fitted value
    pinned = str(row["pinned"]).split()
    assert sum("(at its search bound)" in ln for ln in fitted.values()) == len(pinned)


def test_runtime_execution_line_and_its_flags(tmp_path):
    args = ["estimate", "-m", "google/gemma-3-4b-it", "-H", "GB10", "--runtime", "llamacpp-cuda"]
    r = run(*args, "--verbose", cwd=tmp_path)
    assert "execution" not in run(*args, cwd=tmp_path).stdout  # a detail: under --verbose only
    line = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("execution"))
    for said in ("512-token steps", "padded to 256 cells", "window + 512", "CUDA graph"):
        assert said in line
    d = {flag: json.loads(run(*args, *flag, "--json", cwd=tmp_path).stdout)["plan"]
         for flag in ((), ("--no-decode-graphs",), ("--kv-pad", "1", "--chunk", "2048"))}  # fmt: skip
    assert d[()]["decode_graphs"] and not d[("--no-decode-graphs",)]["decode_graphs"]
    assert d[("--kv-pad", "1", "--chunk", "2048")]["kv_pad"] == 1
    assert d[("--kv-pad", "1", "--chunk", "2048")]["swa_cache_extra"] == 2048
    # the bound of the same plan runs it the same way; only runtime none runs the plan as written
    assert "execution" in run(*args[:5], "--uncalibrated", "-v", cwd=tmp_path).stdout
    assert "execution" not in run(*args[:5], "--runtime", "none", "-v", cwd=tmp_path).stdout


def test_routing_skew_option(tmp_path):
    args = ["estimate", "-m", "openai/gpt-oss-20b", "-H", "GB10", "--batch", "16", "--json"]
    tpot = {s: json.loads(run(*args, "--routing-skew", s, cwd=tmp_path).stdout)["tpot_s"] for s in ("0", "2")}
    assert tpot["2"] < tpot["0"]  # a skewed router reads fewer distinct experts
    r = run(*args, "--routing-skew", "-1", cwd=tmp_path)
    assert r.returncode == 2 and "--routing-skew" in r.stderr and "Traceback" not in r.stderr


def test_json_and_breakdown(tmp_path):
    r = run("estimate", "-m", "Qwen/Qwen3-8B", "-H", "H200", "--json", "--breakdown", "--batch", "4", cwd=tmp_path)
    d = json.loads(r.stdout)
    assert d["hardware"] == "H200_SXM" and d["plan"]["batch"] == 4 and d["breakdown"]
    r = run("estimate", "-m", "Qwen/Qwen3-8B", "-H", "H200", "--breakdown", cwd=tmp_path)
    assert "qkv_proj" in r.stdout and "memory" in r.stdout


@pytest.mark.parametrize(
    "args,code,needle",
    [
        (["-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SMX"], 3, "H100_SXM"),
        (["-m", "meta-llama/Llama-3.1-8X", "-H", "H100_SXM"], 3, "meta-llama/Llama-3.1-8B"),
        (["-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM", "--batch", "0"], 2, "batch"),
        (["-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM", "--prompt", "1.5"], 2, "prompt"),
        (["-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM", "--tp", "3"], 2, "attention heads"),
        (["-m", "meta-llama/Llama-3.1-70B", "-H", "H100_SXM"], 4, "short by"),
        (
            ["-m", str(_AIC / "deepseek-ai--DeepSeek-V4-Flash_config.json"), "-H", "H100_SXM"],
            2,
            "DeepSeek-V4 compressed attention (compress_ratios) is not supported yet",
        ),
        (["-m", "openai/gpt-oss-20b", "-H", "GB10", "--routing-skew", "inf"], 2, "--routing-skew"),
        (["-m", "google/gemma-2-9b", "-H", "GB10", "--kv-pad", "0"], 2, "--kv-pad"),
        (["-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM", "--runtime", "vlm"], 2, "llamacpp-hip, llamacpp-metal"),
    ],
)
def test_errors_are_one_line_with_exit_codes(args, code, needle, tmp_path):
    r = run("estimate", *args, cwd=tmp_path)
    assert r.returncode == code, (r.stdout, r.stderr)
    assert needle in r.stderr
    assert "Traceback" not in r.stderr
    if code != 2 or "--prompt" not in args:
        assert len(r.stderr.strip().splitlines()) == 1


def test_allow_no_fit(tmp_path):
    r = run("estimate", "-m", "meta-llama/Llama-3.1-70B", "-H", "H100_SXM", "--allow-no-fit", "--json", cwd=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout)["fits"] is False


def test_catalog_commands(tmp_path):
    r = run("catalog", "list", "--format", "csv", cwd=tmp_path)
    assert r.returncode == 0 and "H100_SXM,NVIDIA,hopper,989.4" in r.stdout
    r = run("catalog", "show", "H100", "--json", cwd=tmp_path)
    assert json.loads(r.stdout)["name"] == "H100_SXM"
    r = run("catalog", "audit", cwd=tmp_path)
    assert r.returncode == 0 and "audit_dtype_ratios" in r.stdout
    out = tmp_path / "audit.parquet"
    r = run("catalog", "audit", "--format", "parquet", "--out", str(out), cwd=tmp_path)
    assert r.returncode == 0 and out.exists()
    r = run(
        "catalog",
        "sql",
        "SELECT name FROM hardware WHERE tflops_bf16 = 989.4 ORDER BY name",
        "--format",
        "json",
        cwd=tmp_path,
    )
    assert [x["name"] for x in json.loads(r.stdout)] == ["GH200_144GB", "GH200_96GB", "H100_SXM", "H200_SXM"]
    r = run("catalog", "sql", "DROP TABLE hardware", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_model_commands(tmp_path):
    r = run("model", "list", "--format", "json", cwd=tmp_path)
    rows = {x["model"]: x for x in json.loads(r.stdout)}
    assert rows["meta-llama/Llama-3.1-8B"]["kv_bytes_per_token_bf16"] == 131072
    assert rows["deepseek-ai/DeepSeek-V3"]["engine"] == "priced"
    assert rows["deepseek-ai/DeepSeek-V3"]["kv_bytes_per_token_bf16"] == 61 * 576 * 2  # MLA latent + rope key
    assert rows["nvidia/Nemotron-H-56B-Base-8K"]["engine"] == "priced"  # Mamba2 layers priced (SSD scan)
    assert rows["Qwen/Qwen3.5-397B-A17B"]["architecture"] == "Gated DeltaNet hybrid, MoE, GQA, gated attention"
    assert rows["Qwen/Qwen3-VL-8B-Instruct"]["not_counted"] == "vision tower"
    r = run("model", "show", "google/gemma-2-9b", "--json", cwd=tmp_path)
    assert json.loads(r.stdout)["params"]["total"] == 9_241_705_984


def test_the_lazy_command_table_names_every_command_its_module_adds():
    # `ridgeline estimate` imports the estimate command's module alone; the table that says where
    # each command lives must name every command the modules add, and the module that adds it
    from ridgeline.cli.group import COMMANDS, load_all

    group = load_all()
    assert sorted(group.commands) == sorted(COMMANDS) and len(COMMANDS) == 12
    for name, module in COMMANDS.items():
        assert group.commands[name].callback.__module__ == f"ridgeline.cli.{module}", name
