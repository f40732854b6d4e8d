"""Golden snapshots: the shipped panel matches the code, and a physics change shows."""

import pytest
from ridgeline import Catalog
from ridgeline.snapshot import diff, evaluate, load, load_expected, structure_version


def test_shipped_panel_matches_the_current_code():
    rep = diff(load("shipped"), load("current"))
    assert rep["changed"] == 0, rep["groups"][:5]


def test_a_changed_constant_fails_the_diff_until_declared(tmp_path):
    consts = tmp_path / "constants.csv"
    consts.write_text("name,value,unit,source,note\nnccl_beta_simple,0.5,fraction,test build,slower NCCL\n")
    changed = evaluate(Catalog(path=tmp_path / "c.duckdb", constants=consts))
    rep = diff(load("shipped"), changed)
    assert rep["undeclared"] > 0
    cells = {(c["model"], c["hardware"], c["tp"], c["column"]) for c in rep["cells"]}
    assert ("meta-llama/Llama-3.1-70B", "H100_SXM", 8, "ttft_s") in cells
    assert all(c["tp"] == 8 for c in rep["cells"])  # single-device plans do not communicate
    expected = tmp_path / "snapshot-expected.yaml"
    expected.write_text("changes:\n  - columns: ['*']\n    tp: [8]\n    why: NCCL Simple efficiency lowered\n")
    rep = diff(load("shipped"), changed, expected=load_expected(expected))
    assert rep["changed"] > 0 and rep["undeclared"] == 0
    narrow = tmp_path / "narrow.yaml"
    narrow.write_text("changes:\n  - columns: [ttft_s]\n    tp: [8]\n    why: only TTFT\n")
    assert diff(load("shipped"), changed, expected=load_expected(narrow))["undeclared"] > 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("changes:\n  - columns: [ttft_s]\n")
    with pytest.raises(ValueError, match="says why"):
        load_expected(bad)


def test_structure_version_ignores_catalog_numbers(tmp_path):
    extra = tmp_path / "h.csv"
    extra.write_text(
        "name,vendor,arch,family,kind,year,tflops_bf16,tflops_fp32,memory_gb,memory_bw_gbs,verified,source,override\n"
        "H100_SXM,NVIDIA,hopper,nvidia_dc_sxm,gpu,2022,800,60,80,3000,false,what-if,true\n"
    )
    a = structure_version()
    b = structure_version(Catalog(path=tmp_path / "x.duckdb", extra=[extra]))
    assert a == b and len(a) == 16
