"""Precision paths (issue 18, item 4): a quantised format computes on the fastest path the device
and runtime have for it, the catalog's fp4 column, and runtimes that cannot store a format."""

import pytest
import ridgeline
from ridgeline import PlanError
from ridgeline.catalog.store import default_catalog

LLAMA70 = "meta-llama/Llama-3.1-70B"


def _op(e, phase, op):
    (row,) = [r for r in e.breakdown.to_dicts() if r["phase"] == phase and r["op"] == op]
    return row


def test_nvfp4_computes_at_the_fp4_peak_where_the_device_has_one():
    kw = {"batch": 8, "prompt": 4096, "output": 2, "breakdown": True, "calibrated": False, "runtime": "none"}
    b200 = ridgeline.estimate(LLAMA70, "B200", weight_dtype="nvfp4", **kw)
    up = _op(b200, "prefill", "ffn_up")
    # B200 dense FP4 9,000 TFLOPS (HGX B200 datasheet: 18 PF with sparsity / 2)
    assert up["compute_s"] == pytest.approx(up["flops"] / 9000e12, rel=1e-9)
    assert b200.gemm_dtype == "fp4" and b200.peak_tflops == 9000
    # H100 has no fp4 path: the weights are dequantised and the GEMM runs at the bf16 peak, said so
    h100 = ridgeline.estimate(LLAMA70, "H100_SXM", weight_dtype="nvfp4", tp=2, **kw)
    up = _op(h100, "prefill", "ffn_up")
    assert up["compute_s"] == pytest.approx(up["flops"] / 989.4e12, rel=1e-9)
    assert any("no fp4 path" in w for w in h100.warnings)


def test_fp8_on_h100_is_faster_than_bf16():
    # the line: Llama-3.1-70B on H100, TP 2, fp8 faster than bf16, with the default runtime
    bf16 = ridgeline.estimate(LLAMA70, "H100_SXM", tp=2, weight_dtype="bf16")
    fp8 = ridgeline.estimate(LLAMA70, "H100_SXM", tp=2, weight_dtype="fp8")
    assert fp8.ttft_s < bf16.ttft_s and fp8.tpot_s < bf16.tpot_s
    # and under one runtime
    same = {w: ridgeline.estimate(LLAMA70, "H100_SXM", tp=2, weight_dtype=w, runtime="trtllm") for w in ("bf16", "fp8")}
    assert same["fp8"].ttft_s < same["bf16"].ttft_s and same["fp8"].tpot_s < same["bf16"].tpot_s


def test_a_runtime_without_a_type_for_the_weights_is_not_chosen_and_refused_when_named():
    # on a consumer card llama.cpp is the default; with fp8 weights it is not, and the note says why
    e = ridgeline.estimate("meta-llama/Llama-3.1-8B", "RTX_4090", weight_dtype="fp8")
    assert e.plan["runtime"] is None
    assert "llamacpp-cuda stores no fp8 weights" in e.runtime_note
    with pytest.raises(PlanError, match="runtime: llamacpp-cuda has no weight type for fp8"):
        ridgeline.estimate(LLAMA70, "H100_SXM", tp=2, weight_dtype="fp8", runtime="llamacpp-cuda")
    # llama.cpp's own formats stay llama.cpp's (the default on a GGUF quant)
    q4 = ridgeline.estimate("meta-llama/Llama-3.1-8B", "RTX_4090", weight_dtype="q4_k_m")
    assert q4.plan["runtime"] == "llamacpp-cuda"


def test_fp4_is_at_least_the_fp8_rate_wherever_both_are_listed():
    cat = default_catalog()
    both = [cat.get(n) for n in cat.names() if cat.get(n).tflops_fp4 and cat.get(n).tflops_fp8]
    assert len(both) >= 15
    for d in both:
        # Blackwell doubles FP8 for FP4; Blackwell Ultra triples it (B300 13.5 PF vs 4.5 PF); GeForce
        # Blackwell lists FP8 at its FP32-accumulate half rate, so 4x (RTX 5090: 1,676 vs 419)
        ratio = d.tflops_fp4 / d.tflops_fp8
        assert 2 * 0.999 <= ratio <= 4 * 1.001, d.name
    with pytest.raises(PlanError, match="kv_dtype"):
        ridgeline.estimate(LLAMA70, "B200", kv_dtype="fp4")
