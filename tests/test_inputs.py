"""Every input answered: a bad grid file, rows file or model config is a typed error whose one
line names the file or the key (never a traceback, a yaml or json error, a UnicodeDecodeError),
and a config value of the wrong type is refused, never silently changed."""

import json
import os
import re
import subprocess
import sys

import pytest
from cli_in_process import run_main
from conftest import LLAMA
from ridgeline import _data
from ridgeline._io import read_text
from ridgeline.catalog.benchmarks import import_file
from ridgeline.errors import CatalogError, ModelConfigError, PlanError, UnknownNameError
from ridgeline.models.config import Model
from ridgeline.sweeps.sweep import load_grid_file


def _cfg(name):
    return json.loads(_data.read_text(f"data/models/{name.replace('/', '--', 1)}.json"))


def _one_line(message):
    return "\n" not in message.strip() and "Traceback" not in message


BAD_GRIDS = [
    ("g.yaml", b"model: [a, b\nhardware: L4\n", "not valid YAML (line 2, column"),
    ("g.yaml", b"a: 1\n---\nb: 2\n", "not valid YAML"),
    ("g.yml", b"model:\tx\n\t- y\n", "not valid YAML"),
    ("g.json", b"{model: 'x'}", "not valid JSON (line 1, column 2"),
    ("g.json", b'{"model": "x",}', "not valid JSON"),
    ("g.yaml", b"model: \xff\xfe\n", "not UTF-8 text (byte 0xff at offset 7)"),
    ("g.json", b"\x89PNG\r\n", "not UTF-8 text"),
    ("g.yaml", b"", "empty"),
    ("g.yaml", b"# only a comment\n", "empty"),
    ("g.json", b" \n", "empty"),
    ("g.yaml", b"- model: x\n", "holds a list; a grid file holds one mapping of axis names"),
    ("g.json", b"[1, 2]", "holds a list"),
    ("g.json", b'"L4"', "holds a str"),
    ("g.yaml", b"1: [2]\nhardware: L4\n", "axis name 1 is not text; axes: model, hardware"),
    ("missing.yaml", None, "not found"),
    ("a_dir.yaml", "dir", "a directory, not a file"),
]


@pytest.mark.parametrize("name,content,message", BAD_GRIDS)
def test_bad_grid_files_are_plan_errors_naming_the_file(tmp_path, name, content, message):
    path = tmp_path / name
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(PlanError) as e:
        load_grid_file(path)
    assert str(e.value).startswith(f"grid file {path}: ") and message in str(e.value) and _one_line(str(e.value))


def test_a_bad_grid_file_exits_2_with_one_line(tmp_path):
    (tmp_path / "g.yaml").write_bytes(b"model: [a, b\n")
    r = subprocess.run([sys.executable, "-m", "ridgeline.cli", "sweep", "--grid", "g.yaml"], capture_output=True,
                       text=True, cwd=tmp_path, env=os.environ.copy())  # fmt: skip
    assert r.returncode == 2 and r.stderr.startswith("error: grid file g.yaml: not valid YAML") and _one_line(r.stderr)


UNIFIED = b"hardware,runtime,model,metric,value,unit,phase\n"
GEMM = b"source,hardware,dtype,M,N,K,achieved_TFLOPS,op_context,note\n"
BAD_ROWS = [
    (b"hardware,model\n\xff\xfe\n", "not UTF-8 text (byte 0xff at offset 15)"),
    (b"", "empty; a rows file is a CSV whose header has at least hardware, metric, model, phase"),
    (b"\n\n", "empty"),
    (UNIFIED, "a header and no rows"),
    (UNIFIED + b"H100_SXM,vllm,meta-llama/Llama-3.1-8B,decode_tok_s,100,tok/s,decode,extra\n",
     "line 2 has 8 fields, the header 7"),
    (UNIFIED + b"H100_SXM,vllm,meta-llama/Llama-3.1-8B,decode_tok_s,100\n", "line 2 has 5 fields, the header 7"),
    (GEMM + b"x,H100_SXM,bf16,1,2,3,fast,ctx,n\n", "line 2: cannot read the row (could not convert string to float"),
    (b"M,N,K,achieved_TFLOPS\n1,2,3,4\n", "line 2: no column 'dtype'"),
    (b"}{][ garbage )(\n\x01\x02\x03\n", "unrecognised benchmark format (header: }{][ garbage )()"),
    (b"a,b,c\n1,2,3\n", "unrecognised benchmark format (header: a, b, c); a user's rows file has at least the columns"),
]  # fmt: skip


@pytest.mark.parametrize("content,message", BAD_ROWS)
def test_bad_rows_files_are_catalog_errors_naming_the_file(tmp_path, content, message):
    path = tmp_path / "mine.csv"
    path.write_bytes(content)
    with pytest.raises(CatalogError) as e:  # as `validate --rows` reads a user's file
        import_file(str(path), read_text(path, what="rows file", error=CatalogError))
    assert str(path) in str(e.value) and message in str(e.value) and _one_line(str(e.value))
    code, _, err = run_main("validate", "--rows", str(path))
    assert code == 2 and err.startswith("error: ") and str(path) in err and _one_line(err)


def test_bad_model_config_files_are_model_config_errors_naming_the_file(tmp_path):
    cases = {
        "latin1/config.json": (b'{"model_type": "llama", "name": "caf\xe9"}', "not UTF-8 text (byte 0xe9 at offset"),
        "empty/config.json": (b"", "empty; a config.json holds one JSON object"),
        "broken/config.json": (b'{"hidden_size": 4096,', "not a JSON config"),
        "a_list/config.json": (b"[1, 2, 3]", "a config must be a JSON object"),
        "deep/config.json": (b"[" * 100_000 + b"]" * 100_000, "not a JSON config"),
    }
    for rel, (content, message) in cases.items():
        path = tmp_path / rel
        path.parent.mkdir()
        path.write_bytes(content)
        for given in (path, path.parent):  # the file, or its model folder
            with pytest.raises(ModelConfigError) as e:
                Model.from_config(given)
            assert str(path) in str(e.value) and message in str(e.value) and _one_line(str(e.value)), rel
    (tmp_path / "no_config").mkdir()
    with pytest.raises(
        ModelConfigError, match=re.escape(f"model folder {tmp_path / 'no_config'}: holds no config.json")
    ):
        Model.from_config(tmp_path / "no_config")
    with pytest.raises(ModelConfigError, match="an empty name"):
        Model.from_config("")


@pytest.mark.parametrize("name", ["a" * 256, "meta-llama/Llama-3.1-8B" + "x" * 250, "/" + "d" * 300 + "/config.json"])
def test_a_name_too_long_for_a_path_is_an_unknown_model(name):
    # written as a path, it is a file not found; as a name, not a bundled model
    said = "file not found" if name.startswith("/") else "not a bundled model"
    with pytest.raises(UnknownNameError, match=re.escape(f"model '{name}': {said}")):
        Model.from_config(name)
    code, _, err = run_main("model", "show", name)
    lead = "error: model" if said == "file not found" else "error: unknown model"
    assert code == 3 and err.startswith(lead) and _one_line(err)


MIXTRAL = "mistralai/Mixtral-8x7B-v0.1"
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
QWEN_SWA = {"sliding_window": 4096, "use_sliding_window": True, "max_window_layers": 28}
WRONG_TYPES = [
    (LLAMA, {"sliding_window": 1.5}, "sliding_window"),
    (LLAMA, {"sliding_window": "4096"}, "sliding_window"),
    (LLAMA, {"sliding_window": True}, "sliding_window"),
    (LLAMA, {"sliding_window": 0}, "sliding_window"),
    (LLAMA, {"rope_scaling": {**YARN, "factor": "8"}}, "rope_scaling.factor"),
    (LLAMA, {"rope_scaling": {**YARN, "factor": True}}, "rope_scaling.factor"),
    (LLAMA, {"rope_scaling": {**YARN, "factor": -2.0}}, "rope_scaling.factor"),
    (LLAMA, {"rope_scaling": {**YARN, "factor": float("inf")}}, "rope_scaling.factor"),
    (LLAMA, {"rope_scaling": {**YARN, "factor": float("nan")}}, "rope_scaling.factor"),
    (LLAMA, {"rope_scaling": {"rope_type": "linear", "factor": "8"}}, "rope_scaling.factor"),
    (LLAMA, {"rope_scaling": {**YARN, "original_max_position_embeddings": "32768"}},
     "rope_scaling.original_max_position_embeddings"),
    (LLAMA, {"rope_scaling": {**YARN, "original_max_position_embeddings": 1.5}},
     "rope_scaling.original_max_position_embeddings"),
    (LLAMA, {"rope_scaling": "yarn"}, "rope_scaling"),
    (LLAMA, {"rope_scaling": {**YARN, "rope_type": 3}}, "rope_scaling.rope_type"),
    (LLAMA, {**QWEN_SWA, "max_window_layers": 1.5}, "max_window_layers"),
    (LLAMA, {**QWEN_SWA, "max_window_layers": "28"}, "max_window_layers"),
    (LLAMA, {**QWEN_SWA, "use_sliding_window": "yes"}, "use_sliding_window"),
    (LLAMA, {"sliding_window": 4096, "sliding_window_pattern": "6"}, "sliding_window_pattern"),
    (LLAMA, {"sliding_window": 4096, "sliding_window_pattern": True}, "sliding_window_pattern"),
    (LLAMA, {"sliding_window": 4096, "sliding_window_pattern": 6.5}, "sliding_window_pattern"),
    (LLAMA, {"layer_types": "full_attention"}, "layer_types"),
    (LLAMA, {"layer_types": [3] * 32}, "layer_types"),
    (LLAMA, {"sliding_window": 1.5, "layer_types": ["sliding_attention"] * 32}, "sliding_window"),
    (LLAMA, {"architectures": "LlamaForCausalLM"}, "architectures"),
    (LLAMA, {"architectures": [1]}, "architectures"),
    (LLAMA, {"model_type": 3}, "model_type"),
    (LLAMA, {"text_config": "llama"}, "text_config"),
    (LLAMA, {"multi_query": "true"}, "multi_query"),
    (LLAMA, {"torch_dtype": 16}, "torch_dtype"),
    (LLAMA, {"norm_type": 1}, "norm_type"),
    (MIXTRAL, {"mlp_only_layers": "0,1"}, "mlp_only_layers"),
    (MIXTRAL, {"mlp_only_layers": [1.5]}, "mlp_only_layers"),
    (MIXTRAL, {"mlp_only_layers": [True]}, "mlp_only_layers"),
    (MIXTRAL, {"mlp_only_layers": [32]}, "mlp_only_layers"),
    (MIXTRAL, {"num_experts_per_tok": 2.5}, "num_experts_per_tok"),
    ("deepseek-ai/DeepSeek-V3", {"topk_method": 1}, "topk_method"),
]  # fmt: skip


@pytest.mark.parametrize("base,patch,key", WRONG_TYPES)
def test_config_values_of_the_wrong_type_are_refused_naming_the_key(base, patch, key):
    with pytest.raises(ModelConfigError) as e:
        Model.from_dict({**_cfg(base), **patch})
    assert f"model config key '{key}'" in str(e.value) and _one_line(str(e.value))


def test_whole_number_floats_keep_their_value():
    base = _cfg(LLAMA)
    as_int = Model.from_dict({**base, "sliding_window": 4096})
    as_float = Model.from_dict({**base, "sliding_window": 4096.0})
    assert [g["attention"]["window"] for g in as_float.layer_groups] == [4096]
    assert as_float.core_json.replace('"name": "custom"', "") == as_int.core_json.replace('"name": "custom"', "")
    # yarn: max_model_len = original x factor, exactly, whatever the number type of each
    for yarn in (YARN, {**YARN, "factor": 4, "original_max_position_embeddings": 32768.0}):
        m = Model.from_dict({**base, "max_position_embeddings": 4096, "rope_scaling": yarn})
        assert m.max_model_len == 4 * 32768
    qwen = Model.from_dict({**base, **QWEN_SWA, "max_window_layers": 28.0})
    assert sorted((g["count"], g["attention"]["window"] or 0) for g in qwen.layer_groups) == [(4, 4096), (28, 0)]
    mixtral = Model.from_dict({**_cfg(MIXTRAL), "mlp_only_layers": [0, 31.0]})
    assert sum(g["count"] for g in mixtral.layer_groups if g["ffn"]["kind"] == "dense") == 2
