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
from ridgeline.catalog import default_catalog
from ridgeline.collectives import FLAT_RING_NOTE, collective, parse_size
from ridgeline.validate import comm_report

MIB = 2**20


def test_hierarchical_allreduce_joint_case_by_hand():
    r = collective("allreduce", 12, 4 * MIB, "H100_SXM", devices_per_node=8, scaleout_gbs=50)
    assert r.nodes == 2 and r.hierarchical and r.topology.startswith("explicit")
    # 8-way intra reduce-scatter + 2-node ring all-reduce of M/8 + 8-way intra all-gather, by hand:
    rs = 7 / 8 * 4 * MIB / (450e9 * 0.85)  # 9.594 us on NVLink (Simple protocol)
    ar = 2 * (1 / 2) * (4 * MIB / 8) / (50e9 * 0.65)  # 16.131 us on the NIC (LL128 at 512 KiB)
    hand = rs + ar + rs
    assert r.time_s[0] == pytest.approx(hand, rel=0.01)


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
    assert r.busbw_gbs[0] == pytest.approx(0.85 * 450, rel=1e-9)  # approaches beta_simple x per-direction link
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
