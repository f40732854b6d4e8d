"""The serving simulator through its Python and CLI doors (spec 70). The event loop's own
invariants (conservation at random horizons, seeds, max_model_len rules, saturation) are tested
beside it in rust/src/serving/tests.rs; here: that the doors hand it the plan estimate prices, the
scheduler rows the runtimes' code gives, and refuse bad input by name."""

import json
import math

import polars as pl
import pytest
import ridgeline
from cli_in_process import run_main
from conftest import LLAMA, REPO
from ridgeline.catalog.store import default_catalog
from ridgeline.errors import PlanError
from ridgeline.serving.scheduler import SCHEDULER_FIELDS, scheduler_defaults
from ridgeline.serving.workload import parse_lengths


@pytest.mark.parametrize("runtime", ["vllm", "sglang", "trtllm"])
def test_one_client_gets_the_static_estimate_of_its_runtime(runtime):
    # one request at a time: TTFT is the estimate's prefill in the scheduler's token-budget
    # chunks after the front end, TPOT its decode at batch 1, both under the runtime's shipped
    # calibration: one step overhead and one front-end time in both doors
    s = ridgeline.simulate(LLAMA, "H100_SXM", concurrency=1, requests=3, prompt=3000, output=40, runtime=runtime)
    budget = s.scheduler["max_num_batched_tokens"]
    e = ridgeline.estimate(LLAMA, "H100_SXM", prompt=3000, output=40, runtime=runtime, chunk=budget)
    assert s.calibration == e.calibration and s.calibration_note == e.calibration_note
    assert s.ttft_s["mean"] == pytest.approx(e.ttft_s, rel=1e-9)
    assert s.tpot_s["mean"] == pytest.approx(e.tpot_s, rel=1e-9)
    # the front end given as none: the estimate's TTFT less its request_overhead row
    front = float(e.breakdown.filter(pl.col("op") == "request_overhead")["time_s"].sum())
    bare = ridgeline.simulate(LLAMA, "H100_SXM", concurrency=1, requests=3, prompt=3000, output=40, runtime=runtime,
                              request_overhead_us=0)  # fmt: skip
    assert front > 0 and bare.ttft_s["mean"] == pytest.approx(e.ttft_s - front, rel=1e-9)
    assert s.counts["completed"] == 3 and s.output_tokens == 120


def test_scheduler_rows_follow_the_runtimes_code():
    cat = default_catalog()
    # vLLM arg_utils: >= 70 GiB and not an A100 -> 8192 / 1024; else 2048 / 256
    h100, a100 = scheduler_defaults("vllm", cat.get("H100_SXM")), scheduler_defaults("vllm", cat.get("A100_SXM_80GB"))
    assert (h100["max_num_batched_tokens"], h100["max_num_seqs"], h100["block_size"]) == (8192, 1024, 16)
    assert (a100["max_num_batched_tokens"], a100["max_num_seqs"]) == (2048, 256)
    # SGLang memory_hook: 8192 below 160 GiB, 16384 above; prefill and decode in separate steps
    sg_h100, sg_b200 = scheduler_defaults("sglang", cat.get("H100_SXM")), scheduler_defaults("sglang", cat.get("B200"))
    assert (sg_h100["max_num_batched_tokens"], sg_b200["max_num_batched_tokens"]) == (8192, 16384)
    assert not sg_h100["mixed"] and sg_h100["block_size"] == 1
    trt = scheduler_defaults("trtllm", cat.get("H100_SXM"))
    assert trt["reserve_full"] and not trt["chunked_prefill"] and trt["fraction_of_free"] and trt["block_size"] == 32
    assert scheduler_defaults("llamacpp-cuda", cat.get("H100_SXM")) is None
    for row in (h100, a100, sg_h100, sg_b200, trt):
        assert set(SCHEDULER_FIELDS) <= set(row) and len(row["source"]) > 40


def test_a_seed_reproduces_the_result_and_another_seed_does_not():
    kw = {"rate": 20.0, "burstiness": 2.0, "requests": 300, "prompt": "lognormal:800:1.0", "output": "uniform:10:400"}
    a = ridgeline.simulate(LLAMA, "H100_SXM", seed=3, **kw).to_dict()
    b = ridgeline.simulate(LLAMA, "H100_SXM", seed=3, **kw).to_dict()
    c = ridgeline.simulate(LLAMA, "H100_SXM", seed=4, **kw).to_dict()
    assert a == b
    assert a["ttft_s"] != c["ttft_s"]


def test_goodput_and_records_agree():
    s = ridgeline.simulate(LLAMA, "H100_SXM", rate=30.0, requests=400, prompt="lognormal:2000:1:16:30000",
                           output="lognormal:200:1:2:4000", slo_ttft_ms=200, slo_tpot_ms=25, keep_requests=True,
                           sample_s=0.5)  # fmt: skip
    r = s.requests
    assert r.height == 400 and r["id"].to_list() == list(range(400))
    done = r.filter(pl.col("status") == "completed")
    tpot = (done["end_s"] - done["first_token_s"]) / (done["output_tokens"] - 1)
    ok = (done["ttft_s"] <= 0.2) & ((done["output_tokens"] == 1) | (tpot <= 0.025))
    assert s.good_requests == int(ok.sum())
    assert s.ttft_s["mean"] == pytest.approx(done["ttft_s"].mean(), rel=1e-9)
    assert s.output_tokens == int(r["output_tokens"].sum())
    # the series samples the queue every 0.5 s over the run, KV use a share
    assert s.series.height == math.floor(s.duration_s / 0.5) + 1
    assert s.series["kv_used"].min() >= 0.0 and s.series["kv_used"].max() <= 1.0


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"rate": 5.0, "concurrency": 2}, "exactly one of rate"),
        ({}, "exactly one of rate"),
        ({"rate": 0.0}, "rate"),
        ({"rate": 5.0, "prompt": "lognormal:3"}, "prompt: expected"),
        ({"rate": 5.0, "output": "uniform:50:20"}, "lo <= hi"),
        ({"rate": 5.0, "runtime": "llamacpp-cuda"}, "max_num_batched_tokens"),
        ({"rate": 5.0, "max_num_seqs": 0}, "max_num_seqs"),
        ({"rate": 5.0, "chunk": 512}, "chunk: not a simulate argument"),
        ({"rate": 5.0, "memory_fraction": 1.5}, "memory_fraction"),
        ({"rate": 5.0, "kv_blocks": 100}, "max_model_len"),
    ],
)
def test_bad_input_is_refused_by_name(kw, needle):
    with pytest.raises(PlanError, match=needle):
        ridgeline.simulate(LLAMA, "H100_SXM", requests=5, **kw)


def test_traces_are_read_with_their_prefixes(tmp_path):
    t = tmp_path / "t.csv"
    t.write_text("arrival_s,prompt_tokens,output_tokens,max_tokens\n0.0,100,5,\n0.5,200,10,4\n0.2,300,3,\n")
    s = ridgeline.simulate(LLAMA, "H100_SXM", trace=t, keep_requests=True)
    assert s.counts["injected"] == 3 and s.output_tokens == 5 + 4 + 3
    j = tmp_path / "t.jsonl"
    j.write_text("".join(f'{{"arrival_s": {10 * k}, "prompt_tokens": 3000, "output_tokens": 2, "prefix_id": 7, '
                         f'"prefix_tokens": 2048}}\n' for k in range(3)))  # fmt: skip
    s = ridgeline.simulate(LLAMA, "H100_SXM", trace=j)
    assert s.cached_tokens == 2 * 2048 and s.scheduler["prefix_caching"]
    assert ridgeline.simulate(LLAMA, "H100_SXM", trace=j, prefix_caching=False).cached_tokens == 0
    j.write_text('{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 2, "prefix_id": 7}\n')
    with pytest.raises(PlanError, match="prefix_id and prefix_tokens together"):
        ridgeline.simulate(LLAMA, "H100_SXM", trace=j)
    with pytest.raises(PlanError, match="give both"):
        ridgeline.simulate(LLAMA, "H100_SXM", rate=1.0, prefix_groups=3)
    bad = tmp_path / "b.csv"
    bad.write_text("arrival_s,prompt\n0,1\n")
    with pytest.raises(PlanError, match="lacks column"):
        ridgeline.simulate(LLAMA, "H100_SXM", trace=bad)


def test_length_specs():
    assert parse_lengths("prompt", 7, 100) == {"kind": "fixed", "value": 7}
    assert parse_lengths("prompt", "normal:50:5:10:90", 100) == {"kind": "normal", "mean": 50.0, "std": 5.0,
                                                                 "lo": 10, "hi": 90}  # fmt: skip


def test_cli_scenario_json_and_out(tmp_path):
    sc = tmp_path / "s.yaml"
    sc.write_text(f"model: {LLAMA}\nhardware: H100_SXM\nconcurrency: 8\nrequests: 40\nprompt: 500\noutput: 50\n")
    code, out, err = run_main("simulate", "--scenario", str(sc), "--json", "--seed", "2")
    assert code == 0, err
    d = json.loads(out)
    assert d["counts"]["completed"] == 40 and d["workload"]["seed"] == 2
    code, out, err = run_main("simulate", "--scenario", str(sc), "--out", str(tmp_path / "o"))
    assert code == 0, err
    assert pl.read_parquet(tmp_path / "o" / "requests.parquet").height == 40
    code, out, err = run_main("simulate", "--scenario", str(sc), "--out", str(tmp_path / "o"))
    assert code == 2 and "--force" in err
    sc.write_text("model: x\nhardware: H100_SXM\nrate: 1\nbogus: 3\n")
    code, out, err = run_main("simulate", "--scenario", str(sc))
    assert code == 2 and "bogus" in err


def test_serving_runs_replay_a_fixed_subset_through_the_simulator(tmp_path):
    # the first Qwen3-32B agg vLLM runs on H100 and one disagg SGLang run of the shipped file
    # (DeepSeek-R1, prefill and decode pools of TP 16), replayed: each priced run's TPOT is the
    # simulated measured requests' mean
    import csv
    import io

    from ridgeline.calibration.validate import serving_runs

    src = REPO / "data" / "benchmarks" / "aic" / "silicon_calibration.csv"
    rows = list(csv.DictReader(io.StringIO(src.read_text())))
    agg = [r for r in rows if (r["backend"], r["model_path"], r["system"], r["mode"], r["tp_size"])
           == ("vllm", "Qwen/Qwen3-32B", "h100_sxm", "agg", "2")][:2]  # fmt: skip
    # a disaggregated run stating its worker counts (one prefill and one decode worker, TP8 each)
    disagg = [r for r in rows if (r["mode"], r["backend"], r["system"], r["isl"]) == ("disagg", "sglang", "b200_sxm",
              "1024") and (r["prefill_num_workers"], r["decode_num_workers"]) == ("1", "1")][:1]  # fmt: skip
    f = tmp_path / "runs.csv"
    with f.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows([*agg, *disagg])
    recs = serving_runs(str(f))
    assert len(recs) == 6
    priced = [r for r in recs if r["predicted"] is not None]
    assert len(priced) == 6 and all(r["predicted"] > 0 for r in priced)
    r, run = priced[1], agg[0]
    c, isl, osl = int(r["concurrency"]), int(r["isl"]), int(r["osl"])
    s = ridgeline.simulate("Qwen/Qwen3-32B", "H100_SXM", concurrency=c, requests=12 * c, prompt=isl, output=osl,
                           runtime="vllm", tp=2, weight_dtype=run["gemm_quant_mode"] or None,
                           max_model_len=isl + osl, keep_requests=True)  # fmt: skip
    done = s.requests.filter(pl.col("id") >= 2 * c)
    tpot = ((done["end_s"] - done["first_token_s"]) / (done["output_tokens"] - 1)).mean()
    assert r["metric"] == "tpot_ms" and r["predicted"] == pytest.approx(tpot * 1e3, rel=1e-9)


def test_replicas_and_disaggregation_through_the_doors():
    kw = {"rate": 8.0, "requests": 300, "prompt": "lognormal:2000:0.8:16:16000", "output": "lognormal:200:0.8:2:2000",
          "max_model_len": 32768, "keep_requests": True}  # fmt: skip
    two = ridgeline.simulate(LLAMA, "H100_SXM", instances=2, router="least_kv", **kw)
    assert set(two.requests["instance"].to_list()) == {0, 1} and two.cluster["describe"].startswith("2 x TP 1")
    dis = ridgeline.simulate(LLAMA, "H100_SXM", prefill_instances=1, decode_instances=2, kv_link_gbs=25.0,
                             kv_link_latency_us=5.0, **kw)  # fmt: skip
    # every finished request moved its prompt's KV once: prompt x 128 KiB / 25 GB/s + 5 us each
    done = dis.requests.filter(pl.col("output_tokens") > 1)
    assert dis.transfers == dis.counts["completed"] == 300
    want = float((dis.requests["prompt_tokens"] * 131072 / 25e9 + 5e-6).sum())
    assert dis.transfer_s == pytest.approx(want, rel=1e-9)
    assert set(done["instance"].to_list()) <= {1, 2} and len(dis.kv_blocks) == 2
    # without a link given, a 1P+1D pair on one HGX board moves its KV over NVLink (450 GB/s a
    # direction), at the latency of a 2-rank NCCL all-gather at zero bytes measured on the H100
    # (floor 5.282 + one hop 0.9552 us, data/hardware/link_collectives.csv)
    nv = ridgeline.simulate(LLAMA, "H100_SXM", prefill_instances=1, decode_instances=1, **kw)
    want = float((nv.requests["prompt_tokens"] * 131072 / 450e9 + 6.2372e-6).sum())
    assert nv.transfer_s == pytest.approx(want, rel=1e-9)
    assert "2-rank NCCL all-gather" in nv.cluster["describe"] and nv.cluster["kv_fabric"] == "scale-up-nccl"
    # pools that span nodes (TP 8 + TP 8: two HGX boards) cross the NIC without flags (issue 42's
    # finding): each of the 8 ranks sends its eighth of the KV over its own NIC, 50 GB/s (DGX H100's
    # ConnectX-7 a GPU), with NCCL's 2.7 us an inter-node step
    nic = ridgeline.simulate(LLAMA, "H100_SXM", prefill_instances=1, decode_instances=1, tp=8, **kw)
    want = float((nic.requests["prompt_tokens"] * 131072 / 8 / 50e9 + 2.7e-6).sum())
    assert nic.transfer_s == pytest.approx(want, rel=1e-9) and nic.cluster["kv_fabric"] == "scale-out"
    with pytest.raises(PlanError, match="prefill_tp: only with"):
        ridgeline.simulate(LLAMA, "H100_SXM", prefill_tp=2, **kw)
    with pytest.raises(PlanError, match="router"):
        ridgeline.simulate(LLAMA, "H100_SXM", router="random", **kw)


def test_max_throughput_rows_replay_the_datasets_trtllm_bench_sent():
    # the first shipped offline max-throughput rows (TensorRT-LLM perf-overview, Llama-3.1-8B fp8,
    # 128/128: 30,000 requests at once) priced as the simulator's output rate of that dataset
    from ridgeline.calibration.validate import max_throughput_rows
    from ridgeline.catalog.benchmarks import trtllm_bench_requests

    assert trtllm_bench_requests()[(128, 128)] == 30000 and trtllm_bench_requests()[(20000, 2000)] == 1000
    recs = max_throughput_rows(limit=2)
    assert [r["hardware"] for r in recs] == ["H100_SXM", "L40S"] and all(r["predicted"] for r in recs)
    s = ridgeline.simulate("meta-llama/Llama-3.1-8B", "H100_SXM", concurrency=30000, requests=30000, prompt=128,
                           output=128, runtime="trtllm", weight_dtype="fp8", kv_dtype="fp8",
                           max_model_len=256)  # fmt: skip
    assert recs[0]["predicted"] == pytest.approx(s.output_tok_s, rel=1e-12)
    # measured 28,836.77 output tok/s; the replay lands within 1.5x of it
    assert 1 / 1.5 < recs[0]["observed"] / recs[0]["predicted"] < 1.5


def test_itl_histogram_counts_every_token_after_the_first(tmp_path):
    s = ridgeline.simulate(LLAMA, "H100_SXM", rate=10.0, requests=200, prompt="uniform:100:3000",
                           output="uniform:1:500", keep_requests=True, sample_s=0.5)  # fmt: skip
    produced = s.requests.filter(pl.col("output_tokens") > 0).height
    assert int(s.itl_hist["tokens"].sum()) == s.output_tokens - produced
    pytest.importorskip("matplotlib")
    from ridgeline.plot import rate_curve, simulation

    paths = simulation(s, str(tmp_path), "svg")
    assert [p.rsplit("/", 1)[1] for p in paths] == ["latency_cdf.svg", "queue_kv.svg"]
    code, out, err = run_main("simulate", "-m", LLAMA, "-H", "H100_SXM", "--rate", "2,8", "--requests", "100",
                              "--plot", str(tmp_path))  # fmt: skip
    assert code == 0, err
    lines = [x for x in out.splitlines() if x.strip()[:1].isdigit()]
    assert len(lines) == 2 and (tmp_path / "rate_curve.png").exists()
    with pytest.raises(PlanError, match="format"):
        rate_curve([s], str(tmp_path), "jpg")


def test_the_serving_step_fit_minimises_its_residual_and_is_held_out_across_devices(tmp_path):
    # a fixed subset of the shipped runs: vLLM Qwen3-32B TP2 on H100 and Llama-3.1-70B TP4 on B200
    import csv
    import io

    import numpy as np
    from ridgeline.calibration.validate import serving_runs, serving_step_fits

    src = REPO / "data" / "benchmarks" / "aic" / "silicon_calibration.csv"
    rows = list(csv.DictReader(io.StringIO(src.read_text())))
    pick = [r for r in rows if (r["backend"], r["system"], r["mode"]) == ("vllm", "h100_sxm", "agg")
            and r["model_path"] == "Qwen/Qwen3-32B" and r["tp_size"] == "2"][:4]  # fmt: skip
    pick += [r for r in rows if (r["backend"], r["system"], r["mode"]) == ("vllm", "b200_sxm", "agg")
             and r["model_path"] == "meta-llama/Llama-3.1-70B" and r["tp_size"] == "4"][:4]  # fmt: skip
    f = tmp_path / "runs.csv"
    with f.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(pick)
    fits = {r["hardware"]: r for r in serving_step_fits(str(f))}
    assert set(fits) == {"H100_SXM", "B200", "*"} and fits["H100_SXM"]["n_runs"] == 4
    assert fits["H100_SXM"]["transferred_to"] == "B200" and fits["B200"]["medape_transferred"] is not None
    # the fitted overhead, replayed for real as it was fitted (no front-end time), does no worse than 20% more or
    # less of it
    t = fits["H100_SXM"]["t_step_us"]

    def rms(step_us):
        got = [
            r
            for r in serving_runs(str(f), step_overhead_us=step_us, request_overhead_us=0.0, limit=4)
            if r["metric"] == "tpot_ms"
        ]
        return float(np.sqrt(np.mean([np.log(r["observed"] / r["predicted"]) ** 2 for r in got])))

    assert rms(t) <= min(rms(0.8 * t), rms(1.2 * t)) + 1e-3
    # the front-end overhead likewise, on the lightly loaded runs, at the fitted step overheads
    steps = {("vllm", h): fits[h]["t_step_us"] for h in ("H100_SXM", "B200")}
    light = int(ridgeline.Catalog().constant("fit_request_max_concurrency"))
    fitted = [h for h in ("H100_SXM", "B200") if fits[h]["request_us"] is not None]
    assert fitted and all(fits[h]["request_runs"] >= 1 for h in fitted)
    for h in fitted:
        u = fits[h]["request_us"]

        def rms_ttft(us, h=h):
            got = [r for r in serving_runs(str(f), step_overhead_us=steps, request_overhead_us=us, modes=("agg",),
                                           max_concurrency=light)
                   if r["metric"] == "ttft_ms" and r["hardware"] == h and r["predicted"]]  # fmt: skip
            return float(np.sqrt(np.mean([np.log(r["observed"] / r["predicted"]) ** 2 for r in got])))

        assert rms_ttft(u) <= min(rms_ttft(0.8 * u), rms_ttft(1.2 * u)) + 1e-3


def test_a_front_end_overhead_adds_to_ttft_and_e2e_only():
    kw = {"concurrency": 1, "requests": 3, "prompt": 1000, "output": 50, "runtime": "vllm"}
    a = ridgeline.simulate(LLAMA, "H100_SXM", request_overhead_us=0, **kw)
    b = ridgeline.simulate(LLAMA, "H100_SXM", request_overhead_us=40_000, **kw)
    assert b.ttft_s["mean"] == pytest.approx(a.ttft_s["mean"] + 0.04, rel=1e-9)
    assert b.e2e_s["mean"] == pytest.approx(a.e2e_s["mean"] + 0.04, rel=1e-9)
    assert b.tpot_s["mean"] == pytest.approx(a.tpot_s["mean"], rel=1e-12)
    assert b.calibration_note.endswith("request overhead given")
    with pytest.raises(PlanError, match="request_overhead_us"):
        ridgeline.simulate(LLAMA, "H100_SXM", request_overhead_us=-1, **kw)
    # by default a calibrated run takes its calibration's front end (the runtime's fit on the lightly
    # loaded serving runs), as the estimate does, which lists it among its fitted parameters
    from ridgeline._fmt import duration_us
    from ridgeline.engine.fits import serving_row

    row, _ = serving_row("vllm", "H100_SXM", "request_us")
    fit = (float(row["request_us"]),)
    assert fit[0] > 0
    d = ridgeline.simulate(LLAMA, "H100_SXM", **kw)
    assert d.ttft_s["mean"] == pytest.approx(a.ttft_s["mean"] + fit[0] / 1e6, rel=1e-9)
    e = ridgeline.estimate(LLAMA, "H100_SXM", runtime="vllm", prompt=1000, output=50)
    assert dict(e.fitted)["front end"] == f"{duration_us(fit[0])} per request, before its prefill"
    # the bound takes none
    u = ridgeline.simulate(LLAMA, "H100_SXM", calibrated=False, **kw)
    u0 = ridgeline.simulate(LLAMA, "H100_SXM", calibrated=False, request_overhead_us=0, **kw)
    assert u.ttft_s == u0.ttft_s


def test_max_rate_finds_where_the_slo_share_gives_way():
    from ridgeline.serving.capacity import max_rate

    kw = {"requests": 400, "prompt": "lognormal:1500:0.8", "output": "lognormal:200:0.8", "slo_ttft_ms": 500,
          "slo_tpot_ms": 30}  # fmt: skip
    rate, s = max_rate(LLAMA, "H100_SXM", share=0.9, **kw)
    assert s.workload["arrivals"]["rate"] == rate and s.good_requests >= 0.9 * s.finished
    # well past it the share falls below
    far = ridgeline.simulate(LLAMA, "H100_SXM", rate=1.5 * rate, **kw)
    assert far.good_requests < 0.9 * far.finished
    with pytest.raises(PlanError, match="needs an SLO"):
        max_rate(LLAMA, "H100_SXM", share=0.9, requests=10)
    code, out, err = run_main("simulate", "-m", LLAMA, "-H", "H100_SXM", "--max-rate", "0.9", "--requests", "400",
                              "--prompt", "lognormal:1500:0.8", "--output", "lognormal:200:0.8", "--slo-ttft-ms",
                              "500", "--slo-tpot-ms", "30")  # fmt: skip
    assert code == 0, err
    assert f"{rate:.3g} req/s" in out.splitlines()[0]


def test_progress_is_told_each_hundredth_and_its_errors_surface():
    seen = []
    s = ridgeline.simulate(LLAMA, "H100_SXM", concurrency=8, requests=500, prompt=200, output=20,
                           progress=lambda ended, total: seen.append((ended, total)))  # fmt: skip
    assert s.counts["completed"] == 500 and seen[-1] == (500, 500)
    ended = [e for e, _ in seen]
    # ends come 8 at a time here: a report whenever another 5 (a hundredth) have ended
    assert ended == sorted(ended) and len(seen) == len(set(ended)) >= 500 // 8 and all(t == 500 for _, t in seen)

    def stop(ended, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ridgeline.simulate(LLAMA, "H100_SXM", concurrency=8, requests=50, prompt=200, output=20, progress=stop)
    with pytest.raises(PlanError, match="progress"):
        ridgeline.simulate(LLAMA, "H100_SXM", concurrency=8, requests=5, progress=3)


def test_a_request_cut_at_the_length_limit_or_rejected_is_a_miss_never_left_out():
    # outputs of 200-400 tokens without a declared budget, under a 1,300-token limit: some are cut
    # (length-capped), and prompts of 1,300 or more are rejected; none of them is within the SLOs
    from ridgeline.serving.capacity import meets, miss

    s = ridgeline.simulate(LLAMA, "H100_SXM", rate=5.0, requests=300, prompt="uniform:800:1400",
                           output="uniform:200:400", declare_output=False, max_model_len=1300, slo_ttft_ms=10000,
                           slo_tpot_ms=1000)  # fmt: skip
    c = s.counts
    assert c["length_capped"] > 0 and s.rejected_causes["prompt_too_long"] > 0 and s.unfinished == 0
    assert s.good_requests == c["completed"] and s.within_slo == pytest.approx(c["completed"] / 300)
    assert not meets(s, 0.5)
    why = miss(s, 0.5)
    assert f"{s.rejected} of 300 requests rejected (prompt too long {s.rejected})" in why
    assert f"{c['length_capped']} length-capped" in why
    # a horizon that stops the clock leaves requests unfinished: a miss too
    h = ridgeline.simulate(LLAMA, "H100_SXM", rate=50.0, requests=300, horizon_s=2.0, slo_ttft_ms=10000)
    assert h.unfinished > 0 and not meets(h, 0.5) and f"{h.unfinished} unfinished at the horizon" in miss(h, 0.5)


def test_validate_serving_rows_prices_only_the_file_given_and_each_row_of_another_layout(tmp_path):
    import csv
    import io
    import json

    from conftest import run

    src = REPO / "data" / "benchmarks" / "aic" / "silicon_calibration.csv"
    rows = list(csv.DictReader(io.StringIO(src.read_text())))
    f = tmp_path / "runs.csv"
    with f.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(r for r in rows if (r["backend"], r["system"], r["tp_size"], r["mode"], r["isl"], r["batch_size"])
                    == ("vllm", "h100_sxm", "2", "agg", "1024", "4"))  # fmt: skip
    r = run("validate", "--serving", "--rows", str(f), "--json")
    got = json.loads(r.stdout)
    # the file's four runs only (two metrics a run): the shipped max-throughput rows are not appended
    assert r.returncode == 0 and len(got) == 8 and {g["mode"] for g in got} == {"agg"}, r.stderr
    assert sum(g["predicted"] is not None for g in got) == 8
    # a file in another layout (vLLM's benchmark tables): every row, priced or with why not
    v = tmp_path / "v.csv"
    v.write_text("".join((REPO / "data" / "benchmarks" / "vllm_benchmarks.csv").read_text().splitlines(True)[:5]))
    r = run("validate", "--serving", "--rows", str(v))
    assert r.returncode == 0 and "not in the serving-runs layout" in r.stderr, r.stderr
    assert "4 rows: a burst of 320 requests at an infinite rate" in r.stdout and "internal error" not in r.stderr


@pytest.mark.parametrize(
    "model, hardware, runtime, tp",
    [
        (LLAMA, "H100_SXM", "vllm", 1), (LLAMA, "H100_SXM", "sglang", 1), (LLAMA, "H100_SXM", "trtllm", 1),
        (LLAMA, "B200", "vllm", 1), (LLAMA, "B200", "sglang", 1), (LLAMA, "B200", "trtllm", 1),
        (LLAMA, "A100_SXM_80GB", "vllm", 1), (LLAMA, "L40S", "sglang", 1), (LLAMA, "H200_SXM", "trtllm", 1),
        ("Qwen/Qwen3-30B-A3B", "H100_SXM", "vllm", 2), ("meta-llama/Llama-3.1-70B", "B200", "sglang", 4),
        (LLAMA, "RTX_4090", "llamacpp-cuda", 1), (LLAMA, "M2_ULTRA", "llamacpp-metal", 1),
    ],
)  # fmt: skip
def test_a_lone_request_is_the_same_in_estimate_and_simulate(model, hardware, runtime, tp):
    # spec 70: at low load the simulator is the engine's estimate; one step overhead and one front end
    # (the calibration's) in both doors. llama.cpp has no scheduler defaults: its prompt step
    # (n_ubatch, 512) is given as the token budget
    sched = {"max_num_batched_tokens": 512, "max_num_seqs": 1, "block_size": 256} if "llamacpp" in runtime else {}
    e = ridgeline.estimate(model, hardware, runtime=runtime, tp=tp, prompt=1024, output=200)
    s = ridgeline.simulate(model, hardware, runtime=runtime, tp=tp, concurrency=1, requests=2, prompt=1024,
                           output=200, max_model_len=2048, **sched)  # fmt: skip
    assert e.calibration == s.calibration and e.basis != "bound"
    assert s.ttft_s["mean"] == pytest.approx(e.ttft_s, rel=1e-6)
    assert s.tpot_s["mean"] == pytest.approx(e.tpot_s, rel=1e-6)
    # the front end is in both, once: the estimate's breakdown shows it
    front = e.breakdown.filter(pl.col("op") == "request_overhead")
    assert ("llamacpp" in runtime) == front.is_empty()


def test_a_lone_disaggregated_request_is_prefill_transfer_hand_off_then_decode():
    # one client through a 1P+1D pair: the first token reaches the client from the decode instance
    # after the estimate's prefill (front end included), the KV's transfer (prompt x 128 KiB over
    # 50 GB/s + 20 us) and the hand-off; every other token is the decode instance's step
    kw = {"concurrency": 1, "requests": 2, "prompt": 3000, "output": 60, "runtime": "sglang", "max_model_len": 4096,
          "prefill_instances": 1, "decode_instances": 1, "kv_link_gbs": 50.0, "kv_link_latency_us": 20.0}  # fmt: skip
    s = ridgeline.simulate(LLAMA, "H100_SXM", kv_handoff_us=150_000, **kw)
    budget = s.scheduler["max_num_batched_tokens"]
    e = ridgeline.estimate(LLAMA, "H100_SXM", runtime="sglang", prompt=3000, output=60, chunk=budget)
    transfer = 3000 * 131072 / 50e9 + 20e-6 + 0.15
    assert s.transfer_s == pytest.approx(2 * transfer, rel=1e-12)
    assert s.ttft_s["mean"] == pytest.approx(e.ttft_s + transfer, rel=1e-9)
    assert s.tpot_s["mean"] == pytest.approx(e.tpot_s, rel=1e-9)
    assert "KV hand-off given" in s.calibration_note and "+ a 150 ms hand-off" in s.cluster["describe"]
    # by default the runtime's fit on its lightly loaded disaggregated runs, said in the note
    from ridgeline.engine.fits import serving_row

    row, _ = serving_row("sglang", "H100_SXM", "handoff_us")
    fitted = ridgeline.simulate(LLAMA, "H100_SXM", **kw)
    assert fitted.ttft_s["mean"] == pytest.approx(s.ttft_s["mean"] + float(row["handoff_us"]) * 1e-6 - 0.15, rel=1e-9)
    assert f"a KV hand-off of {float(row['handoff_us']) / 1e3:.3g} ms a transfer" in fitted.calibration_note
    # a runtime none of whose disaggregated runs was fitted counts none, and says so
    v = ridgeline.simulate(LLAMA, "H100_SXM", **{**kw, "runtime": "vllm"})
    assert "no KV hand-off counted: no disaggregated run of vllm was fitted" in v.calibration_note
    # the basis is a field, as recommend reads it
    assert [x.cluster["kv_handoff_basis"] for x in (s, fitted, v)] == ["given", "fitted", "none"]
    with pytest.raises(PlanError, match="kv_handoff_us: only with prefill_instances"):
        ridgeline.simulate(LLAMA, "H100_SXM", concurrency=1, requests=2, kv_handoff_us=5)
    with pytest.raises(PlanError, match="kv_handoff_us: must be a finite number >= 0"):
        ridgeline.simulate(LLAMA, "H100_SXM", kv_handoff_us=-1, **kw)


def test_a_kv_transfer_takes_the_fastest_link_the_two_pools_share():
    # GB300 NVL72: a TP-4 prefill and a TP-4 decode instance fit the rack's 72-GPU NVLink domain,
    # so each rank's shard of the prompt's KV (4000 tokens x 32 KiB: 2 of 8 KV heads) crosses
    # NVLink at 900 GB/s a direction (half the catalog's 1,800 bidirectional); 10 + 10 instances
    # (80 devices) do not fit it and cross the ConnectX-8 NIC at 100 GB/s. The catalog has no
    # latency for either link, so one is given, and without it the error says which link lacks it
    kw = {"concurrency": 1, "requests": 2, "prompt": 4000, "output": 20, "runtime": "trtllm", "tp": 4,
          "kv_link_latency_us": 2.0, "kv_handoff_us": 0, "max_model_len": 8192}  # fmt: skip
    rack = ridgeline.simulate(LLAMA, "GB300", prefill_instances=1, decode_instances=1, **kw)
    assert rack.transfer_s == pytest.approx(2 * (4000 * 32768 / 900e9 + 2e-6), rel=1e-12)
    assert "KV over the scale-up link (NVLink), 900 GB/s" in rack.cluster["describe"]
    out = ridgeline.simulate(LLAMA, "GB300", prefill_instances=10, decode_instances=10, **kw)
    assert out.transfer_s == pytest.approx(2 * (4000 * 32768 / 100e9 + 2e-6), rel=1e-12)
    assert out.cluster["kv_fabric"] == "scale-out"
    kw["kv_link_latency_us"] = None
    # without a latency, NVLink's is a 2-rank NCCL all-gather's at zero bytes: GB300 has none
    # measured, so the median of the measured NVIDIA devices (floor 8.669 + hop 1.006 us); the NIC's
    # is the catalog's, NCCL's 2.7 us an inter-node step (tuning.cc hwLat NET, ring LL)
    rack = ridgeline.simulate(LLAMA, "GB300", prefill_instances=1, decode_instances=1, **kw)
    assert rack.transfer_s == pytest.approx(2 * (4000 * 32768 / 900e9 + 9.675e-6), rel=1e-12)
    out = ridgeline.simulate(LLAMA, "GB300", prefill_instances=10, decode_instances=10, **kw)
    assert out.transfer_s == pytest.approx(2 * (4000 * 32768 / 100e9 + 2.7e-6), rel=1e-12)
    # a rack whose NIC the catalog does not hold (GB200: no scale-out bandwidth): the error says which link lacks what
    with pytest.raises(PlanError, match="no scale-out bandwidth and latency in the catalog .* do not fit one scale-up"):
        ridgeline.simulate(LLAMA, "GB200", prefill_instances=10, decode_instances=10, **kw)


def test_pipeline_stages_run_as_virtual_engines_and_a_lone_request_takes_the_static_estimate():
    # Llama-3.1-70B on 4 H100s as TP 2 x PP 2: a lone request passes every stage and the send
    # between them, the estimate's latency, in both doors; the instance is two virtual engines
    # each with half its KV blocks (vLLM v0), and counts 4 devices
    kw = {"tp": 2, "pp": 2, "prompt": 1024, "output": 100, "runtime": "vllm"}
    e = ridgeline.estimate("meta-llama/Llama-3.1-70B", "H100_SXM", **kw)
    s = ridgeline.simulate("meta-llama/Llama-3.1-70B", "H100_SXM", concurrency=1, requests=2, max_model_len=2048, **kw)
    assert s.ttft_s["mean"] == pytest.approx(e.ttft_s, rel=1e-9)
    assert s.tpot_s["mean"] == pytest.approx(e.tpot_s, rel=1e-9)
    assert s.devices == 4 and "TP 2 x PP 2" in s.cluster["describe"] and "a pipeline virtual engine" in s.summary()
    with pytest.raises(PlanError, match="attention DP within pipeline stages is not simulated"):
        ridgeline.simulate("Qwen/Qwen3-30B-A3B", "H100_SXM", pp=2, attention_dp=2, ep=2, concurrency=1, requests=1)
    code, out, err = run_main("simulate", "-m", LLAMA, "-H", "H100_SXM", "--pp", "2", "--concurrency", "4",
                              "--requests", "8")  # fmt: skip
    assert code == 0 and "TP 1 x PP 2" in out, err
