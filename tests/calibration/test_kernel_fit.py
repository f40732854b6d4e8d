"""Production runtimes calibrated from their own kernels (issue 18): the shipped kernel fits are
the fit of the shipped tables, the fit's structure is the engine's, and the figures the issue
note reports."""

import numpy as np
import pytest
import ridgeline
from conftest import REPO
from fit_tables import assert_same_fit_table
from ridgeline.calibration.kernel_fit import (
    fit_production,
    gemm_batch,
    gemm_tables,
    holdout_rows,
    kernel_fits_csv,
    params,
    transfer,
)
from ridgeline.catalog.store import default_catalog

ROOT = REPO
KERNELS = ROOT / "data" / "benchmarks" / "aic"


@pytest.fixture(scope="module")
def fitted():
    return fit_production(KERNELS)


def test_the_shipped_kernel_fits_are_the_fit_of_the_shipped_tables(fitted):
    assert_same_fit_table(kernel_fits_csv(fitted), (ROOT / "data" / "calibration" / "kernel_fits.csv").read_text())
    from ridgeline.calibration.acceptance import holdout_csv

    held = holdout_csv(holdout_rows(transfer(KERNELS, fitted)))
    assert_same_fit_table(held, (ROOT / "data" / "calibration" / "kernel_holdout.csv").read_text())


def test_a_gemm_row_is_priced_as_the_engine_prices_the_gemm():
    # one H100 vLLM bf16 GEMM, by hand: 2mnk at 989.4 TFLOPS x eta_c against (kn + mk + mn) x 2 bytes
    # at 3,350 GB/s x eta_m, the larger plus the per-kernel floor
    (t,) = [t for t in gemm_tables(KERNELS) if (t["runtime"], t["hardware"], t["format"]) == ("vllm", "H100_SXM", None)]
    i = int(np.argmax((t["m"] == 4096) & (t["n"] == 8192) & (t["k"] == 8192)))
    m, n, k = t["m"][i], t["n"][i], t["k"][i]
    b = gemm_batch(
        {**t, **{c: t[c][i : i + 1] for c in ("m", "n", "k", "latency_ms")}}, default_catalog().get("H100_SXM")
    )
    got = b.predict(params(0.8, 0.7, 3.0))[0]
    want = 3e-3 + max(2 * m * n * k / (989.4e12 * 0.7), (k * n + m * k + m * n) * 2 / (3350e9 * 0.8)) * 1e3
    assert got == pytest.approx(want, rel=1e-9)


def test_figures_the_note_reports(fitted):
    rows = {(r["runtime"], r["hardware"], r["precision"]): r for r in fitted}
    # bf16 GEMMs: an efficiency and a per-kernel floor of a few microseconds
    for rt in ("vllm", "sglang", "trtllm"):
        r = rows[(rt, "H100_SXM", "*")]
        assert 0.7 < float(r["eta_compute"]) < 0.8 and 0.75 < float(r["eta_mem"]) < 0.85
        assert 2 < float(r["t_launch_us"]) < 5
    checks = {(t["runtime"], t["hardware"]): t for t in transfer(KERNELS, fitted)}
    # the step overhead and the front end are the replayed serving runs' (issue 44: one per plan in
    # every door): the device's own serving fit, else its runtime's profile of them
    from ridgeline.engine.fits import serving_fits

    serving = serving_fits()
    for (rt, hw, prec), r in rows.items():
        own = serving.get((rt, hw)) or serving[(rt, "*")]
        assert float(r["t_step_us"]) == pytest.approx(float(own["t_step_us"]), rel=1e-5), (rt, hw, prec)
        req = own["request_us"] or serving[(rt, "*")]["request_us"]
        assert float(r["t_request_us"]) == pytest.approx(float(req), rel=1e-5), (rt, hw, prec)
    # priced as a static decode step at that overhead, vLLM's TPOT runs land within 12% on B200 and
    # 15% on H100 (median) although a closed loop's prefills interrupt its decodes, which the
    # simulator prices (8.1% and 12.2%, `ridgeline validate --serving`)
    assert checks[("vllm", "B200")]["in_sample"]["medape"] < 0.13
    assert checks[("vllm", "H100_SXM")]["in_sample"]["medape"] < 0.16


def _table_row(phase, **cols):
    base = {
        "phase": phase,
        "kernel": "k",
        "file": "f",
        "batch": 4.0,
        "isl": 1.0,
        "step": 0.0,
        "heads": 32.0,
        "kv_heads": 8.0,
        "head_dim": 128.0,
        "window": 0.0,
        "kv_bytes": 2.0,
        "latency_ms": 1.0,
    }
    return {k: np.array([float(v)]) if k not in ("phase", "kernel", "file") else v for k, v in {**base, **cols}.items()}


def test_an_attention_row_is_priced_as_the_engine_prices_its_kernel():
    # Llama-3.1-8B (32 layers of 32 query and 8 KV heads of 128) on H100 at the bound: a prefill of
    # 4 x 1024 tokens and the one decode step at context 1025 after it, per layer, against the
    # attention tables' closed form for the same shapes
    from ridgeline.calibration.kernel_fit import attention_batch

    dev = default_catalog().get("H100_SXM")
    e = ridgeline.estimate("meta-llama/Llama-3.1-8B", "H100_SXM", batch=4, prompt=1024, output=2, runtime="none")
    b = e.breakdown
    for phase, row in (("prefill", _table_row("prefill", isl=1024)), ("decode", _table_row("decode", step=1025))):
        a = b.filter((b["phase"] == phase) & (b["op"] == "attention"))
        assert a["attention_kernel"].to_list() == [phase]
        c, m, items = attention_batch(row, dev)
        assert float(a["compute_s"][0]) / 32 == pytest.approx(c[0], rel=1e-12)
        assert float(a["memory_s"][0]) / 32 == pytest.approx(m[0], rel=1e-12)
        assert items[0] == 4 * 8


def test_a_fitted_attention_kernel_recovers_the_parameters_it_was_drawn_with():
    # a synthetic decode table from known parameters: the fit gives them back
    from ridgeline.calibration.kernel_fit import attention_batch, attention_time, fit_attention

    cat = default_catalog()
    dev = cat.get("H100_SXM")
    grid = [(b, L, h, kv) for b in (1, 16, 256, 2048) for L in (1, 64, 4096, 65536) for h, kv in ((32, 8), (64, 1))]
    t = {"phase": "decode", "kernel": "k", "file": "f",
         **{k: np.array([float(g[i]) for g in grid]) for i, k in enumerate(("batch", "step", "heads", "kv_heads"))},
         "isl": np.ones(len(grid)), "head_dim": np.full(len(grid), 128.0), "window": np.zeros(len(grid)),
         "kv_bytes": np.full(len(grid), 2.0)}  # fmt: skip
    x = [0.3, 0.75, 12.0, 0.025]
    t["latency_ms"] = attention_time(x, *attention_batch(t, dev)) * 1e3
    f = fit_attention(t, dev, cat)
    assert [f[k] for k in ("eta_compute", "eta_mem", "t_floor_us", "t_item_us")] == pytest.approx(x, rel=1e-3)
    assert f["within"] == 1.0 and f["pinned"] == []


def test_attention_figures_the_note_reports(fitted):
    from ridgeline.engine.fits import attention_of

    rows = {(r["runtime"], r["hardware"], r["precision"]): r for r in fitted}
    # vLLM on H100 (FlashAttention-3): a floor of ~13 us a call, ~0.028 us per sequence x KV head in
    # decode, decode reading the KV cache at ~73% of HBM bandwidth, prefill at ~44% of the bf16 peak
    a = attention_of(rows[("vllm", "H100_SXM", "*")])
    assert 12 < a["decode"]["t_floor_us"] < 14 and 0.02 < a["decode"]["t_item_us"] < 0.035
    assert 0.65 < a["decode"]["eta_mem"] < 0.8 and 0.4 < a["prefill"]["eta_compute"] < 0.5
    # an H200 has no tables: it takes H100's kernels through its own peaks
    h200 = ridgeline.estimate("meta-llama/Llama-3.1-8B", "H200_SXM", batch=8)
    assert any(k == "decode attention" for k, _ in h200.fitted)


def test_production_estimates_use_the_kernel_profile():
    e = ridgeline.estimate("meta-llama/Llama-3.1-70B", "H100_SXM", tp=4, weight_dtype="fp8", batch=16, output=1024)
    assert e.plan["runtime"] == "vllm" and e.calibration.startswith("calibrated (H100_SXM, vllm")
    # a device with no kernel tables takes its architecture's fit through its own peaks, and says so
    h200 = ridgeline.estimate("meta-llama/Llama-3.1-70B", "H200_SXM", tp=4)
    assert h200.calibration.startswith("architecture-profile (hopper: H100_SXM's vllm 0.24.0 fit")
    gb200 = ridgeline.estimate("meta-llama/Llama-3.1-70B", "GB200", tp=4)
    assert gb200.calibration.startswith("architecture-profile (blackwell: B200's vllm")
    # with no device of its architecture fitted, the runtime's profile (the devices' medians)
    mi = ridgeline.estimate("meta-llama/Llama-3.1-70B", "MI300X", tp=4, runtime="vllm")
    assert mi.calibration.startswith("runtime-profile (vllm 0.14.0, 0.24.0")


def test_a_folder_without_the_tables_is_a_typed_error(tmp_path):
    from ridgeline import PlanError
    from ridgeline.calibration.kernel_fit import measure, serving_rows

    with pytest.raises(PlanError, match="no vllm, sglang, trtllm GEMM tables"):
        measure(tmp_path)
    with pytest.raises(PlanError, match="no silicon_calibration.csv"):
        serving_rows(tmp_path, default_catalog())


def test_an_h200_is_priced_by_its_architectures_fit_within_the_envelope_of_its_own_kernels():
    # bf16 GEMMs timed on an H200 (benches/device/h200_kernels.py; no runtime tables hold one),
    # priced by H100's vLLM fit through the H200's own peaks, as an estimate prices them
    from ridgeline.calibration.kernel_fit import measured_holdout

    (g,) = [h for h in measured_holdout(ROOT / "data" / "benchmarks" / "measured") if h["kernel"].startswith("bf16")]
    assert g["hardware"] == "H200_SXM" and g["rows"] == 3680
    assert g["calibration"].startswith("architecture-profile (hopper: H100_SXM's vllm")
    assert g["within_1_5x"] > 0.85 and 0.9 < g["median"] < 1.15
