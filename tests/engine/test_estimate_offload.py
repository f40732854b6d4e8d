"""Offload in estimate: weights kept in host memory as the runtimes run them (llama.cpp computes the
experts of its first --n-cpu-moe layers and the layers below -ngl on the CPU, vLLM streams
--cpu-offload-gb over the host link), checked in closed form on the host's bytes, time and round
trips, the memory's two tiers, the automatic placement and the refusals."""

import csv

import pytest
import ridgeline
from conftest import LLAMA, run
from ridgeline.errors import DoesNotFitError, PlanError

QWEN = "Qwen/Qwen3-30B-A3B"  # bf16, 48 MoE layers of 128 experts, top 8, width 768, hidden 2048
EXPERT = 3 * 2048 * 768 * 2  # bytes of one expert's gate, up and down projections in bf16
# a host whose compute never binds: its time is its memory's
HOST = {"memory_bw_gbs": 100.0, "tflops_fp32": 1e6, "memory_gb": 512.0, "eta_mem": 0.5, "t_round_trip_us": 100.0}
LINK = 126.0 / 2 * 1e9  # H100 SXM's PCIe 5.0 x16 (data/hardware/host_links.csv), one direction


def _rows(e, phase, group):
    return [r for r in e.breakdown_rows() if r["phase"] == phase and r["layer_group"] == group]


def test_the_host_reads_the_offloaded_layers_active_experts_from_its_memory_each_token():
    out = 65
    e = ridgeline.estimate(QWEN, "H100_SXM", runtime="llamacpp-cuda", offload="experts:12", host=HOST, prompt=8,
                           output=out)  # fmt: skip
    host = _rows(e, "decode", "host")
    tokens = out - 1
    weights = sum(r["bytes"] for r in host if r["op"] in ("expert_up", "expert_down")) / tokens
    # one sequence routes to 8 experts a layer: their weights, and a little activation
    assert weights == pytest.approx(12 * 8 * EXPERT, rel=2e-3)
    # at 100 GB/s x eta 0.5, memory-bound
    assert sum(r["time_s"] for r in host) == pytest.approx(sum(r["bytes"] for r in host) / 50e9, rel=1e-9)
    # one round trip a token per offloaded layer: its fixed time and the hidden state there and back
    (trip,) = [r for r in e.breakdown_rows() if r["phase"] == "decode" and r["op"] == "host_round_trip"]
    assert trip["time_s"] == pytest.approx(tokens * 12 * (100e-6 + 2 * 2048 * 2 / LINK), rel=1e-9)


def test_a_prefill_step_of_32_tokens_or_more_copies_the_host_experts_over_the_link():
    # ggml offloads an op of at least 32 tokens to the GPU (llamacpp_offload_min_batch): the host's
    # expert weights cross the link once a step, and the GPU computes
    e = ridgeline.estimate(QWEN, "H100_SXM", runtime="llamacpp-cuda", offload="experts:12", host=HOST, prompt=64,
                           output=2)  # fmt: skip
    host = _rows(e, "prefill", "host")
    assert {r["op"] for r in host} == {"expert_up", "expert_down"}
    assert sum(r["time_s"] for r in host) == pytest.approx(sum(r["bytes"] for r in host) / LINK, rel=1e-9)
    # 64 tokens route to nearly all 128 experts: E (1 - (1 - 8/128)^64) of them
    distinct = 128 * (1 - (1 - 8 / 128) ** 64)
    weights = sum(r["bytes"] for r in host)
    assert weights == pytest.approx(12 * distinct * EXPERT, rel=2e-2)


@pytest.mark.parametrize("n", [1, 12, 48])
def test_the_two_tiers_hold_every_weight_once(n):
    base = ridgeline.estimate(QWEN, "H100_SXM", runtime="llamacpp-cuda")
    e = ridgeline.estimate(QWEN, "H100_SXM", runtime="llamacpp-cuda", offload=f"experts:{n}", host=HOST)
    host = e.memory["host"]
    assert host["weights_bytes"] == pytest.approx(n * 128 * EXPERT, rel=1e-12)
    assert e.memory["weights_bytes"] + host["weights_bytes"] == pytest.approx(base.memory["weights_bytes"], rel=1e-12)
    assert host["kv_bytes"] == 0 and e.memory["kv_bytes"] == base.memory["kv_bytes"]
    assert host["capacity_bytes"] == 512e9


def test_host_layers_take_their_share_of_the_kv_cache_and_the_lm_head():
    base = ridgeline.estimate(LLAMA, "RTX_4090", runtime="llamacpp-cuda")
    e = ridgeline.estimate(LLAMA, "RTX_4090", runtime="llamacpp-cuda", offload="gpu-layers:24", host=HOST)
    host = e.memory["host"]
    # 8 of 32 layers on the host, with the final norm and LM head (llama.cpp keeps the output layer
    # on the CPU unless -ngl exceeds the layer count)
    d, f, kv, vocab = 4096, 14336, 1024, 128256
    layer = d * (d + 2 * kv) + d * d + 3 * d * f + 2 * d
    assert host["weights_bytes"] == pytest.approx(2 * (8 * layer + vocab * d + d), rel=1e-12)
    assert host["kv_bytes"] == pytest.approx(base.memory["kv_bytes"] / 4, rel=1e-12)
    assert e.memory["kv_bytes"] == pytest.approx(base.memory["kv_bytes"] * 3 / 4, rel=1e-12)
    # one round trip a token around the block of host layers
    (trip,) = [r for r in e.breakdown_rows() if r["phase"] == "decode" and r["op"] == "host_round_trip"]
    assert trip["time_s"] == pytest.approx(255 * (100e-6 + 2 * d * 2 / (63e9 / 2)), rel=1e-9)


def test_more_experts_on_the_host_is_slower_and_needs_less_of_the_device():
    tpot, mem = [], []
    for n in range(0, 49, 8):
        e = ridgeline.estimate(QWEN, "H100_SXM", runtime="llamacpp-cuda", offload=f"experts:{n}", host=HOST)
        tpot.append(e.tpot_s)
        mem.append(e.memory["total_bytes"])
    assert tpot == sorted(tpot) and len(set(tpot)) == len(tpot)
    assert mem == sorted(mem, reverse=True) and len(set(mem)) == len(mem)


def test_auto_keeps_the_fewest_experts_on_the_host_that_fit():
    e = ridgeline.estimate("openai/gpt-oss-120b", "RTX_4090", offload="auto")
    o = e.plan["offload"]
    assert e.fits and o["auto"] and o["kind"] == "experts" and "fewest" in o["label"]
    n = int(o["amount"])
    less = ridgeline.estimate("openai/gpt-oss-120b", "RTX_4090", offload=f"experts:{n - 1}", allow_no_fit=True)
    assert not less.fits
    # it names the host it assumed and where the host terms come from
    assert o["host_assumed"] and "offload_fits.csv" in o["terms"]
    # a plan that fits keeps nothing on the host
    fits = ridgeline.estimate(LLAMA, "H100_SXM", offload="auto")
    assert fits.plan["offload"]["kind"] == "none" and "host" not in fits.memory


def test_auto_streams_the_fewest_gib_that_fit_under_vllm():
    e = ridgeline.estimate("Qwen/Qwen3-32B", "RTX_4090", runtime="vllm", offload="auto")
    o = e.plan["offload"]
    assert e.fits and o["kind"] == "stream-gb" and "fewest GiB" in o["label"]
    g = int(o["amount"])
    less = ridgeline.estimate("Qwen/Qwen3-32B", "RTX_4090", runtime="vllm", offload=f"stream-gb:{g - 1}",
                              allow_no_fit=True)  # fmt: skip
    assert not less.fits
    with pytest.raises(PlanError, match="auto needs a runtime that keeps weights on the host"):
        ridgeline.estimate("Qwen/Qwen3-32B", "RTX_4090", runtime="none", offload="auto")


def test_a_plan_too_large_even_with_every_expert_on_the_host_is_refused_saying_so():
    # DeepSeek-V3 in Q4_K_M: its attention, shared experts and three dense layers alone outgrow an
    # 8 GB card; with every expert on the host, the host's 192 GB are too small for the rest
    kw = {"runtime": "llamacpp-cuda", "weight_dtype": "q4_k_m"}
    with pytest.raises(DoesNotFitError, match="even with every MoE layer's experts"):
        ridgeline.estimate("deepseek-ai/DeepSeek-V3", "RTX_4060_TI_8GB", offload="auto", **kw)
    with pytest.raises(DoesNotFitError, match="GB in host memory but RYZEN_9_7950X holds 192 GB"):
        ridgeline.estimate("deepseek-ai/DeepSeek-V3", "RTX_4090", offload="experts:58", **kw)


def test_the_refusal_without_offload_names_it_as_the_way_out():
    with pytest.raises(DoesNotFitError, match="--offload auto"):
        ridgeline.estimate("openai/gpt-oss-120b", "RTX_4090")


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"offload": "experts:4"}, "no routed experts"),  # Llama is dense
        ({"offload": "experts:4", "runtime": "vllm"}, "llamacpp\\* runtimes offload"),
        ({"offload": "stream-gb:4", "runtime": "llamacpp-cuda"}, "vllm\\* and sglang\\* runtimes"),
        ({"offload": "gpu-layers:2.5"}, "whole number"),
        ({"offload": "layers:4"}, "auto, experts:N, gpu-layers:N or stream-gb:G"),
        ({"offload": "gpu-layers:8", "host": "PENTIUM"}, "not a host of data/hardware/hosts.csv"),
        ({"host": "RYZEN_9_7950X"}, "give --offload too"),
        ({"offload": "gpu-layers:8", "tp": 2}, "priced on one device"),
        ({"offload": "stream-gb:100", "runtime": "vllm"}, "exceeds the .* GB of layer weights"),
        ({"offload": "gpu-layers:8", "host": {"memory_bw_gbs": 50, "memory_gb": 64}}, "missing tflops_fp32"),
    ],
)
def test_an_offload_that_cannot_run_is_refused_naming_it(kw, match):
    with pytest.raises(PlanError, match=match):
        ridgeline.estimate(LLAMA, "H100_SXM", **{"runtime": "llamacpp-cuda", **kw})


def test_vllm_streams_its_offloaded_gib_over_the_link_every_pass():
    e = ridgeline.estimate(LLAMA, "H100_SXM", runtime="vllm", offload="stream-gb:4", prompt=8, output=65)
    (s,) = [r for r in e.breakdown_rows() if r["phase"] == "decode" and r["op"] == "host_weight_stream"]
    assert s["time_s"] == pytest.approx(64 * 4 * 2**30 / LINK, rel=1e-9)
    assert e.memory["host"]["weights_bytes"] == 4 * 2**30


def test_the_fit_is_the_shipped_one_and_every_ladder_falls_as_measured():
    from ridgeline.calibration import offload

    s = offload.summary(offload.parts())
    (row,) = csv.DictReader(ridgeline._data.read_text(offload.FITS).splitlines())
    assert float(row["eta_mem"]) == pytest.approx(s["eta_mem"], rel=1e-3)
    assert float(row["t_round_trip_us"]) == s["t_round_trip_us"]
    assert float(row["held_out_within_1_5x"]) == pytest.approx(s["held_out"]["within_1_5x"], abs=1e-4)
    # tok/s falls as experts move to the host, in every held-out ladder step, as it was measured
    assert s["ladders"] and all(lad["steps_agreeing"] == lad["steps"] for lad in s["ladders"])


def test_the_cli_names_the_experts_it_keeps_on_the_host():
    out = run("estimate", "-m", "openai/gpt-oss-120b", "-H", "RTX_4090", "--offload", "auto").stdout
    assert "offload      auto: experts:" in out and "(--n-cpu-moe " in out
    assert "host memory " in out and "GB of weights" in out
