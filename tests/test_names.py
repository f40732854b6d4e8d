"""Names as people write them: one resolver for devices (``Catalog.identify``) and one for models
(``models.identify``), used by every command and every benchmark importer; a name resolves only
where exactly one catalog device or bundled model fits every field it states."""

import csv
import io
import json
import re
from pathlib import Path

import pytest
from cli_in_process import run_main
from ridgeline import UnknownNameError, _data, estimate, names
from ridgeline.catalog.benchmarks import import_file, shipped_rows
from ridgeline.catalog.store import default_catalog
from ridgeline.models.config import Model, bundled_names, identify
from ridgeline.models.quant import accepted_names, named_format

TABLE = Path(__file__).parent / "data" / "real_world_names.csv"
NAMES = list(csv.DictReader(io.StringIO(TABLE.read_text(encoding="utf-8"))))


def _model(name):
    """The bundled model a name names and the weights it prices: the format the name states,
    unless it is the checkpoint's own."""
    found, fmt = identify(name)
    return found, named_format(Model.from_config(found), fmt)


@pytest.mark.parametrize("row", NAMES, ids=lambda r: f"{r['kind']}:{r['name']}")
def test_real_world_names_resolve_to_one_row_or_are_refused(row):
    device = row["kind"] == "device"
    look = default_catalog().identify if device else _model
    second = row["count_or_format"] or None
    if row["resolves_to"]:
        assert look(row["name"]) == (row["resolves_to"], int(second) if device and second else second)
        return
    with pytest.raises(UnknownNameError, match=re.escape(row["refused_because"])) as e:
        look(row["name"])
    msg = str(e.value)
    assert f"'{row['name']}'" in msg and "\n" not in msg
    assert "see `ridgeline" in msg  # what would be accepted


def test_an_ambiguous_name_lists_every_candidate_with_what_tells_them_apart():
    with pytest.raises(UnknownNameError) as e:
        default_catalog().identify("A100")
    msg = str(e.value)
    for name, fields in (("A100_SXM_40GB", "40 GB, SXM"), ("A100_SXM_80GB", "80 GB, SXM"),
                         ("A100_PCIE_80GB", "80 GB, PCIe")):  # fmt: skip
        assert f"{name} ({fields}" in msg
    with pytest.raises(UnknownNameError, match="openai/gpt-oss-120b, openai/gpt-oss-20b"):
        identify("gpt-oss")


def test_every_catalog_name_and_alias_still_names_its_own_device():
    # the parsed-name matcher agrees with the exact table on every name the catalog has: no
    # name or alias becomes ambiguous, and none moves to another device
    cat = default_catalog()
    index = cat.name_index
    for parsed, device in index.entries:
        assert names.match_device(parsed, index.entries, index.fields) == device, parsed.text
        spaced = parsed.text.replace("_", " ").lower()
        assert cat.identify(f"2x {spaced}") == (device, 2)


def test_every_bundled_model_is_named_by_its_own_words():
    for b in bundled_names():
        short = b.split("/", 1)[1]
        assert identify(short.replace("-", " ").upper()) == (b, None), b
        if names.parse_model(b).weight_format is None:
            assert identify(f"{short}-Instruct-AWQ") == (b, "awq_int4_g128"), b
        else:  # a quantised checkpoint's name and another format
            with pytest.raises(UnknownNameError, match="two weight formats"):
                identify(f"{short}-Instruct-AWQ")


def test_the_words_are_sourced_and_name_what_ridgeline_has():
    rows = list(csv.DictReader(io.StringIO(_data.read_text(names.WORDS_FILE))))
    assert all(r["source"].strip() for r in rows)
    formats = set(accepted_names())
    assert all(r["value"] in formats for r in rows if r["kind"] == "quant" and r["value"])
    devices = _data.read_text("data/hardware/devices.csv")
    families = {r["family"] for r in csv.DictReader(io.StringIO(devices))}
    kinds = {r["kind"] for r in csv.DictReader(io.StringIO(devices))}
    assert all(r["word"] in families for r in rows if r["kind"] == "family_form_factor")
    assert all(r["word"] in families | kinds for r in rows if r["kind"] == "memory_up_to")


def test_shipped_rows_are_unpriced_only_for_names_nothing_bundled_is():
    unnamed = {r["notes"].split(";")[0].removeprefix("model ") for r in shipped_rows()
               if re.match(r"unknown (hardware|model)|(hardware|model) '", r["not_priced"] or "")}  # fmt: skip
    assert unnamed == {"Falcon 180B", "Hermes-3-Llama-3.1-405B-FP8", "Mistral-7B-Instruct-v0.3",
                       "Mistral-Large-Instruct-2407", "Mistral-Nemo-Instruct-2407"}  # fmt: skip
    for name in unnamed:
        with pytest.raises(UnknownNameError, match="unknown model"):
            identify(name)


def _file(tmp_path, shipped, edit):
    """A user's table in a shipped format: the shipped file's header and rows, edited."""
    lines = _data.read_text(f"data/benchmarks/{shipped}").splitlines()
    text = "\n".join([lines[0], *edit(lines[1:])]) + "\n"
    return import_file(str(tmp_path / shipped), text)


def test_importers_resolve_names_the_curated_map_does_not_list(tmp_path):
    # XiongjieDai: a card the map lacks, alone and four of it (llama.cpp's layer split over 4)
    def xiong(rows):
        one = next(x for x in rows if ",3070 8GB,1," in x)
        four = one.replace(",3070 8GB,1,", ",4090 24GB * 4,4,")
        wrong = one.replace(",3070 8GB,1,", ",4090 24GB * 2,4,")
        return [one.replace(",3070 8GB,", ",3080 Ti 12GB,"), four, wrong]

    rows = _file(tmp_path, "llamacpp_xiongjiedai_llama3.csv", xiong)
    assert [r["hardware"] for r in rows] == ["RTX_3080_TI", "RTX_4090", "RTX_4090"]
    assert rows[1]["pp"] == 4 and rows[1]["not_priced"] is None and "matched by name" in rows[1]["notes"]
    assert "states 2 devices, the row's plan 4" in rows[2]["not_priced"]

    # llama.cpp 4167: the chip named without its bin, the bin in the gpu_cores column
    def apple(rows):
        pro = [x for x in rows if x.startswith("Apple M1 Pro,")]
        return [x.replace("Apple M1 Pro,14,", "Apple M2 Pro,16,").replace("Apple M1 Pro,16,", "Apple M2 Pro,19,")
                for x in pro]  # fmt: skip

    rows = _file(tmp_path, "llamacpp_apple_silicon_4167.csv", apple)
    assert {r["hardware"] for r in rows} == {"M2_PRO_16C", "M2_PRO"} and not any(r["not_priced"] for r in rows)
    # TensorRT-LLM: the model written "LLaMA 3.1 70B"; GEMM: an "NVIDIA H100 SXM5 80GB" device
    trt = _file(
        tmp_path, "trtllm_throughput.csv", lambda xs: [x.replace("LLaMA v3.1 70B", "LLaMA 3.1 70B") for x in xs]
    )
    assert {r["model"] for r in trt if "LLaMA 3.1 70B" in r["notes"]} == {"meta-llama/Llama-3.1-70B"}
    h100 = _file(tmp_path, "op_gemm_tflops.csv", lambda xs: [x.replace("H100 SXM", "H100 SXM5 80GB") for x in xs])
    assert {r["hardware"] for r in h100 if "SXM5" in r["file_hardware"]} == {"H100_SXM"}


def test_every_command_takes_names_as_people_write_them():
    code, out, err = run_main("estimate", "--model", "LLaMA 3.1 70B", "--hardware", "NVIDIA H100 SXM5 80GB",
                              "--tp", "2", "--json")  # fmt: skip
    assert code == 0, err
    got = json.loads(out)
    assert (got["model"], got["hardware"]) == ("meta-llama/Llama-3.1-70B", "H100_SXM")
    code, _, err = run_main("estimate", "--model", "Llama 3.1 8B", "--hardware", "A100")
    assert code == 3 and err.count("\n") == 1 and "A100_SXM_40GB" in err and "A100_PCIE_80GB" in err
    code, _, err = run_main("catalog", "show", "3070 8GB")
    assert code == 0, err
    code, _, err = run_main("estimate", "--model", "Llama 3.1 8B", "--hardware", "2x H100 80GB")
    assert code == 2 and "--tp" in err
    code, _, err = run_main("model", "show", "gpt-oss")
    assert code == 3 and "openai/gpt-oss-20b" in err


def test_a_quantisation_suffix_prices_the_weights_it_names():
    named = estimate("Meta-Llama-3.1-8B-FP8", "H100_SXM", calibrated=False)
    fp8 = estimate("meta-llama/Llama-3.1-8B", "H100_SXM", weight_dtype="fp8", calibrated=False)
    bf16 = estimate("meta-llama/Llama-3.1-8B", "H100_SXM", calibrated=False)
    assert named.memory["weights_bytes"] == fp8.memory["weights_bytes"] < 0.6 * bf16.memory["weights_bytes"]
    with pytest.raises(Exception, match="disagrees with the model name"):
        estimate("Meta-Llama-3.1-8B-FP8", "H100_SXM", weight_dtype="int4_g128")


def test_a_stated_memory_size_selects_that_configuration_or_is_refused_with_those_that_exist():
    # issue 42: "M3 Max 64GB" resolved to the 128 GB row, so a 75.5 GB model fit a 64 GB Mac
    cat = default_catalog()
    m64 = cat.get("M3 Max 64GB")
    assert (m64.name, m64.memory_gb, m64.memory_of, m64.chip) == ("M3_MAX_64GB", 64.0, "M3_MAX", "M3_MAX")
    row = cat.get("M3_MAX")
    # the same chip: everything but the capacity is the row's
    assert (m64.memory_bw_gbs, m64.tflops_fp32, m64.arch) == (row.memory_bw_gbs, row.tflops_fp32, row.arch)
    assert cat.get("M3_MAX_64GB") == m64 and cat.get("M3 Max 128GB") == row and cat.get("M3 Max") == row
    assert cat.get("Apple M3 Max 30-core GPU 36GB").name == "M3_MAX_30C_36GB"
    for name in ("M3 Max 50GB", "M3 Max 36GB"):  # 36 GB is the 30-core part's, not the 40-core one's
        with pytest.raises(UnknownNameError, match=r"M3_MAX is sold with 48, 64, 128 GB .* not (50|36) GB"):
            cat.get(name)
    # a part whose other sizes are not listed is refused rather than priced at its largest
    with pytest.raises(UnknownNameError, match="M4_MAX's catalog row holds 128 GB.*hardware_memory.csv"):
        cat.get("M4 Max 64GB")
    # configurations are reached by name only: a search over the catalog sees the rows
    assert "M3_MAX_64GB" not in cat.names() and "M3_MAX" in cat.names()


def test_a_memory_configuration_is_priced_by_its_chip_with_its_own_capacity():
    big = estimate("meta-llama/Llama-3.1-8B", "M3 Max", batch=1)
    small = estimate("meta-llama/Llama-3.1-8B", "M3 Max 64GB", batch=1)
    # the chip's calibration, bandwidth and times; only the memory that fits differs
    assert small.calibration == big.calibration and small.calibration.startswith("calibrated (M3_MAX,")
    assert small.tpot_s == big.tpot_s and small.ttft_s == big.ttft_s
    assert small.memory["capacity_bytes"] / big.memory["capacity_bytes"] == pytest.approx(64 / 128)
    with pytest.raises(Exception, match="needs .* GB per device but .* usable"):
        estimate("meta-llama/Llama-3.1-70B", "M3 Max 64GB", batch=1, weight_dtype="fp8")
    assert estimate("meta-llama/Llama-3.1-70B", "M3 Max", batch=1, weight_dtype="fp8").fits
