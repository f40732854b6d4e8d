"""A cold estimate: a fresh process, an empty cache. One estimate, from Python or the command line,
with the default runtime or a named one, imports none of the heavy libraries, writes nothing to
the cache and does not price the structure-version panel (the shipped fits are checked in CI)."""

import json
import os
import subprocess
import sys

import pytest
from conftest import LLAMA
from ridgeline.cli.group import COMMANDS

HEAVY = ("numpy", "duckdb", "polars", "scipy", "yaml")
COMMAND_MODULES = sorted(set(COMMANDS.values()))
REPORT = f"""
import json, sys
print(json.dumps({{"heavy": sorted(m for m in {HEAVY!r} if m in sys.modules),
                  "structure_version": "ridgeline.engine.structure" in sys.modules,
                  "commands": sorted(m for m in sys.modules if m.startswith("ridgeline.cli.")
                                     and m.split(".")[2] in {COMMAND_MODULES!r})}}))
"""
API = f"""
import ridgeline
e = ridgeline.estimate({LLAMA!r}, "H100_SXM")
assert e.fits and e.calibration.startswith("calibrated (H100_SXM, vllm"), e.calibration
ridgeline.estimate({LLAMA!r}, "H100_SXM", runtime="llamacpp-cuda")
"""
CLI = f"""
import runpy, sys
sys.argv = ["ridgeline", "estimate", "-m", {LLAMA!r}, "-H", "H100_SXM", "--runtime", "llamacpp-cuda"]
runpy.run_module("ridgeline.cli", run_name="__main__")
"""


@pytest.mark.parametrize("code", [API, CLI], ids=["api", "cli"])
def test_a_cold_estimate_imports_nothing_heavy_and_writes_nothing(code, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RIDGELINE_HARDWARE", "RIDGELINE_CONSTANTS")}
    env["RIDGELINE_CACHE_DIR"] = str(cache)
    r = subprocess.run(
        [sys.executable, "-c", code + REPORT], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
    )
    assert r.returncode == 0, r.stderr
    *printed, report = r.stdout.splitlines()
    # the CLI reads the estimate command's module alone (the others load when their command runs)
    commands = ["ridgeline.cli.estimate"] if code == CLI else []
    assert json.loads(report) == {"heavy": [], "structure_version": False, "commands": commands}
    assert list(cache.iterdir()) == []
    if code == CLI:
        assert any(line.strip().startswith("TTFT") for line in printed)
