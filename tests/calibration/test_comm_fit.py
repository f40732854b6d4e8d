"""Measured collectives (issue 18): the AIConfigurator comm tables, the link measurements fitted
to them, and how well the engine's collective model then predicts them."""

import pytest
from conftest import REPO
from ridgeline import PlanError
from ridgeline.calibration.comm_fit import fit_links, holdout, links_csv
from ridgeline.calibration.kernels import comm_rows
from ridgeline.calibration.validate import comm_report
from ridgeline.catalog.store import default_catalog

ROOT = REPO
KERNELS = ROOT / "data" / "benchmarks" / "aic"


@pytest.fixture(scope="module")
def rows():
    return comm_rows(KERNELS)


def test_tables_read_with_their_units(rows):
    # 5 systems x (NCCL: 4 ops x 2 dtypes x 63 rows; 3 custom all-reduce tables of 69 or 138 rows)
    assert len(rows) == 4245
    one = next(r for r in rows if r["file"].startswith("h100_sxm/comm/nccl") and r["op"] == "all_reduce"
               and r["ranks"] == 8 and r["dtype"] == "half" and r["size_bytes"] == 2 * 268435456)  # fmt: skip
    # AIC: message_size 268435456 half elements = 512 MiB, latency 2.11106 ms
    assert one["hardware"] == "H100_SXM" and one["time_s"] == pytest.approx(2.11106e-3, rel=1e-9)
    eager = [r for r in rows if r["excluded"]]
    assert len(eager) == 690 and all("eager" in r["excluded"] for r in eager)
    with pytest.raises(PlanError, match="kernel tables"):
        comm_rows(ROOT / "no-such-folder")


def test_the_shipped_link_measurements_are_the_fit_of_the_shipped_tables(rows):
    # deterministic: the same tables give the same file, byte for byte
    assert links_csv(fit_links(rows)) == (ROOT / "data" / "hardware" / "link_collectives.csv").read_text()


def test_in_sample_each_collective_within_1_5x(rows):
    rep = comm_report(kernels=str(KERNELS))
    kernel = [r for r in rep["per_row"] if r["id"].endswith(tuple(f":{i}" for i in range(1000)))
              and "/comm/" in r["id"]]  # fmt: skip
    assert len(kernel) == 3555
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        mine = [r for r in kernel if r["op"] == op]
        share = sum(1 / 1.5 < r["obs_over_pred"] < 1.5 for r in mine) / len(mine)
        assert share >= 0.89, (op, share)
    # every size band of every collective has its median observed/predicted within 0.8-1.25
    for key, v in rep["summary"]["size_bucket"].items():
        if key.split()[0] in ("allreduce_busbw_gbs", "allgather_busbw_gbs", "reducescatter_busbw_gbs",
                              "alltoall_busbw_gbs"):  # fmt: skip
            assert 0.8 <= v["median_obs_over_pred"] <= 1.25, key


def test_held_out_devices_on_nvswitch_transfer_and_the_rest_say_why_not(rows):
    fits = fit_links(rows)
    held = {(h["hardware"], h["library"], h["op"]): h for h in holdout(rows, fits)}
    # A100 and B200 priced from the other NVSwitch parts' median: NCCL all-reduce >= 90% within 1.5x
    for dev in ("A100_SXM_80GB", "B200"):
        assert held[(dev, "nccl", "all_reduce")]["within_1_5x"] >= 0.9
    # H100's floor is half A100's and B200's: from their median it is predicted 1.4x too slow (the
    # finding the issue note reports), and the two PCIe parts differ by 7x at 8 ranks
    assert held[("H100_SXM", "nccl", "all_reduce")]["median_obs_over_pred"] < 0.8
    assert held[("L40S", "nccl", "all_reduce")]["within_1_5x"] < 0.9


def test_runtimes_use_their_own_all_reduce():
    import ridgeline

    kw = {"tp": 8, "batch": 1, "prompt": 128, "output": 16, "breakdown": True}
    per_call = {}
    for rt in ("vllm", "trtllm"):
        e = ridgeline.estimate("meta-llama/Llama-3.1-70B", "H100_SXM", runtime=rt, calibrated=False, **kw)
        ops = {(o["phase"], o["op"]): o["time_s"] for o in e.breakdown.to_dicts()}
        per_call[rt] = ops[("decode", "attn_allreduce")]
    # 80 layers x 15 decode steps of an 8192 x bf16 (16 KiB) all-reduce over 8 ranks, by each library's fit
    cat = default_catalog()
    for rt, want_lib in (("vllm", "vllm"), ("trtllm", "trtllm")):
        (f,) = [x for x in cat.get("H100_SXM").links
                if (x["library"], x["op"], x["ranks"]) == (want_lib, "all_reduce", 8)]  # fmt: skip
        one = (f["floor_us"] + 14 * f["latency_us"]) * 1e-6 + 1.75 * 16384 / (450e9 * 0.40 * f["bw_efficiency"])
        assert per_call[rt] == pytest.approx(80 * 15 * one, rel=1e-9), rt


def test_kernel_tables_stay_out_of_the_extension():
    from ridgeline import _data

    assert KERNELS.is_dir() and not _data.list_files("data/benchmarks/aic/")
    assert "data/hardware/link_collectives.csv" in _data.list_files("data/hardware/")
