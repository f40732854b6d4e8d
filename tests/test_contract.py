"""The reproductions the hardening issue lists, one case per class: each now gives a correct
result or a typed one-line error naming the input (the CLI's exit codes are in test_fuzz.py)."""

import json

import pytest
import ridgeline
from cli_in_process import run_main
from conftest import LLAMA
from ridgeline import _data
from ridgeline.errors import DoesNotFitError, ModelConfigError, PlanError, UnknownNameError
from ridgeline.models.config import Model, _bundled


@pytest.mark.parametrize(
    ("kw", "error", "names"),
    [
        # u64 wraparound: counts past what the engine holds exactly, or past the model's context
        ({"batch": 2**62, "allow_no_fit": True}, PlanError, "batch"),
        ({"output": 2**64 - 1}, PlanError, "output"),
        ({"prompt": 2**64 - 1}, PlanError, "prompt"),
        ({"prompt": 2**52, "allow_no_fit": True}, PlanError, "prompt+output"),
        ({"dp": 2**62}, PlanError, "dp"),
        ({"kv_pad": 2**64 - 256}, PlanError, "kv_pad"),
        ({"kv_pad": 2**40}, PlanError, "kv_pad"),
        ({"batch": 2**50, "chunk": 1, "allow_no_fit": True}, PlanError, "batch"),
        # silent coercion: only booleans are booleans, an empty name is not the default
        ({"allow_no_fit": "no"}, PlanError, "allow_no_fit"),
        ({"calibrated": "False"}, PlanError, "calibrated"),
        ({"identical_sequences": "false"}, PlanError, "identical_sequences"),
        ({"breakdown": 1}, PlanError, "breakdown"),
        ({"weight_dtype": ""}, PlanError, "weight_dtype"),
        ({"dtype": None}, PlanError, "dtype"),
        ({"dtype": ""}, PlanError, "dtype"),
        ({"runtime": ""}, PlanError, "runtime"),
        ({"routing_skew": float("inf")}, PlanError, "routing_skew"),
        ({"scaleout_gbs": float("nan"), "tp": 2}, PlanError, "scaleout_gbs"),
        # messages that name the input: fp16acc16 is a GEMM path, not a weight format to suggest
        ({"dtype": "fp16acc16"}, PlanError, "dtype"),
        ({"chunk": 2**64}, PlanError, "chunk"),
        ({"batch": 512, "prompt": 8192}, DoesNotFitError, "short by"),
    ],
)
def test_a_bad_plan_is_a_typed_error_naming_its_input(kw, error, names):
    with pytest.raises(error) as e:
        ridgeline.estimate(LLAMA, "H100_SXM", **kw)
    msg = str(e.value)
    assert names in msg and "\n" not in msg
    if kw.get("dtype") == "fp16acc16":
        assert "weight-dtype" not in msg


def test_wrong_types_for_model_and_hardware_are_typed_errors():
    with pytest.raises(PlanError, match="hardware"):
        ridgeline.estimate(LLAMA, None)
    with pytest.raises(PlanError, match="model"):
        ridgeline.estimate(42, "H100_SXM")
    with pytest.raises(UnknownNameError, match="unknown model"):
        ridgeline.estimate("x" * 256, "H100_SXM")  # too long for a path: a name, with the closest ones


def test_what_wrapped_before_is_now_a_plan_that_runs():
    # batch 2^40 in llama.cpp's 512-token steps: 2^41 steps of two shapes, priced in closed form
    e = ridgeline.estimate(LLAMA, "H100_SXM", batch=2**40, allow_no_fit=True, runtime="llamacpp-cuda")
    assert e.prefill["steps"] == 2**41 and not e.fits
    one = ridgeline.estimate(LLAMA, "H100_SXM", runtime="llamacpp-cuda")
    assert e.ttft_s == pytest.approx(one.ttft_s * 2**40, rel=1e-9)
    # tf32 computes on fp32 values: its KV cache is stored as fp32, not refused as "kv_dtype tf32"
    t = ridgeline.estimate(LLAMA, "H100_SXM", dtype="tf32", runtime="none")
    f = ridgeline.estimate(LLAMA, "H100_SXM", dtype="fp32", runtime="none")
    assert t.plan["kv_dtype"] == "fp32" and t.memory == f.memory


def test_a_config_whose_counts_pass_u64_is_refused_naming_the_key():
    cfg = json.loads(_data.read_text(_bundled()[LLAMA]))
    with pytest.raises(ModelConfigError, match="vocab_size"):
        Model.from_dict({**cfg, "vocab_size": 2**62})
    # each key within 2^53 but their product past 2^63: the core's count refuses it
    with pytest.raises(ModelConfigError, match="parameters"):
        Model.from_dict({**cfg, "vocab_size": 2**50, "hidden_size": 2**14, "num_attention_heads": 2**7})


def test_a_cli_usage_error_is_one_line_with_exit_2():
    code, _, err = run_main("estimate", "-m", LLAMA, "-H", "H100_SXM", "--batch", "eight")
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("error: Invalid value for '--batch'") and "ridgeline estimate --help" in err
    code, _, err = run_main("estimate", "-H", "H100_SXM")
    assert code == 2 and "--model" in err and err.count("\n") == 1


def test_a_value_with_a_newline_is_still_one_line():
    with pytest.raises(PlanError, match="control characters"):
        ridgeline.estimate("meta-llama/\nLlama-3.1-8B", "H100_SXM")
    cfg = json.loads(_data.read_text(_bundled()[LLAMA]))
    with pytest.raises(ModelConfigError) as e:
        Model.from_dict({**cfg, "hidden_act": "silu\nrelu"})
    assert "\n" not in str(e.value) and "hidden_act" in str(e.value)
    code, _, err = run_main("estimate", "-m", LLAMA, "-H", "H100_SXM", "--weight-dtype", "q4\nk")
    assert code == 2 and err.count("\n") == 1 and "--weight-dtype" in err


def test_a_config_with_absurd_counts_is_refused_before_the_work():
    # the normaliser walks layers one by one: 2^53 layers took all memory (found by the fuzz suite)
    cfg = json.loads(_data.read_text(_bundled()[LLAMA]))
    for key, v in (("num_hidden_layers", 2**53), ("num_hidden_layers", 2**16 + 1)):
        with pytest.raises(ModelConfigError, match=key):
            Model.from_dict({**cfg, key: v})
    moe = json.loads(_data.read_text(_bundled()["Qwen/Qwen3-30B-A3B"]))
    with pytest.raises(ModelConfigError, match="num_experts"):
        Model.from_dict({**moe, "num_experts": 2**40})
