"""Collectives and multi-device plans (spec 40): closed forms, invariants, measured rows."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import ridgeline
from ridgeline import PlanError
from ridgeline.calibration.validate import comm_report
from ridgeline.catalog.store import default_catalog
from ridgeline.engine.collectives import FLAT_RING_NOTE, collective, parse_size

MIB = 2**20


def _fit(dev: str, op: str, ranks: int, library: str = "nccl") -> dict:
    (row,) = [
        x for x in default_catalog().get(dev).links if (x["library"], x["op"], x["ranks"]) == (library, op, ranks)
    ]
    return row


def test_hierarchical_allreduce_joint_case_by_hand():
    r = collective("allreduce", 12, 4 * MIB, "H100_SXM", devices_per_node=8, scaleout_gbs=50)
    assert r.nodes == 2 and r.hierarchical and r.topology.startswith("explicit")

    # 8-way intra reduce-scatter + 2-node ring all-reduce of M/8 + 8-way intra all-gather, by hand,
    # the intra parts with H100's measured NCCL floor, per-hop latency and efficiency:
    def intra(op: str) -> float:
        f = _fit("H100_SXM", op, 8)
        return (f["floor_us"] + 7 * f["latency_us"]) * 1e-6 + 7 / 8 * 4 * MIB / (450e9 * 0.85 * f["bw_efficiency"])

    # 16.131 us on the NIC (LL128 at 512 KiB, nothing measured) and the catalog's NIC latency, NCCL's
    # 2.7 us an inter-node ring step, on each of the 2 (nodes - 1) steps
    ar = 2 * (1 / 2) * (4 * MIB / 8) / (50e9 * 0.65)
    hand = intra("reduce_scatter") + 2 * 1 * 2.7e-6 + ar + intra("all_gather")
    assert r.time_s[0] == pytest.approx(hand, rel=1e-9)
    # spec 40's joint case on a fabric with no measurement and no NIC latency: the bare closed form, within 1%
    bare = collective("allreduce", 12, 4 * MIB, "MI300X", devices_per_node=8, scaleout_gbs=50)
    rs = 7 / 8 * 4 * MIB / (448e9 * 0.85)  # MI300X: 896 GB/s Infinity Fabric aggregate, Simple protocol
    assert bare.time_s[0] == pytest.approx(rs + ar + rs, rel=0.01)


def test_every_device_with_a_nic_has_its_sourced_latency_and_a_node_spanning_plan_pays_it():
    cat = default_catalog()
    rows = cat.sql("select name, scaleout_latency_us from hardware where scaleout_bw_gbs is not null").to_dicts()
    assert len(rows) >= 7 and all(r["scaleout_latency_us"] == 2.7 for r in rows)
    query = """select name from hardware_sources where "column" = 'scaleout_latency_us'"""
    sourced = {r["name"] for r in cat.sql(query).to_dicts()}
    assert {r["name"] for r in rows} <= sourced
    # a 16-rank all-reduce of 64 bytes on two 8-GPU H100 nodes: the two inter-node ring steps pay it
    paid = collective("allreduce", 16, 64, "H100_SXM").time_s[0]
    free = collective("allreduce", 16, 64, "H100_SXM", scaleout_latency_us=0).time_s[0]
    assert paid - free == pytest.approx(2 * 2.7e-6, rel=1e-9)
    # and an estimate across nodes no longer warns that it leaves the term out
    e = ridgeline.estimate("meta-llama/Llama-3.1-70B", "H100_SXM", tp=16)
    assert not any("scale-out latency unknown" in w for w in e.warnings)


def test_measured_collectives_closed_form_per_rank_count():
    # floor + 2(n-1) hops + 2(n-1)/n M / (link x beta x efficiency of that rank count), for NCCL and
    # for vLLM's own all-reduce (the library a vllm plan uses)
    for lib, n, size in (("nccl", 2, 4096), ("nccl", 4, 64 * MIB), ("vllm", 8, 512 * 1024)):
        f = _fit("H100_SXM", "all_reduce", n, lib)
        beta = {4096: 0.40, 512 * 1024: 0.65, 64 * MIB: 0.85}[size]
        want = (f["floor_us"] + 2 * (n - 1) * f["latency_us"]) * 1e-6 + 2 * (n - 1) / n * size / (
            450e9 * beta * f["bw_efficiency"]
        )
        got = collective("allreduce", n, size, "H100_SXM", library=lib).time_s[0]
        assert got == pytest.approx(want, rel=1e-9), (lib, n, size)
    # 3 ranks take the 2-rank fit, 16 ranks on one fabric the 8-rank one
    f2, f8 = _fit("H100_SXM", "all_reduce", 2), _fit("H100_SXM", "all_reduce", 8)
    t3 = collective("allreduce", 3, 64 * MIB, "H100_SXM", devices_per_node=16).time_s[0]
    assert t3 == pytest.approx((f2["floor_us"] + 4 * f2["latency_us"]) * 1e-6
                               + 4 / 3 * 64 * MIB / (450e9 * 0.85 * f2["bw_efficiency"]), rel=1e-9)  # fmt: skip
    t16 = collective("allreduce", 16, 64 * MIB, "H100_SXM", devices_per_node=16).time_s[0]
    assert t16 == pytest.approx((f8["floor_us"] + 30 * f8["latency_us"]) * 1e-6
                                + 30 / 16 * 64 * MIB / (450e9 * 0.85 * f8["bw_efficiency"]), rel=1e-9)  # fmt: skip


def test_devices_without_measurements_take_their_vendor_and_fabric_median_and_say_so():
    import statistics

    cat = default_catalog()
    h200 = cat.get("H200_SXM")
    assert not h200.links_source_is_measured and "A100_SXM_80GB, B200, H100_SXM" in h200.links_source
    (row,) = [x for x in h200.links if (x["library"], x["op"], x["ranks"]) == ("nccl", "all_reduce", 8)]
    peers = [_fit(d, "all_reduce", 8) for d in ("A100_SXM_80GB", "B200", "H100_SXM")]
    for k in ("floor_us", "latency_us", "bw_efficiency"):
        assert row[k] == pytest.approx(statistics.median(p[k] for p in peers), rel=1e-12)
    r = collective("allreduce", 8, 4096, "H200_SXM")
    assert any("no measurement of this device" in n for n in r.notes)
    e = ridgeline.estimate("meta-llama/Llama-3.1-8B", "H200_SXM", tp=2)
    assert any("H200_SXM collectives: no measurement" in w for w in e.warnings)
    # a vendor with no measured device keeps the bare catalog link, and says its latency is missing
    mi = collective("allreduce", 8, 4096, "MI300X")
    assert cat.get("MI300X").links == () and any("alpha terms omitted" in n for n in mi.notes)
    with pytest.raises(PlanError, match="library: 'vllm' has no measurement for MI300X; accepted: nccl"):
        collective("allreduce", 8, 4096, "MI300X", library="vllm")


def test_group_sizes_and_flat_ring_note():
    r = collective("allreduce", 12, 4 * MIB, "MI300X")  # 8-GPU domain, no scale-out in the catalog
    assert r.nodes == 2 and not r.hierarchical and FLAT_RING_NOTE in r.notes
    one = collective("allreduce", 8, 4 * MIB, "H100_SXM")
    assert one.nodes == 1 and FLAT_RING_NOTE not in one.notes
    cat = collective("allreduce", 16, 4 * MIB, "H100_SXM")  # the catalog's DGX H100 NICs: 50 GB/s
    assert cat.hierarchical and cat.topology == "catalog"


def test_busbw_the_nccl_tests_way():
    r = collective("allreduce", 8, 2**30, "H100_SXM")
    assert r.busbw_gbs[0] == pytest.approx(r.algbw_gbs[0] * 2 * 7 / 8, rel=1e-12)
    f = _fit("H100_SXM", "all_reduce", 8)
    # approaches beta_simple x the measured efficiency x the per-direction link (the floor and
    # 14 hops are 0.6% of a 1 GiB all-reduce)
    assert r.busbw_gbs[0] == pytest.approx(0.85 * f["bw_efficiency"] * 450, rel=0.01)
    ag = collective("allgather", 4, 2**30, "H100_SXM")
    assert ag.busbw_gbs[0] == pytest.approx(ag.algbw_gbs[0] * 3 / 4, rel=1e-12)


def test_invariants_over_a_sweep():
    cat = default_catalog()
    sizes = [2**k for k in range(10, 35)]  # 1 KiB .. 16 GiB
    devices = [cat.get(n) for n in cat.names() if cat.get(n).scaleup_bw_gbs]
    assert len(devices) > 20
    for dev in devices:
        for ranks in (2, 3, 4, 8, 12, 16, 32, 64):
            for op in ("allreduce", "allgather", "reducescatter", "alltoall"):
                r = collective(op, ranks, sizes, dev)
                t = np.array(r.time_s)
                assert np.all(np.diff(t) >= 0), (dev.name, ranks, op)
                assert max(r.busbw_gbs) <= dev.scaleup_bw_gbs / 2 * (1 + 1e-12), (dev.name, ranks, op)


def test_measured_rows_never_beat_the_link_bound():
    rep = comm_report()
    assert rep["priced"] >= 150 and not rep["not_priced"]
    assert rep["unexplained_violations"] == []
    # the structural agreement per bucket and per setup exists and is physical
    for kind in ("size_bucket", "setup"):
        for v in rep["summary"][kind].values():
            assert 0 < v["median_obs_over_bound"] <= 1.05
    nccl = rep["summary"]["setup"]["allreduce_busbw_gbs: NVIDIA A100 (8x, single node) / 8 ranks / 1 node(s)"]
    assert 0.5 < nccl["median_obs_over_pred"] < 1.05


def test_sizes_parse_with_units():
    assert parse_size("4MiB") == 4 * MIB and parse_size("1GB") == 10**9 and parse_size("65536") == 65536
    with pytest.raises(PlanError, match="size"):
        parse_size("four megs")


def test_pipeline_and_data_parallel_through_the_api():
    m = "meta-llama/Llama-3.1-70B"
    two = ridgeline.estimate(m, "H100_SXM", tp=4, pp=2, batch=8)
    assert two.parallel["stage_layers"] == 40 and two.parallel["devices"] == 8
    assert two.parallel["round_s"] == pytest.approx(3 * two.parallel["stage_s"], rel=1e-12)  # (m + p - 1) x stage
    four = ridgeline.estimate(m, "H100_SXM", tp=4, pp=2, dp=4, batch=8)
    assert four.throughput_tok_s == pytest.approx(4 * two.throughput_tok_s, rel=1e-12)
    assert four.ttft_s == two.ttft_s
    with pytest.raises(PlanError, match="pipeline stages exceed"):
        ridgeline.estimate("meta-llama/Llama-3.2-1B", "H100_SXM", pp=17)


def _cli(*args):
    exe = Path(sys.executable).with_name("ridgeline")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "ridgeline.cli"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, env=os.environ.copy())


def test_collective_and_validate_commands():
    r = _cli("collective", "--op", "allreduce", "--ranks", "8", "--size", "4MiB", "--hardware", "H100_SXM")
    assert r.returncode == 0 and "busbw" in r.stdout and "4,194,304" in r.stdout
    r = _cli("collective", "--ranks", "8", "--hardware", "A100_SXM_80GB", "--sweep-sizes", "--json")
    rows = json.loads(r.stdout)["rows"]
    assert len(rows) == 31 and rows[-1]["size_bytes"] == 8 * 2**30
    assert _cli("collective", "--ranks", "8", "--hardware", "H100", "--op", "broadcastx").returncode == 2
    r = _cli("validate", "--comm", "--json", "--per-row")
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["unexplained_violations"] == []
    assert {"observed", "predicted", "bound", "hardware", "metric"} <= set(out["per_row"][0])
