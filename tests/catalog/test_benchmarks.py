"""Measured rows: every shipped file imported into the unified schema with its semantics."""

import csv
import io
import json
from pathlib import Path

import pytest
from ridgeline import CatalogError, _data
from ridgeline.catalog.benchmarks import COLUMNS, SIDE_FILES, exclusions, import_file, shipped_rows
from ridgeline.catalog.store import default_catalog

FILES = [f for f in _data.list_files("data/benchmarks/") if f.endswith(".csv") and not f.endswith(SIDE_FILES)]


@pytest.mark.parametrize("path", FILES)
def test_every_file_is_recognised_row_for_row_with_sources(path):
    n = len(list(csv.DictReader(io.StringIO(_data.read_text(path)))))
    rows = import_file(path)
    assert len(rows) == n
    assert all(r["source"] and r["metric"] and r["value"] is not None for r in rows)
    assert len({r["id"] for r in rows}) == n


_ROWS = []


def _rows():
    if not _ROWS:
        _ROWS.extend(shipped_rows())
    return _ROWS


def test_llama_bench_and_batched_bench_semantics():
    rows = [r for r in _rows() if r["file"].endswith("dgx_spark_official.csv")]
    tg = next(r for r in rows if "tg32 @ d4096" in (r["notes"] or "") and r["model"] == "openai/gpt-oss-20b")
    assert (tg["phase"], tg["output_tokens"], tg["depth"], tg["batch"]) == ("decode", 32, 4096, 1)
    assert tg["hardware"] == "GB10" and tg["runtime"] == "llamacpp-cuda" and tg["not_priced"] is None
    bb = next(r for r in rows if "batched" in (r["flags"] or "") and r["metric"] == "decode_tok_s" and r["batch"] > 1)
    assert bb["depth"] == 512 or bb["depth"] >= 512  # decode follows each sequence's own prompt of PP tokens
    times = [r for r in rows if r["metric"] in ("prefill_time", "decode_time")]
    assert times and all("throughput twin" in r["not_priced"] for r in times)


def test_layer_split_and_runtime_chosen_batches():
    x = [r for r in _rows() if r["file"].endswith("xiongjiedai_llama3.csv")]
    multi = [r for r in x if r["pp"] and r["pp"] > 1]
    assert multi and all(r["flags"] == "layer-split" and r["tp"] == 1 for r in multi)
    assert all("OOM" in r["not_priced"] for r in x if r["value"] == 0.0)
    t = [r for r in _rows() if r["file"].endswith("trtllm_throughput.csv")]
    assert sum(1 for r in t if r["not_priced"] and "runtime-chosen batch" in r["not_priced"]) == 230
    # a burst (every request sent at once: an infinite rate) is replayable only with its lengths;
    # the Lambda vLLM table states none, and none is assumed
    v = [r for r in _rows() if r["file"].endswith("vllm_benchmarks.csv") and r["prompt_tokens"] is None and r["model"]]
    why = "a burst of 320 requests at an infinite rate whose prompt and output lengths are not stated"
    assert len(v) == 26 and all(r["not_priced"].startswith(why) for r in v)
    g = [r for r in _rows() if r["metric"] == "gemm_tflops"]
    assert all(r["gemm_m"] and r["gemm_n"] and r["gemm_k"] for r in g)


def test_benchmarks_table_and_triage():
    cat = default_catalog()
    n = cat.sql("SELECT count(*) AS n FROM benchmarks")["n"][0]
    assert n == len(_rows())
    assert set(cat.sql("SELECT * FROM benchmarks LIMIT 1").columns) == set(COLUMNS)
    unpriced = cat.sql(_data.query("benchmarks_not_priced"))
    assert (
        unpriced["rows"].sum() == cat.sql("SELECT count(*) AS n FROM benchmarks WHERE not_priced IS NOT NULL")["n"][0]
    )
    assert cat.sql(_data.query("audit_benchmarks_beat_the_catalog")).height == 0


def test_unknown_format_is_refused():
    with pytest.raises(CatalogError, match="unrecognised benchmark format"):
        import_file("mine.csv", "a,b,c\n1,2,3\n")


def test_exclusions_name_existing_rows_and_say_why():
    ids = {r["id"]: r for r in _rows()}
    runs = Path(__file__).resolve().parents[2] / "data" / "benchmarks" / "aic" / "silicon_calibration.csv"
    serving = {r["id"]: r for r in import_file(str(runs), runs.read_text())}
    for rid, reason in exclusions().items():
        assert reason
        if rid.startswith("silicon_calibration:"):
            # a serving run's metric, which validate --serving lists with the reason (the H100
            # TensorRT-LLM disaggregated rig's TTFT floor: every one of its rows, TTFT only)
            assert rid in serving and serving[rid]["metric"] == "ttft_ms" and "TTFT floor" in reason
        else:
            assert rid in ids and ids[rid]["not_priced"].startswith("excluded:")


def test_priced_weights_match_the_gguf_sizes_llama_bench_lists():
    # benches/dgx-spark.md lists each GGUF's size (llama-bench's "size", GiB, two decimals): the
    # weight bytes the rows are priced with (model config x format or mixture) must give it back.
    from ridgeline import estimate

    raw = "data/benchmarks/llamacpp_dgx_spark_official.csv"
    raw_rows = csv.DictReader(io.StringIO(_data.read_text(raw)))
    listed = {(r["model"], r["quant"]): float(r["model_size_GiB"]) for r in raw_rows}
    priced = {r["notes"].split(";")[0].removeprefix("model "): (r["model"], r["weight_quant"]) for r in _rows()
              if r["id"].startswith("llamacpp_dgx_spark_official:") and r["model"]}  # fmt: skip
    assert len(listed) == 5 and {m for m, _ in listed} == set(priced)
    for (file_model, _), gib in listed.items():
        model, wq = priced[file_model]
        e = estimate(model=model, hardware="GB10", weight_dtype=wq, prompt=16, output=1, calibrated=False)
        assert abs(e.memory["weights_bytes"] / 2**30 / gib - 1) < 0.005, (file_model, wq, gib)


def test_llamacpp_rows_of_a_backend_without_a_runtime_are_not_priced_as_cuda():
    rows = [r for r in _rows() if r["file"].endswith("gpu_scoreboards.csv")]
    raw = list(csv.DictReader(io.StringIO(_data.read_text("data/benchmarks/llamacpp_gpu_scoreboards.csv"))))
    vulkan = [r for r, x in zip(rows, raw) if x["backend"] == "Vulkan"]
    assert len(vulkan) == 2 and all(r["runtime"] is None for r in vulkan)
    assert all(r["not_priced"].startswith("llama.cpp Vulkan backend: ridgeline has no runtime") for r in vulkan)
    cuda = [r for r, x in zip(rows, raw) if x["backend"] == "CUDA"]
    assert {r["runtime"] for r in cuda} == {"llamacpp-cuda"} and not any(r["not_priced"] for r in cuda)


def test_a_trtllm_serving_table_labels_each_metric_by_what_it_is():
    head = _data.read_text("data/benchmarks/trtllm_latency_serving.csv").splitlines()[0]
    src = "NVIDIA/TensorRT-LLM,docs/perf.md,abc"
    lines = [  # concurrency, request rate, metric, value, unit
        f"0.5,H100 80GB HBM3,1,1,FP8,LLaMA 3.1 70B,128,128,1,,ttft,26.0,ms,engine run,{src}",
        f"0.5,H100 80GB HBM3,1,1,FP8,LLaMA 3.1 70B,128,128,1,,mean_itl,6.5,ms,closed loop,{src}",
        f"0.5,H100 80GB HBM3,1,1,FP8,LLaMA 3.1 70B,128,128,8,,inter_token_latency,0.0071,s,closed loop,{src}",
        f"0.5,H100 80GB HBM3,1,1,FP8,LLaMA 3.1 70B,128,128,8,,ttft,0.09,s,closed loop,{src}",
        f"0.5,H100 80GB HBM3,1,1,FP8,LLaMA 3.1 70B,128,128,64,4.0,request_throughput,3.9,req/s,stream,{src}",
        f"0.5,H100 80GB HBM3,1,1,FP8,LLaMA 3.1 70B,128,128,64,,output_token_throughput,2400,tokens/s,loop,{src}",
        f"0.5,H100 80GB HBM3,1,1,FP8,LLaMA 3.1 70B,128,128,1,,p99_ttft,40,ms,engine run,{src}",
        f"0.5,H100 80GB HBM3,1,1,FP8,LLaMA 3.1 70B,128,128,1,,goodput,40,req/s,engine run,{src}",
    ]
    rows = import_file("serving.csv", "\n".join([head, *lines]) + "\n")
    got = [(r["metric"], r["value"], r["unit"], r["phase"]) for r in rows]
    assert got == [("ttft_ms", 26.0, "ms", "prefill"), ("tpot_ms", 6.5, "ms", "decode"),
                   ("tpot_ms", pytest.approx(7.1), "ms", "decode"), ("ttft_ms", pytest.approx(90.0), "ms", "prefill"),
                   ("request_throughput_req_s", 3.9, "req/s", "e2e"), ("throughput_tok_s", 2400.0, "tokens/s", "e2e"),
                   ("ttft_ms", 40.0, "ms", "prefill"), ("goodput", 40.0, "req/s", "e2e")]  # fmt: skip
    assert {r["model"] for r in rows} == {"meta-llama/Llama-3.1-70B"} and {r["hardware"] for r in rows} == {"H100_SXM"}
    why = [r["not_priced"] or "" for r in rows]
    assert why[:3] == ["", "", ""] and rows[2]["batch"] == 8  # TTFT at 1, TPOT at its concurrency: priced
    assert "TTFT under concurrency" in why[3] and "4.0 requests/s" in why[4] and "output token throughput" in why[5]
    assert "p99 statistic" in why[6] and "unrecognised metric 'goodput'" in why[7]


def test_validate_rows_prices_collectives_by_the_collective_model(tmp_path):
    from cli_in_process import run_main
    from ridgeline.calibration.validate import comm_report

    for name in ("op_allreduce_busbw.csv", "op_memory_link_bandwidth.csv"):
        p = tmp_path / name
        p.write_text(_data.read_text(f"data/benchmarks/{name}"))
        code, out, err = run_main("validate", "--rows", str(p), "--json")
        assert code == 0, err
        got = json.loads(out)
        shipped = {r["id"]: r for r in comm_report()["per_row"]}
        assert [x["id"] for x in got] == [r["id"] for r in import_file(f"data/benchmarks/{name}")]
        assert not any("model" in str(x.get("reason")) for x in got)
        priced = [x for x in got if x["predicted"] is not None]
        assert len(priced) >= 0.8 * len(got)
        for x in priced:  # the same figures as `validate --comm`
            assert x["predicted"] == pytest.approx(shipped[x["id"]]["predicted"], rel=1e-12)
            assert x["bound"] == pytest.approx(shipped[x["id"]]["bound"], rel=1e-12)
