"""The catalog: traps of spec 10 pinned to datasheet figures, constraints, audits."""

import pytest
import ridgeline
from cli_in_process import run_main
from ridgeline import Catalog, CatalogError, UnknownNameError, _data
from ridgeline.catalog.export import EXPORT_COMMAND, EXPORT_FILE, engine_export_text
from ridgeline.catalog.store import default_catalog

REQUIRED = [
    "H100_SXM",
    "H100_PCIE",
    "H200_SXM",
    "GH200_96GB",
    "B200",
    "GB200",
    "A100_SXM_40GB",
    "A100_SXM_80GB",
    "L4",
    "L40S",
    "A10",
    "V100_SXM2_32GB",
    "RTX_3090",
    "RTX_4090",
    "RTX_5090",
    "RTX_PRO_6000",
    "GB10",
    "MI250X",
    "MI300X",
    "MI325X",
    "MI355X",
    "GAUDI2",
    "GAUDI3",
    "TPU_V4",
    "TPU_V5E",
    "TPU_V5P",
    "TPU_V6E",
    "M2_ULTRA",
    "M3_MAX",
    "M4_MAX",
]


@pytest.fixture(scope="module")
def cat():
    return default_catalog()


def test_required_devices_present(cat):
    names = set(cat.names())
    assert len(names) >= 30
    assert not [n for n in REQUIRED if n not in names]


def test_sparse_trap_h100_and_family(cat):
    # NVIDIA H100 datasheet: 1,979 TFLOPS bf16 is "with sparsity"; dense is 989.4.
    for n in ("H100_SXM", "H200_SXM", "GH200_96GB"):
        assert cat.get(n).tflops_bf16 == 989.4
    assert cat.get("H100_PCIE").tflops_bf16 == 756.5  # 1,513 sparse / 2
    assert cat.get("L4").tflops_bf16 == 121  # 242 sparse / 2


def test_geforce_accumulate_trap(cat):
    # Ada whitepaper: RTX 4090 bf16 (fp32 accumulate) 165.2; 330.3 only with fp16 accumulate.
    d = cat.get("RTX_4090")
    assert d.tflops_bf16 == 165.2
    assert d.tflops_fp16 == 165.2
    assert d.tflops_fp16_acc16 == 330.3


def test_blackwell_and_per_chip_traps(cat):
    assert cat.get("B200").tflops_bf16 == 2250  # 4,500 is FP8 dense
    assert cat.get("B200").tflops_fp8 == 4500
    assert cat.get("B100").tflops_bf16 == 1750
    # TPU v4: 275 TFLOPS bf16 per chip, 32 GiB per chip (Google Cloud TPU v4 docs).
    v4 = cat.get("TPU_V4")
    assert v4.tflops_bf16 == 275
    assert v4.memory_gb == pytest.approx(32 * 2**30 / 1e9, abs=0.01)
    assert cat.get("TPU_V3").tflops_bf16 == 123  # per chip, not the 420 TF 4-chip board
    # MI250X: datasheet figures are per package of two GCDs; one device is one GCD.
    gcd, pkg = cat.get("MI250X"), cat.get("MI250X_PACKAGE")
    assert gcd.tflops_bf16 == 191.5 and pkg.tflops_bf16 == 383
    assert gcd.memory_gb * 2 == pkg.memory_gb


def test_derived_gb10_is_unverified_with_its_derivation(cat):
    d = cat.get("GB10")
    assert d.tflops_bf16 == 125 and not d.verified
    assert "1 PFLOP FP4 with sparsity" in d.source


def test_every_verified_row_has_a_source(cat):
    df = cat.sql("SELECT name FROM hardware WHERE verified AND (source IS NULL OR source = '')")
    assert df.height == 0
    assert cat.sql("SELECT count(*) AS n FROM hardware WHERE verified")["n"][0] > 10


def test_shipped_audits_pass(cat):
    results = cat.audit()
    assert {r[0] for r in results} >= {
        "audit_dtype_ratios",
        "audit_generation_order",
        "audit_duplicate_devices",
        "audit_unsourced_verified",
        "audit_unsourced_constants",
        "audit_bin_derivations",
    }
    failing = {name: df.to_dicts() for name, _, must, df in results if must and df.height}
    assert failing == {}


def _extra(tmp_path, rows, override=False):
    header = (
        "name,vendor,arch,family,kind,year,tflops_bf16,tflops_fp8,tflops_fp32,memory_gb,memory_bw_gbs,verified,source"
    ) + (",override" if override else "")
    p = tmp_path / "extra.csv"
    p.write_text(header + "\n" + "\n".join(rows) + "\n")
    return p


def test_audits_catch_a_sparse_figure_and_a_generation_inversion(tmp_path):
    p = _extra(
        tmp_path,
        [
            "H100_SPARSE,NVIDIA,hopper,nvidia_dc_sxm,gpu,2023,1979,3958,66.9,80,3350,false,test row",
        ],
    )
    c = Catalog(path=tmp_path / "c.duckdb", extra=[p])
    res = {n: df for n, _, _, df in c.audit()}
    assert "H100_SPARSE" in res["audit_dtype_ratios"]["name"].to_list()
    p2 = _extra(tmp_path, ["B200_SLOW,NVIDIA,blackwell,nvidia_dc_sxm,gpu,2026,900,1800,30,180,7700,false,test row"])
    c2 = Catalog(path=tmp_path / "c2.duckdb", extra=[p2])
    res2 = {n: df for n, _, _, df in c2.audit()}
    assert "B200_SLOW" in res2["audit_generation_order"]["name"].to_list()


def test_binned_parts_scale_their_parent_by_core_count(cat, tmp_path):
    # M1 Max: 32-core GPU 10.4 TFLOPS (Apple, Oct 2021); the 24-core bin has 24/32 of the ALUs, same memory.
    row = cat.sql("SELECT tflops_fp32, memory_bw_gbs FROM hardware WHERE name = 'M1_MAX_24C'").row(0)
    assert row == pytest.approx((10.4 * 24 / 32, 400.0))
    # A bin that copies its parent's top-bin figure is caught.
    # replacing a shipped bin's row takes an explicit override
    p = _extra(
        tmp_path, ["M2_MAX_30C,Apple,apple_gpu,apple_max,apple_soc,2023,,,13.6,64,400,false,test row,true"], True
    )
    res = {n: df for n, _, _, df in Catalog(path=tmp_path / "bins.duckdb", extra=[p]).audit()}
    assert res["audit_bin_derivations"]["name"].to_list() == ["M2_MAX_30C"]


def test_a_bin_with_a_narrower_memory_bus_scales_its_bandwidth(cat, tmp_path):
    # M3 Max: 40-core GPU on a 512-bit bus, 400 GB/s; the 30-core bin keeps 384 bits: 300 GB/s (Apple, Oct 2023).
    row = cat.sql("SELECT tflops_fp32, memory_bw_gbs FROM hardware WHERE name = 'M3_MAX_30C'").row(0)
    assert row == pytest.approx((14.32 * 30 / 40, 400.0 * 384 / 512))
    # the same bin holding its parent's full-bus bandwidth is caught
    p = _extra(
        tmp_path, ["M3_MAX_30C,Apple,apple_gpu,apple_max,apple_soc,2023,,,10.74,96,400,false,test row,true"], True
    )
    res = {n: df for n, _, _, df in Catalog(path=tmp_path / "bus.duckdb", extra=[p]).audit()}
    assert res["audit_bin_derivations"]["name"].to_list() == ["M3_MAX_30C"]


def test_constraints_name_the_bad_row(tmp_path):
    p = _extra(tmp_path, ["BROKEN,X,hopper,f,gpu,2024,100,,10,80,-5,false,x"])
    with pytest.raises(CatalogError, match=r"extra\.csv:2 \(BROKEN\)"):
        Catalog(path=tmp_path / "bad.duckdb", extra=[p])
    p = _extra(tmp_path, ["NOPEAK,X,hopper,f,gpu,2024,,,,80,100,false,x"])
    with pytest.raises(CatalogError, match="NOPEAK"):
        Catalog(path=tmp_path / "bad2.duckdb", extra=[p])


def test_user_device_is_estimable_and_changes_rebuild(tmp_path):
    p = _extra(tmp_path, ["MY_GPU,Acme,hopper,acme,gpu,2025,500,1000,35,96,2000,false,my measurements"])
    c = Catalog(extra=[p])
    e = ridgeline.estimate("meta-llama/Llama-3.1-8B", "my_gpu", catalog=c)
    assert e.hardware == "MY_GPU" and e.estimated
    p.write_text(p.read_text().replace(",2000,", ",4000,"))
    c2 = Catalog(extra=[p])
    assert c2.path != c.path and c2.get("MY_GPU").memory_bw_gbs == 4000


def test_alias_and_unknown_names(cat):
    assert cat.resolve("H100") == "H100_SXM"
    assert cat.resolve("h100-sxm") == "H100_SXM"
    assert cat.resolve("dgx spark") == "GB10"
    with pytest.raises(UnknownNameError, match="H100_SXM"):
        cat.resolve("H100_SXMM")


def test_sql_is_read_only(cat):
    with pytest.raises(CatalogError):
        cat.sql("CREATE TABLE t (a INT)")
    with pytest.raises(CatalogError):
        cat.sql("SELECT * FROM read_csv('/etc/passwd')")
    assert cat.sql("SELECT count(*) AS n FROM hardware_alias")["n"][0] > 20


def test_the_shipped_engine_export_is_a_fresh_build():
    # Estimates read the compiled-in export, not DuckDB: it must be, byte for byte, what a build
    # of the shipped data exports now, so data/ edited without regenerating it fails here.
    same = _data.read_text(EXPORT_FILE) == engine_export_text()
    assert same, f"{EXPORT_FILE} is not the export of the shipped data: run `{EXPORT_COMMAND}` and reinstall"


def test_the_shipped_catalog_writes_nothing_until_a_query(tmp_path, monkeypatch):
    monkeypatch.setenv("RIDGELINE_CACHE_DIR", str(tmp_path))
    c = Catalog()
    assert c.get("h100").tflops_bf16 == 989.4  # NVIDIA H100 datasheet, dense bf16, through an alias
    assert c.constant("gpu_memory_utilization") == 0.9  # vLLM's default
    assert c.overridden == {} and "llamacpp-cuda" in c.measured_runtimes()
    assert list(tmp_path.iterdir()) == []
    # the first query builds the database, which holds what the export said
    assert c.sql("SELECT name FROM hardware ORDER BY name")["name"].to_list() == c.names()
    q = "SELECT DISTINCT runtime FROM benchmarks WHERE model IS NOT NULL AND runtime IS NOT NULL ORDER BY runtime"
    assert c.sql(q)["runtime"].to_list() == c.measured_runtimes()
    assert [p.name for p in tmp_path.iterdir()] == [c.path.name]


def test_catalog_export_keeps_a_changed_file_unless_forced(tmp_path):
    out = tmp_path / "export.json"
    shipped = _data.read_text(EXPORT_FILE)
    code, said, _ = run_main("catalog", "export", "--out", str(out))
    assert (code, said) == (0, f"wrote {out}; reinstall (pip install .) to ship it\n") and out.read_text() == shipped
    assert run_main("catalog", "export", "--out", str(out))[:2] == (0, f"unchanged {out}\n")
    out.write_text("{}")
    code, _, err = run_main("catalog", "export", "--out", str(out))
    assert (code, out.read_text()) == (2, "{}") and "differs from what would be written; pass --force" in err
    assert run_main("catalog", "export", "--out", str(out), "--force")[0] == 0 and out.read_text() == shipped
