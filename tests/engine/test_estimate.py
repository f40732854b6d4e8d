"""Estimates through the public API: closed forms, invariants over a sweep, error paths."""

import json
import math

import pytest
import ridgeline
from conftest import LLAMA
from ridgeline import DoesNotFitError, Model, PlanError, UnknownNameError, _data
from ridgeline.catalog.store import Catalog, default_catalog
from ridgeline.engine.result import BREAKDOWN_COLUMNS
from ridgeline.models.config import bundled_names


def test_default_plan_labels_and_closed_forms():
    e = ridgeline.estimate(LLAMA, "H100_SXM", runtime="none")
    assert e.runtime_note.startswith("none:")
    assert e.plan["batch"] == 1 and e.plan["prompt"] == 1024 and e.plan["output"] == 256 and e.plan["tp"] == 1
    assert e.calibration == "uncalibrated" and "optimistic bound" in e.calibration_note
    assert e.verified and not e.estimated and e.fits
    # Decode at batch 1 is memory-bound at eta 1: each step's time is its bytes over 3,350 GB/s.
    assert e.decode["time_s"] == pytest.approx(e.decode["bytes"] / 3350e9, rel=1e-12)
    assert e.tpot_s == pytest.approx(e.decode["time_s"] / 255, rel=1e-12)
    assert e.e2e_s == pytest.approx(e.ttft_s + 255 * e.tpot_s, rel=1e-12)
    assert e.throughput_tok_s == pytest.approx(256 / e.e2e_s, rel=1e-12)


def test_prefill_attention_is_the_causal_triangle_through_the_api():
    m = Model.from_config(LLAMA)
    for s in (1, 2, 128, 4096, 32768):
        e = ridgeline.estimate(m, "H100_SXM", prompt=s, output=1)
        att = e.breakdown.filter(e.breakdown["op"] == "attention")
        per_layer = att["flops"].sum() / m.num_layers
        assert per_layer == 4 * m.num_heads * m.head_dim * s * (s + 1) / 2


def test_breakdown_sums_to_the_phase_times():
    e = ridgeline.estimate(LLAMA, "H100_SXM", batch=8, prompt=2048, output=64, tp=2)
    df = e.breakdown
    assert set(df.columns) == set(BREAKDOWN_COLUMNS)
    for phase, total in (("prefill", e.ttft_s), ("decode", e.decode["time_s"])):
        assert df.filter(df["phase"] == phase)["time_s"].sum() == pytest.approx(total, rel=1e-12)
    assert df.filter(df["op"] == "attn_allreduce")["comm_s"].sum() > 0


def test_windowed_decode_reads_at_most_the_window():
    # Gemma-2-9B: local layers attend to 4096 keys, global layers to the whole context.
    m = Model.from_config("google/gemma-2-9b")
    e = ridgeline.estimate(m, "H100_SXM", prompt=8000, output=2, allow_no_fit=True, runtime="none")
    df = e.breakdown.filter((e.breakdown["phase"] == "decode") & (e.breakdown["op"] == "attention"))
    per_key = 2 * 8 * 256 * 2  # K and V rows of 8 kv heads x 256 in bf16
    by_group = {r["layer_group"]: r["bytes"] for r in df.to_dicts()}
    local = next(v for k, v in by_group.items() if "window 4096" in k)
    glob = next(v for k, v in by_group.items() if "full" in k)
    qo = 2 * 16 * 256 * 2  # Q in and O out
    assert local == pytest.approx(21 * (4096 * per_key + qo), rel=1e-12)
    assert glob == pytest.approx(21 * (8001 * per_key + qo), rel=1e-12)


def test_precision_rules():
    h = ridgeline.estimate(LLAMA, "H100_SXM", weight_dtype="fp8")
    p = Model.from_config(LLAMA).params
    # fp8 linear layers with one fp32 scale per tensor (q, k, v, o, gate_up, down in each of 32 layers);
    # the embedding table, LM head and norms stay in bf16
    want = (p["attention"] + p["ffn"]) * 1 + 32 * 6 * 4 + (p["embedding"] + p["lm_head"] + p["norms"]) * 2
    assert h.gemm_dtype == "fp8" and h.memory["weights_bytes"] == want
    a = ridgeline.estimate(LLAMA, "A100_SXM_80GB", weight_dtype="fp8")
    assert a.gemm_dtype == "bf16" and any("no fp8 path" in w for w in a.warnings)
    v = ridgeline.estimate(LLAMA, "V100_SXM2_32GB")
    assert v.gemm_dtype == "fp16" and any("fallback chain" in w for w in v.warnings)
    m = ridgeline.estimate(LLAMA, "M2_ULTRA")
    assert m.gemm_dtype == "fp32" and m.estimated
    kv8 = ridgeline.estimate(LLAMA, "H100_SXM", kv_dtype="fp8", prompt=8192)
    kv16 = ridgeline.estimate(LLAMA, "H100_SXM", prompt=8192)
    assert kv8.memory["kv_bytes"] * 2 == kv16.memory["kv_bytes"]


def test_sweep_every_model_device_batch_prompt_is_finite_and_physical():
    cat = default_catalog()
    models = []
    for name in bundled_names():
        m = Model.from_config(name)
        assert m.unpriced is None  # every layer kind the normaliser accepts is priced
        models.append(m)
    checked = refused = 0
    for m in models:
        for dev in cat.names():
            for batch in (1, 64):
                for prompt in (128, 8192):
                    if prompt + 256 > m.max_model_len:
                        with pytest.raises(PlanError, match="max_model_len"):
                            ridgeline.estimate(m, dev, batch=batch, prompt=prompt, breakdown=False)
                        refused += 1
                        continue
                    e = ridgeline.estimate(m, dev, batch=batch, prompt=prompt, allow_no_fit=True, breakdown=False)
                    vals = [e.ttft_s, e.tpot_s, e.e2e_s, e.throughput_tok_s, e.memory["total_bytes"]]
                    assert all(math.isfinite(v) and v > 0 for v in vals), (m.name, dev)
                    for ph in (e.prefill, e.decode):
                        assert ph["mfu"] <= 1.0 + 1e-12 and ph["mbu"] <= 1.0 + 1e-12, (m.name, dev, ph)
                    checked += 1
    assert checked > 5000 and refused > 0


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"batch": 0}, "batch"),
        ({"batch": -4}, "batch"),
        ({"prompt": 1.5}, "prompt"),
        ({"output": "many"}, "output"),
        ({"tp": 3}, "TP 3 does not divide the 32 attention heads"),
        ({"dtype": "int3"}, "unknown dtype"),
        ({"dtype": "fp8"}, "activations are computed"),
        ({"chunk": 0}, "chunk"),
        ({"prompt": 131000, "output": 1000}, "max_model_len 131072"),
        ({"kv_pad": 0}, "kv_pad"),
        ({"kv_skip_masked_tail": "yes"}, "kv_skip_masked_tail: must be True or False"),
        ({"decode_graphs": 1}, "decode_graphs: must be True or False"),
    ],
)
def test_invalid_plans_name_the_rule(kwargs, match):
    with pytest.raises(PlanError, match=match):
        ridgeline.estimate(LLAMA, "H100_SXM", **kwargs)


def test_unknown_names_list_closest():
    with pytest.raises(UnknownNameError, match="H100_SXM"):
        ridgeline.estimate(LLAMA, "H100_SMX")
    with pytest.raises(UnknownNameError, match="Llama-3.1-8B"):
        ridgeline.estimate("meta-llama/Llama-3.1-8C", "H100_SXM")


def test_does_not_fit_reports_the_shortfall():
    with pytest.raises(DoesNotFitError, match=r"short by [\d.]+ GB"):
        ridgeline.estimate("meta-llama/Llama-3.1-70B", "H100_SXM")
    e = ridgeline.estimate("meta-llama/Llama-3.1-70B", "H100_SXM", allow_no_fit=True)
    assert not e.fits and e.memory["shortfall_bytes"] > 60e9
    assert ridgeline.estimate("meta-llama/Llama-3.1-70B", "H100_SXM", tp=4).fits


def test_tp_without_a_link_is_refused():
    with pytest.raises(PlanError, match="link"):
        ridgeline.estimate(LLAMA, "TPU_V4", tp=2)


def test_to_dict_is_json_ready():
    import json

    d = ridgeline.estimate(LLAMA, "H100_SXM").to_dict(breakdown=True)
    s = json.loads(json.dumps(d))
    for k in (
        "ttft_s",
        "tpot_s",
        "e2e_s",
        "throughput_tok_s",
        "memory",
        "fits",
        "calibration",
        "verified",
        "estimated",
        "warnings",
        "breakdown",
        "prefill",
        "decode",
    ):
        assert k in s


def test_a_runtime_runs_the_plan_the_way_its_rows_were_priced():
    # llama.cpp (from its source, data/constants.csv): the prompt in n_ubatch = 512 token steps,
    # the KV view padded to 256 cells, a sliding-window ring of window + n_ubatch cells, and on
    # CUDA one-token decode steps replayed from a graph / masked tails skipped over several streams.
    def est(model, **kw):
        return ridgeline.estimate(model, "GB10", output=64, allow_no_fit=True, **{"prompt": 1024, **kw})

    def decode(e, col):
        return e.breakdown.filter(e.breakdown["phase"] == "decode")[col].sum()

    one = est("google/gemma-3-4b-it", runtime="llamacpp-cuda")
    p = one.plan
    assert (p["chunk"], p["swa_cache_extra"], p["kv_pad"], p["decode_graphs"], p["kv_skip_masked_tail"]) == (
        512, 512, 256, True, True)  # fmt: skip
    assert one.prefill["steps"] == 2  # 1024 prompt tokens, two ubatches
    assert decode(one, "launch_s") == 0 and decode(one, "launches") == 0
    # batch 4: the graph is not used (every kernel launched), four prompts in eight ubatches
    four = est("google/gemma-3-4b-it", runtime="llamacpp-cuda", batch=4)
    assert decode(four, "launches") > 0 and four.prefill["steps"] == 8
    # the masked-tail skip needs several streams and a wrapped ring (4096 > 1024 + 512 cells)
    for b, fewer in ((1, False), (2, True)):
        skip = {s: est("google/gemma-3-4b-it", runtime="llamacpp-cuda", batch=b, prompt=4096, kv_skip_masked_tail=s)
                for s in (True, False)}  # fmt: skip
        assert (decode(skip[True], "bytes") < decode(skip[False], "bytes")) == fewer
    assert not est("google/gemma-3-4b-it", runtime="llamacpp-cuda", flash_attention=False).plan["kv_skip_masked_tail"]
    # the run's -ub is the chunk, and the sliding-window ring follows it
    ub = est("google/gemma-3-4b-it", runtime="llamacpp-cuda", chunk=1024)
    assert ub.plan["swa_cache_extra"] == 1024 and ub.prefill["steps"] == 1
    assert set(ub.plan["from_runtime"]) == {"swa_cache_extra", "kv_pad", "kv_skip_masked_tail", "decode_graphs"}
    # Metal pads and prefills in ubatches but has no CUDA graphs
    metal = ridgeline.estimate(LLAMA, "M2_ULTRA", prompt=1024, output=64, runtime="llamacpp-metal")
    assert metal.plan["kv_pad"] == 256 and not metal.plan["decode_graphs"] and metal.prefill["steps"] == 2
    # a model without sliding windows does not list the ring among what the runtime shaped
    assert metal.plan["from_runtime"] == ("chunk", "kv_pad")
    # a value given wins; no runtime, or one that is not llama.cpp, runs the plain plan
    given = est("google/gemma-3-4b-it", runtime="llamacpp-cuda", decode_graphs=False, kv_pad=1, chunk=4096)
    assert given.plan["from_runtime"] == ("swa_cache_extra", "kv_skip_masked_tail") and given.prefill["steps"] == 1
    assert given.decode["time_s"] > one.decode["time_s"]
    for plain in (est(LLAMA, runtime="none"), est(LLAMA, runtime="trtllm")):
        p = plain.plan
        assert (p["chunk"], p["swa_cache_extra"], p["kv_pad"], p["decode_graphs"], p["kv_skip_masked_tail"]) == (
            None, 0, 1, False, False)  # fmt: skip
        assert p["from_runtime"] == () and plain.prefill["steps"] == 1


def test_a_plain_estimate_for_a_measured_row_is_priced_as_the_calibration_priced_it():
    # The plan the calibration prices a llama.cpp row with, less everything the runtime decides
    # (only the run's -ub kept, as --chunk), gives the same times through a plain estimate:
    # one row per (runtime, batch 1 or several, flash attention or not), windowed models included.
    from ridgeline.calibration.decompose import _estimate_kwargs, n_ubatch

    cat = default_catalog()
    q = "SELECT * FROM benchmarks WHERE runtime LIKE 'llamacpp%' AND not_priced IS NULL AND model IS NOT NULL"
    fields = ("chunk", "swa_cache_extra", "kv_pad", "kv_skip_masked_tail", "decode_graphs")
    seen = set()
    for r in sorted(cat.sql(q).to_dicts(), key=lambda r: ("gemma" not in r["model"], r["id"])):
        kw, _ = _estimate_kwargs(r, Model.from_config(r["model"]).max_model_len, cat)
        key = (r["runtime"], kw["batch"] > 1, kw["flash_attention"])
        if key in seen:
            continue
        seen.add(key)
        plain = {k: v for k, v in kw.items() if k not in fields}
        if "n_ubatch=" in (r["notes"] or ""):
            plain["chunk"] = n_ubatch(r)
        a, b = (ridgeline.estimate(r["model"], r["hardware"], breakdown=False, **x) for x in (kw, plain))
        assert a.plan == b.plan | {"from_runtime": a.plan["from_runtime"]}, r["id"]
        assert (a.prefill["time_s"], a.decode["time_s"]) == (b.prefill["time_s"], b.decode["time_s"]), r["id"]
    assert len(seen) >= 4, seen  # CUDA and Metal, batch 1 and several, with and without flash attention


def test_llamacpp_kv_padding_and_replayed_decode_graphs():
    # llama.cpp reads its KV view in multiples of 256 cells: one decode step after a 300-token
    # prompt attends 301 keys but reads 512, the same bytes as 512 keys read unpadded; a
    # 255-token prompt (256 keys) fills one tile exactly and reads no padding.
    def decode_attention_bytes(prompt, **kw):
        b = ridgeline.estimate(LLAMA, "GB10", prompt=prompt, output=2, runtime="none", **kw).breakdown
        return b.filter((b["op"] == "attention") & (b["phase"] == "decode"))["bytes"][0]

    padded = decode_attention_bytes(300, kv_pad=256)
    assert padded == decode_attention_bytes(511) and padded > decode_attention_bytes(300)
    assert decode_attention_bytes(255, kv_pad=256) == decode_attention_bytes(255) < padded
    assert decode_attention_bytes(256, kv_pad=256) == padded  # 257 keys: two tiles
    # A replayed CUDA graph drops exactly the decode launch overhead, nothing else.
    e = {g: ridgeline.estimate(LLAMA, "GB10", prompt=300, output=64, runtime="llamacpp-cuda", decode_graphs=g)
         for g in (False, True)}  # fmt: skip
    launch = e[False].breakdown.filter(e[False].breakdown["phase"] == "decode")["launch_s"].sum()
    assert launch > 0 and e[True].breakdown.filter(e[True].breakdown["phase"] == "decode")["launch_s"].sum() == 0
    assert e[False].decode["time_s"] - e[True].decode["time_s"] == pytest.approx(launch, rel=1e-9)
    assert e[False].prefill["time_s"] == e[True].prefill["time_s"]


def test_a_runtime_prices_only_the_devices_it_runs_on(tmp_path):
    from ridgeline.engine.fitted import default_runtime, shipped_fits
    from ridgeline.engine.runtimes import known_runtimes, runs_on, runtime_platforms

    cat = default_catalog()
    # every runtime ridgeline has data for says where it runs, and every measured or fitted
    # device of a runtime is one it runs on
    assert set(known_runtimes(cat)) <= set(runtime_platforms())
    q = ("SELECT DISTINCT runtime, hardware FROM benchmarks WHERE model IS NOT NULL AND hardware IS NOT NULL "
         "AND runtime IS NOT NULL")  # fmt: skip
    measured = cat.sql(q)
    pairs = list(measured.iter_rows()) + [(f["runtime"], f["hardware"]) for f in shipped_fits() if f["hardware"] != "*"]
    assert len(pairs) > 50 and all(runs_on(rt, cat.get(hw)) for rt, hw in pairs)
    # without --runtime the CLI describes a runtime that runs on the device, or the bound
    assert default_runtime(device=cat.get("M2_ULTRA"))[0] == "llamacpp-metal"
    assert default_runtime(device=cat.get("GB10"))[0] == "llamacpp-cuda"
    for dev in ("MI300X", "EPYC_9654", "TPU_V5E"):
        rt, why = default_runtime(device=cat.get(dev))
        assert rt is None and dev in why and "bound" in why
    # naming a runtime that does not run there is refused with the ones that do
    said = r"llamacpp-cuda does not run on M2_ULTRA \(Apple apple_soc\); runtimes that do: llamacpp-metal"
    with pytest.raises(PlanError, match=said):
        ridgeline.estimate("meta-llama/Llama-3.1-8B", "M2_ULTRA", runtime="llamacpp-cuda")
    with pytest.raises(PlanError, match="trtllm does not run on MI300X"):
        ridgeline.estimate("meta-llama/Llama-3.1-8B", "MI300X", runtime="trtllm")
    # a user's own device matches by vendor in any case
    p = tmp_path / "mine.csv"
    p.write_text("name,vendor,arch,family,kind,year,tflops_bf16,tflops_fp32,memory_gb,memory_bw_gbs,verified,source\n"
                 "MY_ADA,nvidia,ada,mine,gpu,2024,160,40,24,1000,false,test row\n")  # fmt: skip
    mine = Catalog(path=tmp_path / "mine.duckdb", extra=[p])
    e = ridgeline.estimate("meta-llama/Llama-3.1-8B", "MY_ADA", runtime="llamacpp-cuda", catalog=mine)
    assert e.calibration.startswith("runtime-profile (llamacpp-cuda")


def test_a_warm_estimate_is_the_cold_one_and_checks_what_it_is_given(tmp_path):
    # what a plan's numbers do not change is prepared once per process; a warm call answers as
    # the first did, and the cache never lets a value through that the full path refuses
    from ridgeline.engine.estimate import _PREPARED

    kw = dict(batch=8, prompt=2048, tp=2, runtime="llamacpp-cuda", chunk=512, kv_pad=256)
    _PREPARED.clear()
    cold = ridgeline.estimate("Qwen/Qwen3-30B-A3B", "H100_SXM", **kw)
    prepared = dict(_PREPARED)
    warm = ridgeline.estimate("Qwen/Qwen3-30B-A3B", "H100_SXM", **kw)
    assert _PREPARED == prepared and warm == cold and warm.to_dict(breakdown=True) == cold.to_dict(breakdown=True)
    assert warm.plan["chunk"] == 512 and warm.plan["runtime"] == "llamacpp-cuda" and warm.plan["batch"] == 8
    # equal values of another type (True == 1, 1 == 1.0) take the full path's checks
    for bad in (dict(chunk=True), dict(kv_pad=True), dict(flash_attention=1), dict(calibrated=1),
                dict(routing_skew=True), dict(batch=True), dict(tp=2.5)):  # fmt: skip
        with pytest.raises(PlanError):
            ridgeline.estimate("Qwen/Qwen3-30B-A3B", "H100_SXM", **{**kw, **bad})
    assert ridgeline.estimate("Qwen/Qwen3-30B-A3B", "H100_SXM", **{**kw, "chunk": 512.0}) == cold
    # a config file named by its path is read again when it changes
    cfg = tmp_path / "config.json"
    src = json.loads(_data.read_text("data/models/meta-llama--Llama-3.2-1B.json"))
    cfg.write_text(json.dumps(src))
    before = ridgeline.estimate(str(cfg), "H100_SXM")
    cfg.write_text(json.dumps({**src, "num_hidden_layers": 2 * src["num_hidden_layers"]}))
    after = ridgeline.estimate(str(cfg), "H100_SXM")
    assert after.params["total"] > before.params["total"] and after.tpot_s > before.tpot_s
    cfg.unlink()
    with pytest.raises(UnknownNameError, match="file not found"):
        ridgeline.estimate(str(cfg), "H100_SXM")
