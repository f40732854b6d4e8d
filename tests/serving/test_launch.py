"""Launch files (issue 46): each runtime's serve command realises the simulated plan, and every flag
and configuration key it writes is one that runtime's CLI reference lists for the version the
calibration names (data/runtimes/launch_flags.csv, read from vllm 0.24.0's and sglang 0.5.14's
wheels and TensorRT-LLM's serve.py, llm_args.py and disagg_utils.py)."""

import dataclasses
import json

import pytest
import yaml
from conftest import run
from ridgeline.errors import PlanError
from ridgeline.launch import SERVE, check_flags, known, launch_config, version

LLAMA = "meta-llama/Llama-3.1-70B"
MOE = "Qwen/Qwen3-30B-A3B"
SMALL = {"concurrency": 2, "requests": 8, "prompt": 512, "output": 32}
DISAGG = {"prefill_instances": 2, "decode_instances": 1, "prefill_tp": 2, "decode_tp": 4, "tp": 4}


def _flag(argv, name):
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize("runtime", sorted(SERVE))
def test_every_emitted_flag_is_in_the_runtime_reference(runtime):
    plans = [
        (LLAMA, {"tp": 8, "kv_dtype": "fp8"}),
        (LLAMA, DISAGG),
        (MOE, {"tp": 1, "ep": 4, "attention_dp": 4}),
        ("deepseek-ai/DeepSeek-V3", {"tp": 8, "ep": 8, "weight_dtype": "fp8", "speculative": "mtp", "draft_tokens": 2}),
    ]
    for model, kw in plans:
        lc = launch_config(model, "H200_SXM", runtime=runtime, **SMALL, **kw)
        assert lc.runtime == runtime and check_flags(lc) == [], (model, kw)
        # each flag the manifest explains is one it uses, with the reference's help text
        used = {a for i in (*lc.instances, *((lc.front,) if lc.front else ())) for a in i.argv}
        assert set(lc.manifest["flags"]) <= used and all(lc.manifest["flags"].values())


def test_the_check_catches_a_flag_the_reference_lacks():
    lc = launch_config(LLAMA, "H200_SXM", runtime="vllm", tp=8, **SMALL)
    i = lc.instances[0]
    bad = dataclasses.replace(lc, instances=(dataclasses.replace(i, argv=(*i.argv, "--tp-size", "8")),))
    assert check_flags(bad) == ["vllm serve: --tp-size"]  # SGLang's spelling, not vLLM's


def test_the_reference_is_the_calibrated_version():
    # the versions the runtime profiles were fitted at (each calibration label names it)
    for rt in SERVE:
        lc = launch_config(LLAMA, "H100_SXM", runtime=rt, tp=8, **SMALL)
        assert f"{rt} {version(rt)}" in lc.manifest["calibration"] or lc.manifest["calibration"].startswith(
            ("runtime-profile", "borrowed", "uncalibrated")
        )
    assert version("vllm") == "0.24.0" and version("sglang") == "0.5.14" and version("trtllm") == "1.3.0rc20"
    # the reference is whole, not only the flags ridgeline writes
    assert len(known("vllm", "vllm serve")) > 200 and len(known("sglang", SERVE["sglang"])) > 300


def test_commands_realise_the_plan():
    v = launch_config(MOE, "H200_SXM", runtime="vllm", tp=1, ep=4, attention_dp=4, **SMALL)
    (a,) = [i.argv for i in v.instances]
    sim_sched = v.manifest["scheduler"]
    assert _flag(a, "--tensor-parallel-size") == "1" and _flag(a, "--data-parallel-size") == "4"
    assert "--enable-expert-parallel" in a and v.instances[0].devices == (0, 1, 2, 3)
    assert int(_flag(a, "--max-num-seqs")) == sim_sched["max_num_seqs"]
    assert int(_flag(a, "--max-num-batched-tokens")) == sim_sched["max_num_batched_tokens"]
    s = launch_config(MOE, "H200_SXM", runtime="sglang", tp=1, ep=4, attention_dp=4, **SMALL).instances[0].argv
    assert _flag(s, "--tp-size") == "4" and _flag(s, "--dp-size") == "4" and "--enable-dp-attention" in s
    t = launch_config(MOE, "H200_SXM", runtime="trtllm", tp=1, ep=4, attention_dp=4, **SMALL).instances[0]
    assert _flag(t.argv, "--tp_size") == "4" and _flag(t.argv, "--ep_size") == "4"
    assert yaml.safe_load(t.files["serve.yaml"])["enable_attention_dp"] is True


def test_disaggregated_units_place_pools_and_route():
    v = launch_config(LLAMA, "H200_SXM", runtime="vllm", **SMALL, **DISAGG)
    assert [(i.role, i.devices) for i in v.instances] == [
        ("prefill", (0, 1)), ("prefill", (2, 3)), ("decode", (4, 5, 6, 7))]  # fmt: skip
    assert all(json.loads(_flag(i.argv, "--kv-transfer-config"))["kv_connector"] == "NixlConnector"
               for i in v.instances)  # fmt: skip
    assert v.manifest["kv_transfer"]["fabric"] == "scale-up-nccl" and v.manifest["devices_per_unit"] == 8
    s = launch_config(LLAMA, "H200_SXM", runtime="sglang", **SMALL, **DISAGG)
    assert [_flag(i.argv, "--disaggregation-mode") for i in s.instances] == ["prefill", "prefill", "decode"]
    t = launch_config(LLAMA, "H200_SXM", runtime="trtllm", **SMALL, **DISAGG)
    cfg = yaml.safe_load(t.front.files["disagg.yaml"])
    assert cfg["context_servers"]["urls"] == ["localhost:8001", "localhost:8002"]
    assert cfg["generation_servers"] == {"num_instances": 1, "urls": ["localhost:8003"]}


def test_a_unit_across_nodes_places_each_instance_on_a_node_and_routes_by_node():
    # 2P TP 8 + 1D TP 8 on H200 (nodes of 8): three nodes, each instance the devices 0-7 of its own,
    # its KV over the NIC; servers reached by node name and listening beyond their node
    span = {"prefill_instances": 2, "decode_instances": 1, "tp": 8}
    t = launch_config(LLAMA, "H200_SXM", runtime="trtllm", **SMALL, **span)
    assert [(i.role, i.node, i.devices) for i in t.instances] == [
        ("prefill", 0, tuple(range(8))), ("prefill", 1, tuple(range(8))), ("decode", 2, tuple(range(8)))]  # fmt: skip
    assert t.manifest["devices_per_unit"] == 24 and t.manifest["kv_transfer"]["fabric"] == "scale-out"
    cfg = yaml.safe_load(t.front.files["disagg.yaml"])
    assert cfg["context_servers"]["urls"] == ["node0:8001", "node1:8002"]
    assert all(_flag(i.argv, "--host") == "0.0.0.0" for i in t.instances)
    script = t.files()["launch.sh"]
    assert "One unit on 3 nodes" in script and script.index("# node1") < script.index("--port 8002")
    s = launch_config(LLAMA, "H200_SXM", runtime="sglang", **SMALL, **span)
    assert all(_flag(i.argv, "--host") == "0.0.0.0" for i in s.instances)
    assert "node2:8002" in " ".join(s.notes)
    # an instance wider than a node is refused, naming what would be needed
    with pytest.raises(PlanError, match="an instance of 16 devices spans nodes of 8"):
        launch_config(LLAMA, "H200_SXM", runtime="vllm", tp=16, **SMALL)
    # a device with no scale-up domain in the catalog (PCIe cards): the unit is one node, as priced
    pcie = launch_config("meta-llama/Llama-3.1-8B", "L40S", runtime="vllm", tp=2, **SMALL)
    assert [(i.node, i.devices) for i in pcie.instances] == [(0, (0, 1))]
    assert "One unit on one node" in pcie.files()["launch.sh"]


def test_refusals_name_the_way_out(tmp_path):
    with pytest.raises(PlanError, match="--runtime chooses"):
        launch_config("meta-llama/Llama-3.1-8B", "RTX_4090", runtime="llamacpp-cuda", max_num_batched_tokens=512,
                      max_num_seqs=4, block_size=16, max_model_len=4096, **SMALL)  # fmt: skip
    lc = launch_config("meta-llama/Llama-3.1-8B", "H100_SXM", **SMALL)
    lc.write(tmp_path / "x")
    with pytest.raises(PlanError, match="--force"):
        lc.write(tmp_path / "x")
    assert (tmp_path / "x" / "launch.sh").read_text().count("vllm serve") == 1
    (tmp_path / "f").write_text("")
    with pytest.raises(PlanError, match="is a file"):
        lc.write(tmp_path / "f" / "sub")


def test_plan_emit_writes_both_plans(tmp_path):
    args = ("plan", "-m", "meta-llama/Llama-3.1-8B", "-H", "H100_SXM", "--gpus", "2", "--prompt", "512",
            "--output", "64", "--slo-tpot-ms", "50", "--tp", "1", "--emit", str(tmp_path / "out"))  # fmt: skip
    r = run(*args)
    assert r.returncode == 0, r.stderr
    for kind in ("aggregated", "disaggregated"):
        m = yaml.safe_load((tmp_path / "out" / kind / "manifest.yaml").read_text())
        assert m["copies"] * m["devices_per_unit"] == 2 and m["runtime"] == "vllm 0.24.0"
        assert (tmp_path / "out" / kind / "launch.sh").read_text().startswith("#!/usr/bin/env bash")
    again = run(*args)
    assert again.returncode == 2 and "--force" in again.stderr


def test_simulate_emit_writes_the_run_it_simulated(tmp_path):
    out = tmp_path / "sim"
    args = ("simulate", "-m", MOE, "-H", "H200_SXM", "--tp", "1", "--ep", "4", "--attention-dp", "4", "--rate", "4",
            "--requests", "40", "--runtime", "sglang", "--instances", "2", "--emit", str(out))  # fmt: skip
    r = run(*args)
    assert r.returncode == 0, r.stderr
    m = yaml.safe_load((out / "manifest.yaml").read_text())
    assert m["runtime"] == "sglang 0.5.14" and m["devices_per_unit"] == 8 and len(m["pools"]) == 2
    assert [p["devices"] for p in m["pools"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert "round_robin" in (out / "launch.sh").read_text()
    again = run(*args)
    assert again.returncode == 2 and "--force" in again.stderr
    many = run("simulate", "-m", LLAMA, "-H", "H200_SXM", "--tp", "8", "--rate", "1,2", "--requests", "10", "--emit",
               str(tmp_path / "x"))  # fmt: skip
    assert many.returncode == 2 and "--emit: one run at a time" in many.stderr


def test_recommend_emit_writes_the_cheapest_plan(tmp_path):
    r = run("recommend", "-m", "meta-llama/Llama-3.1-8B", "--rate", "5", "--slo-ttft-ms", "1000", "--slo-tpot-ms",
            "50", "-H", "L40S", "--requests", "100", "--json", "--emit", str(tmp_path / "rec"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    best = json.loads(r.stdout)["plans"][0]
    m = yaml.safe_load((tmp_path / "rec" / "manifest.yaml").read_text())
    assert m["copies"] == best["replicas"] and m["hardware"] == "L40S" and m["runtime"].startswith(best["runtime"])
    (pool,) = m["pools"]
    # the context length the search sized the fleet for, not the model's maximum
    assert pool["command"][pool["command"].index("--max-model-len") + 1] == str(best["launch"]["max_model_len"])
    assert m["scheduler"]["max_model_len"] == 1280


def test_the_issue_example_emits_both_plans(tmp_path):
    # issue 46's done-when example, as a planner runs it
    r = run("plan", "-m", LLAMA, "-H", "H200_SXM", "--gpus", "16", "--prompt", "8192", "--output", "1024",
            "--slo-tpot-ms", "30", "--emit", str(tmp_path / "x"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "best aggregated" in r.stdout and "best disaggregated" in r.stdout and "frontier" in r.stdout
    for kind in ("aggregated", "disaggregated"):
        m = yaml.safe_load((tmp_path / "x" / kind / "manifest.yaml").read_text())
        assert m["copies"] * m["devices_per_unit"] == 16
        assert m["predicted"]["tpot_p90_ms"] <= 30
        label = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith(f"best {kind}"))
        assert m["plan"] in label


def test_estimate_emit_writes_the_plan_it_priced(tmp_path):
    out = tmp_path / "est"
    r = run("estimate", "-m", "deepseek-ai/DeepSeek-V3", "-H", "H200_SXM", "--tp", "8", "--ep", "8", "--batch", "16",
            "--runtime", "trtllm", "--speculative", "mtp", "--draft-tokens", "2", "--emit", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    cfg = yaml.safe_load((out / "serve.yaml").read_text())
    assert cfg["speculative_config"] == {"decoding_type": "MTP", "num_nextn_predict_layers": 2}
    argv = yaml.safe_load((out / "manifest.yaml").read_text())["pools"][0]["command"]
    assert _flag(argv, "--tp_size") == "8" and _flag(argv, "--ep_size") == "8"
    off = run(
        "estimate", "-m", "openai/gpt-oss-120b", "-H", "RTX_4090", "--offload", "auto", "--emit", str(tmp_path / "o")
    )
    assert off.returncode == 2 and "offloading plan" in off.stderr
