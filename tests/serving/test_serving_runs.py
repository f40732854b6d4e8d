"""The production runtimes' measured serving runs (AIConfigurator silicon_calibration.csv): read as
they are, one record per measured metric, priced where a static plan can price them."""

import pytest
import ridgeline
from conftest import REPO
from ridgeline.calibration.decompose import decompose
from ridgeline.calibration.validate import predict_shipped, rows_summary
from ridgeline.catalog.benchmarks import import_file
from ridgeline.catalog.store import default_catalog

SILICON = REPO / "data" / "benchmarks" / "aic" / "silicon_calibration.csv"


@pytest.fixture(scope="module")
def rows():
    return import_file(str(SILICON), SILICON.read_text())


def test_one_record_per_metric_with_reasons(rows):
    assert len(rows) == 2 * 2969
    assert {r["metric"] for r in rows} == {"ttft_ms", "tpot_ms"}
    one = next(r for r in rows if r["id"].endswith(":tpot_ms") and r["model"] == "meta-llama/Llama-3.1-70B"
               and r["runtime"] == "vllm" and r["hardware"] == "H100_SXM")  # fmt: skip
    assert one["weight_quant"] == "fp8" and one["unit"] == "ms" and one["not_priced"] is None
    reasons = {r["not_priced"].split(":")[0] for r in rows if r["not_priced"]}
    assert "prefill/decode-disaggregated run (mode disagg)" in reasons
    assert "TTFT under concurrency (staggered arrivals, chunked prefill among running decodes)" in reasons
    # every TPOT row of a bundled model in agg mode is priced (attention DP and MoE TP x EP included)
    agg = [r for r in rows if r["metric"] == "tpot_ms" and r["model"] and "disagg" not in (r["not_priced"] or "")]
    # (+719: MiniMax-M2.5, Qwen3.5-397B-A17B, Kimi-K2.5 and GLM-5, priced since their configs ship), but
    # the 13 runs whose concurrency is stated twice and disagrees, and 5 disaggregated runs stating none
    unread = [r for r in agg if (r["not_priced"] or "").startswith("concurrency ")]
    assert sorted(r["not_priced"].split(":")[0].split(" (")[0] for r in unread) == (
        ["concurrency not stated"] * 5 + ["concurrency stated twice and disagreeing"] * 13)  # fmt: skip
    agg = [r for r in agg if r not in unread]
    assert len(agg) == 1599 + 59 + 719 - 13 and all(r["not_priced"] is None for r in agg)
    adp = [r for r in agg if r["flags"] and "attention_dp=" in r["flags"]]
    assert len(adp) == 59 + 79 and all(r["batch"] >= 1 for r in adp)  # +79 of the four models above
    # gpt-oss ships its own MXFP4 experts: AIC's nvfp4 label does not override them
    gpt = next(r for r in rows if r["model"] == "openai/gpt-oss-120b")
    assert gpt["weight_quant"] is None
    # DeepSeek's and MiniMax's NVFP4 runs ran NVIDIA's NVFP4 checkpoints, not the fp8 ones; their fp8
    # runs keep the checkpoint's own block-128 fp8
    labels = {(r["model"], r["weight_quant"]) for r in rows if r["model"] in ("deepseek-ai/DeepSeek-V3",
                                                                               "MiniMaxAI/MiniMax-M2.5")}  # fmt: skip
    assert ("deepseek-ai/DeepSeek-V3", "nvfp4") in labels and ("MiniMaxAI/MiniMax-M2.5", "nvfp4") in labels
    assert ("deepseek-ai/DeepSeek-V3", None) in labels and ("MiniMaxAI/MiniMax-M2.5", None) in labels


def test_tpot_is_the_plans_average_decode_step(rows):
    cat = default_catalog()
    r = next(r for r in rows if r["id"].endswith(":tpot_ms") and not r["not_priced"] and r["runtime"] == "vllm"
             and r["model"] == "Qwen/Qwen3-32B")  # fmt: skip
    (got,) = predict_shipped([decompose(r, cat)], cat)
    plan = {"batch": r["batch"], "prompt": r["prompt_tokens"], "output": r["output_tokens"], "tp": r["tp"]}
    e = ridgeline.estimate(r["model"], r["hardware"], runtime="vllm", weight_dtype=r["weight_quant"],
                           allow_no_fit=True, **plan)  # fmt: skip
    assert got["predicted"] == pytest.approx(e.tpot_s * 1e3, rel=1e-6)
    summary = rows_summary([got, {**got, "predicted": None, "reason": "x: y"}])
    (g,) = summary["groups"].values()
    assert g["rows"] == 1 and summary["not_priced"] == {"x": 1}


def test_the_concurrency_is_the_benchmarks_own_record_and_a_disagreement_is_a_reason(rows):
    import csv

    from ridgeline.catalog.benchmarks import silicon_concurrency

    def run(sc, bs, adp=""):
        src = "x=1" if sc is None else f"source; silicon_concurrency={sc}; measured=..."
        return silicon_concurrency({"silicon_data_source": src, "batch_size": bs, "attention_dp_size": adp})

    assert run(16, "16") == (16, None) and run(None, "24") == (24, None) and run(64, "") == (64, None)
    # attention DP: batch_size is one DP rank's batch, silicon_concurrency the benchmark's
    assert run(256, "64", "4") == (256, None) and run(64, "64", "64") == (64, None)
    assert run(224, "56") == (None, "concurrency stated twice and disagreeing: silicon_concurrency 224, "
                                    "batch_size 56, attention_dp_size blank")  # fmt: skip
    assert run(None, "")[1].startswith("concurrency not stated")
    # a shipped attention-DP run (MiniMax-M2.5 on B200, vLLM, 4 DP ranks of 64): each rank runs 64, not 16
    raw = list(csv.DictReader(SILICON.open()))
    i = next(i for i, x in enumerate(raw, start=2) if x["id"] == "minimaxm2_5_b200_vllm_fp8_agg_1024x1024_c256_cfg691")
    (tpot,) = [r for r in rows if r["id"] == f"silicon_calibration:{i}:tpot_ms"]
    assert tpot["batch"] == 64 and tpot["flags"] == "attention_dp=4" and "concurrency 256" in tpot["notes"]


def silicon_runs() -> list[dict[str, str]]:
    """The shipped serving runs' rows, as the file has them (row i is line i + 2)."""
    import csv

    return list(csv.DictReader(SILICON.open()))


def replay(tmp_path, picked: list[dict[str, str]]) -> list[dict]:
    """``serving_runs`` on a file of the ``picked`` rows of the shipped runs file."""
    import csv

    from ridgeline.calibration.validate import serving_runs

    f = tmp_path / "runs.csv"
    with f.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(picked[0]))
        w.writeheader()
        w.writerows(picked)
    return serving_runs(str(f))


def test_a_disaggregated_run_whose_worker_counts_are_blank_is_listed_with_that_reason(tmp_path):
    blank = [x for x in silicon_runs() if x["mode"] == "disagg" and not x["prefill_num_workers"]
             and "silicon_concurrency=" in x["silicon_data_source"]][:2]  # fmt: skip
    got = replay(tmp_path, blank)
    assert len(got) == 4 and all(g["predicted"] is None for g in got)
    assert {g["reason"] for g in got} == {
        "disaggregated run whose worker counts are not stated (prefill_num_workers and decode_num_workers blank)"
    }
