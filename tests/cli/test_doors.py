"""One plan, one answer: ``ridgeline estimate``, ``ridgeline.estimate()`` and ``ridgeline sweep``
(CLI and API) choose the runtime and calibration the same way and give the same numbers."""

import json

import polars as pl
import pytest
import ridgeline
from click.testing import CliRunner
from conftest import LLAMA
from ridgeline.cli import cli
from ridgeline.sweeps.sweep import sweep

# dense, MoE, quantised, TP > 1 and several devices: NVIDIA data-centre and consumer parts (llama.cpp
# CUDA's profile), Apple (Metal's), a device no calibrated runtime runs on (AMD: the bound), GB10 (its
# own fit), and a runtime named, none, or the bound of the default one
PANEL = [
    (LLAMA, "H100_SXM", {}),
    (LLAMA, "H100_SXM", {"batch": 8, "prompt": 2048}),
    (LLAMA, "H100_SXM", {"tp": 2}),
    (LLAMA, "H100_SXM", {"weight_dtype": "fp8"}),
    (LLAMA, "H100_SXM", {"dtype": "bfloat16"}),
    (LLAMA, "H100_SXM", {"runtime": "trtllm", "batch": 4}),
    (LLAMA, "H100_SXM", {"runtime": "none"}),
    (LLAMA, "H100_SXM", {"uncalibrated": True, "batch": 256}),
    (LLAMA, "RTX_4090", {"weight_dtype": "q4_k_m"}),
    (LLAMA, "RTX_4090", {"batch": 4, "prompt": 4096, "output": 64}),
    (LLAMA, "M2_ULTRA", {}),
    (LLAMA, "M2_ULTRA", {"weight_dtype": "q4_0", "batch": 2}),
    (LLAMA, "MI300X", {}),
    ("openai/gpt-oss-20b", "GB10", {}),
    ("openai/gpt-oss-20b", "GB10", {"batch": 16}),
    ("openai/gpt-oss-20b", "H100_SXM", {"tp": 2, "ep": 2}),
    ("Qwen/Qwen3-30B-A3B", "H100_SXM", {"batch": 4}),
    ("Qwen/Qwen3-30B-A3B", "RTX_4090", {"weight_dtype": "q4_k_m"}),
    ("google/gemma-3-4b-it", "GB10", {"prompt": 4096}),
    ("meta-llama/Llama-3.1-70B", "H100_SXM", {"tp": 4, "weight_dtype": "fp8"}),
    ("meta-llama/Llama-3.1-70B", "H100_SXM", {"tp": 8, "batch": 32}),
    ("Qwen/Qwen3-8B", "H200", {"kv_dtype": "fp8"}),
    ("meta-llama/Llama-3.2-1B", "L4", {"batch": 64, "output": 1}),
]
NUMBERS = ("ttft_s", "tpot_s", "e2e_s", "throughput_tok_s", "prefill_tok_s")


def _flags(plan):
    out = []
    for k, v in plan.items():
        if k == "uncalibrated":
            out.append("--uncalibrated")
        else:
            out += [f"--{k.replace('_', '-')}", str(v)]
    return out


def _api(model, hw, plan):
    kw = {k: v for k, v in plan.items() if k != "uncalibrated"}
    return ridgeline.estimate(model, hw, calibrated=not plan.get("uncalibrated", False), allow_no_fit=True, **kw)


def _grid(model, hw, plan):
    return {"model": [model], "hardware": [hw], **{k: [v] for k, v in plan.items() if k != "uncalibrated"}}


@pytest.mark.parametrize(("model", "hw", "plan"), PANEL, ids=[f"{m}@{h}{p}" for m, h, p in PANEL])
def test_three_doors_one_answer(model, hw, plan, tmp_path):
    api = _api(model, hw, plan)
    r = CliRunner().invoke(cli, ["estimate", "-m", model, "-H", hw, "--json", "--allow-no-fit", *_flags(plan)])
    assert r.exit_code == 0, r.output
    cli_d = json.loads(r.output)
    for k in (*NUMBERS, "calibration", "runtime_note", "fits"):
        assert cli_d[k] == getattr(api, k), k
    assert cli_d["memory"] == dict(api.memory) and cli_d["plan"]["runtime"] == api.plan["runtime"]
    # the sweep, through the API and through the CLI to Parquet
    calibrated = not plan.get("uncalibrated", False)
    rows = [sweep(_grid(model, hw, plan), calibrated=calibrated).row(0, named=True)]
    out = tmp_path / "s.parquet"
    args = ["sweep", "-m", model, "-H", hw, "--out", str(out), *_flags(plan)]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    rows.append(pl.read_parquet(out).row(0, named=True))
    for row in rows:
        assert row["error"] is None
        assert row["runtime"] == api.plan["runtime"] and row["calibration"] == api.calibration
        for k in NUMBERS:
            want = getattr(api, k)
            assert row[k] == (want if want is not None else None), k
        assert row["memory_gb"] == api.memory["total_bytes"] / 1e9 and row["fits"] == api.fits


def test_the_default_runtime_is_the_devices_and_said_the_same_everywhere():
    # no runtime named: vLLM on an NVIDIA data-centre part, llama.cpp CUDA's profile on a consumer
    # card, Metal's on Apple, the bound on AMD
    for hw, rt in (("H100_SXM", "vllm"), ("RTX_4090", "llamacpp-cuda"), ("M2_ULTRA", "llamacpp-metal"),
                   ("MI300X", None)):  # fmt: skip
        e = ridgeline.estimate(LLAMA, hw)
        assert e.plan["runtime"] == rt
        assert (e.calibration == "uncalibrated") == (rt is None)
        assert e.runtime_note.startswith(f"{rt}:") if rt else "no runtime" in e.runtime_note
    # the bound of the same plan runs it the same way: the same prefill steps, the same memory
    cal, bound = (
        ridgeline.estimate(LLAMA, "H100_SXM", batch=256, calibrated=c, allow_no_fit=True, runtime="llamacpp-cuda")
        for c in (True, False)
    )
    assert bound.calibration == "uncalibrated" and cal.calibration != "uncalibrated"
    assert bound.prefill["steps"] == cal.prefill["steps"] == 256 * 1024 // 512
    assert bound.memory == cal.memory and bound.fits == cal.fits
    assert bound.ttft_s < cal.ttft_s and bound.tpot_s < cal.tpot_s


def test_dtype_aliases_give_the_same_plan():
    # bfloat16, BF16, " bf16" name the one canonical dtype for compute, weights and KV alike
    want = ridgeline.estimate(LLAMA, "H100_SXM", dtype="bf16")
    assert want.memory["weights_bytes"] == pytest.approx(2 * want.params["total"], rel=1e-3)
    for alias in ("bfloat16", "BF16", " bf16", "BFloat16"):
        e = ridgeline.estimate(LLAMA, "H100_SXM", dtype=alias, kv_dtype=alias, weight_dtype=alias)
        assert (e.tpot_s, e.ttft_s, e.memory) == (want.tpot_s, want.ttft_s, want.memory), alias
        assert e.plan["dtype"] == "bf16"
    half = ridgeline.estimate(LLAMA, "H100_SXM", dtype="fp16")
    for alias in ("half", "float16", "f16", "FP16"):
        assert ridgeline.estimate(LLAMA, "H100_SXM", dtype=alias).tpot_s == half.tpot_s
    # the CLI prints identical results for the alias and the canonical name
    outs = {
        a: CliRunner().invoke(cli, ["estimate", "-m", LLAMA, "-H", "H100_SXM", "--dtype", a]).output
        for a in ("bfloat16", "bf16")
    }
    assert outs["bfloat16"] == outs["bf16"] and "TTFT" in outs["bf16"]
