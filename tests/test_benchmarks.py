"""Measured rows: every shipped file imported into the unified schema with its semantics."""

import csv
import io

import pytest
from ridgeline import CatalogError, _data
from ridgeline.benchmarks import COLUMNS, SIDE_FILES, exclusions, import_file, shipped_rows
from ridgeline.catalog import default_catalog

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
    for rid, reason in exclusions().items():
        assert rid in ids and reason
        assert ids[rid]["not_priced"].startswith("excluded:")


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
