"""Fuzzing every door with hostile input (hypothesis, fixed seed, bounded examples).

The contract: a finite, physically bounded result, or a typed RidgelineError naming the input
(exit 2, 3 or 4 from the CLI, one line on stderr); never a traceback, a panic, a NaN, exit 70.
The examples per entry point are the ``max_examples`` below (derandomized: the same inputs every run).
"""

from __future__ import annotations

import copy
import io
import json
import math
import os
import subprocess
import sys

import pytest
import ridgeline
from cli_in_process import run_main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ridgeline.errors import InternalError, RidgelineError


def fuzz(examples: int) -> settings:
    """Fixed inputs (derandomized), no deadline, ``examples`` cases (times ``RIDGELINE_FUZZ_SCALE``
    for a deeper run by hand; CI runs the counts as written)."""
    scale = int(os.environ.get("RIDGELINE_FUZZ_SCALE", "1"))
    return settings(
        derandomize=True,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        max_examples=examples * scale,
    )


MODELS = [
    "meta-llama/Llama-3.1-8B",
    "openai/gpt-oss-20b",
    "google/gemma-3-4b-it",
    "deepseek-ai/DeepSeek-V3",
    "Qwen/Qwen3-30B-A3B",
    "openai-community/gpt2",
]
DEVICES = ["H100_SXM", "RTX_4090", "M2_ULTRA", "MI300X", "GB10", "L4"]
# what a careless or hostile caller passes where a number, a flag or a name belongs
EXTREME_INTS = [
    0,
    1,
    2,
    3,
    255,
    256,
    511,
    512,
    4096,
    131_071,
    131_072,
    2**31,
    2**53,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64,
    2**100,
    -1,
    -(2**63),
]
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=6),
    st.sampled_from(["", " ", "no", "False", "1e400", "nan"]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.lists(st.integers(), max_size=2),
    st.just({}),
)
SMALL = st.integers(min_value=1, max_value=4096)


def mostly(good, bad, times=4):
    """``good`` about ``times`` draws in ``times + 1``: hostile values, but most plans get priced."""
    return st.sampled_from([True] * times + [False]).flatmap(lambda ok: good if ok else bad)


COUNT = mostly(st.one_of(SMALL, st.sampled_from(EXTREME_INTS)), JUNK)
FLAG = mostly(st.booleans(), JUNK)
NUMBER = mostly(st.floats(min_value=0, max_value=1e3), st.one_of(st.floats(allow_nan=True, allow_infinity=True), JUNK))
DTYPE = mostly(
    st.sampled_from(
        ["bf16", "bfloat16", "fp16", "half", "fp32", "tf32", "fp8", "int8", "fp16acc16", " BF16", "float32"]
    ),
    JUNK,
)
WEIGHTS = mostly(
    st.sampled_from(["fp8", "int8", "q4_k_m", "q4_0", "q8_0", "mxfp4", "nvfp4", "awq", "gptq", "int4", "bfloat16"]),
    JUNK,
)
RUNTIME = mostly(st.sampled_from(["llamacpp-cuda", "llamacpp-metal", "trtllm", "vllm", "none", "NONE"]), JUNK)

PLAN = {
    "batch": COUNT,
    "prompt": COUNT,
    "output": COUNT,
    "prefix": COUNT,
    "tp": COUNT,
    "ep": COUNT,
    "pp": COUNT,
    "dp": COUNT,
    "microbatches": COUNT,
    "chunk": COUNT,
    "kv_pad": COUNT,
    "swa_cache_extra": COUNT,
    "devices_per_node": COUNT,
    "identical_sequences": FLAG,
    "flash_attention": FLAG,
    "kv_skip_masked_tail": FLAG,
    "decode_graphs": FLAG,
    "calibrated": FLAG,
    "allow_no_fit": FLAG,
    "breakdown": FLAG,
    "routing_skew": NUMBER,
    "scaleout_gbs": NUMBER,
    "scaleout_latency_us": NUMBER,
    "dtype": DTYPE,
    "kv_dtype": DTYPE,
    "weight_dtype": WEIGHTS,
    "runtime": RUNTIME,
}


@st.composite
def plans(draw):
    keys = draw(st.lists(st.sampled_from(sorted(PLAN)), max_size=6, unique=True))
    kw = {k: draw(PLAN[k]) for k in keys}
    # a prompt step of one token over a long prompt is a real plan but a slow one: keep most cheap
    if kw.get("chunk") in (1, 2, 3) and isinstance(kw.get("prompt"), int) and kw["prompt"] > 8192:
        kw["chunk"] = 512
    return kw


def _check_result(e):
    """A result is finite and physically bounded."""
    for k in ("ttft_s", "e2e_s", "throughput_tok_s", "prefill_tok_s"):
        v = getattr(e, k)
        assert isinstance(v, float) and math.isfinite(v) and v > 0, (k, v)
    assert e.tpot_s is None or (math.isfinite(e.tpot_s) and e.tpot_s > 0)
    for ph in (e.prefill, e.decode):
        assert 0 <= ph["mfu"] <= 1 + 1e-9 and 0 <= ph["mbu"] <= 1 + 1e-9, ph
        assert all(math.isfinite(float(v)) and v >= 0 for v in ph.values())
    mem = e.memory
    assert all(math.isfinite(float(mem[k])) and mem[k] >= 0 for k in mem if k != "fits")
    assert e.parallel["devices"] >= 1 and e.prefill["steps"] >= 1
    json.dumps(e.to_dict())  # the --json output is plain JSON: no NaN or infinity
    assert "NaN" not in json.dumps(e.to_dict()) and "Infinity" not in json.dumps(e.to_dict())


def _typed(err: BaseException) -> None:
    assert isinstance(err, RidgelineError) and not isinstance(err, InternalError), repr(err)
    msg = str(err)
    assert msg and "\n" not in msg and "Traceback" not in msg, msg


@fuzz(400)
@given(
    model=mostly(st.sampled_from(MODELS), st.one_of(JUNK, st.just("x" * 300)), 12),
    hw=mostly(st.sampled_from(DEVICES), st.one_of(JUNK, st.just("h100")), 12),
    kw=plans(),
)
def test_the_api_answers_every_plan(model, hw, kw):
    try:
        e = ridgeline.estimate(model, hw, **kw)
    except RidgelineError as err:
        _typed(err)
        return
    _check_result(e)


CLI_VALUE = st.one_of(
    st.integers(-5, 5000).map(str),
    st.sampled_from([str(v) for v in EXTREME_INTS]),
    st.sampled_from(["", "abc", "1.5", "1e400", "nan", "-0", "bf16", "bfloat16", "none"]),
)
CLI_FLAGS = [
    "--batch",
    "--prompt",
    "--output",
    "--prefix",
    "--tp",
    "--ep",
    "--pp",
    "--dp",
    "--chunk",
    "--kv-pad",
    "--dtype",
    "--kv-dtype",
    "--weight-dtype",
    "--runtime",
    "--routing-skew",
    "--swa-cache-extra",
    "--microbatches",
    "--devices-per-node",
    "--scaleout-gbs",
    "--scaleout-latency-us",
]


@fuzz(150)
@given(
    model=st.sampled_from([*MODELS, "bogus/model", ""]),
    hw=st.sampled_from([*DEVICES, "NOPE", ""]),
    opts=st.lists(st.tuples(st.sampled_from(CLI_FLAGS), CLI_VALUE), max_size=4),
    extra=st.lists(st.sampled_from(["--json", "--breakdown", "--allow-no-fit", "--uncalibrated"]), max_size=2),
)
def test_the_cli_estimate_answers_every_flag(model, hw, opts, extra):
    argv = ["estimate", "-m", model, "-H", hw, *extra]
    for flag, value in opts:
        if flag == "--chunk" and value in ("1", "2", "3"):
            value = "512"
        argv += [flag, value]
    code, out, err = run_main(*argv)
    assert code in (0, 2, 3, 4), (argv, code, err)
    if code:
        assert err.startswith("error: ") and err.count("\n") == 1, (argv, err)
    elif "--json" in argv:
        d = json.loads(out)
        assert math.isfinite(d["ttft_s"]) and d["ttft_s"] > 0


@fuzz(60)
@given(
    op=st.sampled_from(["allreduce", "allgather", "alltoall", "sendrecv", "bogus", ""]),
    ranks=CLI_VALUE,
    size=st.sampled_from(["8", "4MiB", "1e400", "0", "-1", "1GiB", "x", "1e30", ""]),
    hw=st.sampled_from(["H100_SXM", "L4", "M2_ULTRA", "NOPE"]),
    opts=st.lists(
        st.tuples(st.sampled_from(["--devices-per-node", "--scaleout-gbs", "--scaleout-latency-us"]), CLI_VALUE),
        max_size=2,
    ),
)
def test_the_cli_collective_answers_every_flag(op, ranks, size, hw, opts):
    argv = ["collective", "--op", op, "--ranks", ranks, "--size", size, "-H", hw, "--json"]
    for flag, value in opts:
        argv += [flag, value]
    code, out, err = run_main(*argv)
    assert code in (0, 2, 3), (argv, code, err)
    if code == 0:
        rows = json.loads(out)["rows"]
        assert rows and all(math.isfinite(r["time_us"]) and r["time_us"] >= 0 for r in rows)
    else:
        assert err.startswith("error: ") and err.count("\n") == 1, (argv, err)


GRID_VALUE = st.one_of(
    SMALL,
    st.sampled_from(EXTREME_INTS),
    st.sampled_from(["1..8:x2", "1,8", "0..3", "1..99999999999999999999", "8..1", "1..10:x1", "a..b", "", "1,,2"]),
    st.lists(st.one_of(SMALL, st.sampled_from([0, -1, 2**64])), min_size=0, max_size=3),
    JUNK,
)
GRID_AXES = [
    "batch",
    "prompt",
    "output",
    "tp",
    "pp",
    "ep",
    "dp",
    "chunk",
    "dtype",
    "weight_dtype",
    "kv_dtype",
    "runtime",
    "nonsense",
]


@fuzz(120)
@given(
    models=st.lists(st.sampled_from([*MODELS[:3], "bogus/model"]), min_size=0, max_size=2),
    hws=st.lists(st.sampled_from(["H100_SXM", "RTX_4090", "M2_ULTRA", "NOPE"]), min_size=0, max_size=2),
    axes=st.dictionaries(st.sampled_from(GRID_AXES), GRID_VALUE, max_size=3),
    threads=st.sampled_from([0, 1, 2, -1, 2**64]),
)
def test_sweep_grids_answer_every_axis(models, hws, axes, threads):
    from ridgeline.sweeps.sweep import grid_size, sweep

    grid = {"model": models, "hardware": hws, **axes}
    try:
        if grid_size(grid) > 4096:
            return  # a valid but large grid: its speed is for benches/
        df = sweep(grid, threads=threads)
    except RidgelineError as err:
        _typed(err)
        return
    priced = df.filter(df["error"].is_null())
    for k in ("ttft_s", "e2e_s", "throughput_tok_s", "memory_gb"):
        col = priced[k]
        assert col.null_count() == 0 and bool((col > 0).all()) and bool(col.is_finite().all()), k
    assert df.filter(df["error"].is_not_null())["ttft_s"].null_count() == df["error"].is_not_null().sum()


CONFIG_KEYS = [
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "intermediate_size",
    "max_position_embeddings",
    "sliding_window",
    "rope_scaling",
    "num_local_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "tie_word_embeddings",
    "hidden_act",
    "model_type",
    "layer_types",
    "quantization_config",
    "torch_dtype",
    "use_sliding_window",
    "max_window_layers",
]
CONFIG_VALUE = st.one_of(
    st.sampled_from(EXTREME_INTS),
    SMALL,
    JUNK,
    st.just({"rope_type": "yarn", "factor": "8"}),
    st.just(["sliding_attention", "full_attention"]),
    st.just({"quant_method": "awq"}),
    st.floats(min_value=0.5, max_value=4096.5),
)


@fuzz(250)
@given(
    edits=st.dictionaries(st.sampled_from(CONFIG_KEYS), CONFIG_VALUE, min_size=1, max_size=3),
    base=st.sampled_from(["meta-llama/Llama-3.1-8B", "Qwen/Qwen3-30B-A3B", "google/gemma-3-4b-it"]),
)
def test_config_files_answer_every_value(edits, base):
    from ridgeline import _data
    from ridgeline.models.config import Model, _bundled

    cfg = json.loads(_data.read_text(_bundled()[base]))
    cfg = copy.deepcopy(cfg)
    cfg.update(edits)
    try:
        m = Model.from_dict(cfg, name="fuzzed")
        assert m.total_params > 0 and m.max_model_len >= 1
        e = ridgeline.estimate(
            m, "H100_SXM", prompt=min(512, m.max_model_len - 1) or 1, output=1, allow_no_fit=True, runtime="none"
        )
    except RidgelineError as err:
        _typed(err)
        return
    _check_result(e)


HW_CELL = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "-1", "0", "1e400", "abc", "", "989.4", "80", "true"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)


@fuzz(12)
@given(
    cells=st.dictionaries(
        st.sampled_from(
            ["tflops_bf16", "memory_gb", "memory_bw_gbs", "scaleup_bw_gbs", "tdp_w", "verified", "name", "kind"]
        ),
        HW_CELL,
        min_size=1,
        max_size=2,
    )
)
def test_user_hardware_csvs_answer_every_cell(cells, tmp_path_factory):
    import csv

    from ridgeline import _data
    from ridgeline.catalog.store import Catalog

    shipped = list(csv.DictReader(io.StringIO(_data.read_text("data/hardware/devices.csv"))))
    row = {**next(r for r in shipped if r["name"] == "H100_SXM"), "name": "MY_FUZZ_GPU", **cells}
    d = tmp_path_factory.mktemp("hw")
    path = d / "my.csv"
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(row))
        w.writeheader()
        w.writerow(row)
    try:
        cat = Catalog(path=d / "cat.duckdb", extra=[path])
        dev = cat.get(row["name"]) if row["name"] else None
    except RidgelineError as err:
        _typed(err)
        return
    if dev is None:
        return
    for v in (dev.memory_gb, dev.memory_bw_gbs):
        assert math.isfinite(v) and v > 0
    try:
        e = ridgeline.estimate(MODELS[0], dev, catalog=cat, runtime="none", allow_no_fit=True)
    except RidgelineError as err:
        _typed(err)
        return
    _check_result(e)


ROWS_HEADER = "source,hardware,model,runtime,weight_quant,batch,prompt_tokens,output_tokens,metric,value,unit"


@fuzz(40)
@given(
    body=st.one_of(
        st.text(max_size=200),
        st.binary(max_size=120).map(lambda b: b.decode("latin-1")),
        st.lists(
            st.lists(
                st.sampled_from(["", "x", "1", "-1", "nan", "H100", "Llama 3.1 8B", "decode_tok_s", "1e400", '"']),
                min_size=1,
                max_size=11,
            ),
            max_size=4,
        ).map(lambda rows: "\n".join([ROWS_HEADER, *(",".join(r) for r in rows)])),
    )
)
def test_rows_files_answer_every_line(body, tmp_path_factory):
    path = tmp_path_factory.mktemp("rows") / "rows.csv"
    path.write_text(body)
    code, out, err = run_main("validate", "--rows", str(path), "--json")
    assert code in (0, 2, 3), (body, code, err)
    if code:
        assert err.startswith("error: ") and err.count("\n") == 1, err
    else:
        for o in json.loads(out):
            assert o["predicted"] is None or (math.isfinite(o["predicted"]) and o["predicted"] > 0)


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["estimate", "-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM", "--batch", "1099511627776"], 4),
        (
            [
                "estimate",
                "-m",
                "meta-llama/Llama-3.1-8B",
                "-H",
                "H100_SXM",
                "--batch",
                "1125899906842624",
                "--chunk",
                "1",
            ],
            2,
        ),
        (["estimate", "-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM", "--output", "18446744073709551615"], 2),
        (["collective", "--ranks", str(2**64), "-H", "H100_SXM"], 2),
        (["sweep", "-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM", "--threads", "-1"], 2),
        (["catalog", "sql", ""], 2),
    ],
)
def test_real_processes_exit_with_the_documented_code(argv, code, tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "ridgeline.cli", *argv], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert r.returncode == code, (argv, r.stderr)
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
