"""Shared by every test: a private catalog cache for the session, and the constants tests name
(the repository's root, the model most tests price)."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

#: The repository's root (tests/ sits one level below it).
REPO = Path(__file__).resolve().parent.parent
#: The model most tests price: a dense GQA model every device and runtime has data for.
LLAMA = "meta-llama/Llama-3.1-8B"


def run(*args, cwd=None):
    """The installed ``ridgeline`` command run in a process of its own (``python -m ridgeline.cli``
    where the script is not beside this interpreter)."""
    exe = Path(sys.executable).with_name("ridgeline")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "ridgeline.cli"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, cwd=cwd, env=os.environ.copy())


# A private catalog cache for the test session (built once, from the embedded data).
os.environ.setdefault("RIDGELINE_CACHE_DIR", tempfile.mkdtemp(prefix="ridgeline-test-cache-"))
os.environ.pop("RIDGELINE_HARDWARE", None)


@pytest.fixture
def eagle3_curve(tmp_path):
    """A user's EAGLE-3 acceptance curve at depths 1-3 (AL 1.8, 2.4, 2.9: P(the first i drafts
    kept) 0.8, 0.6, 0.5), in the columns of data/speculation/acceptance_curves.csv."""
    p = tmp_path / "acceptance.csv"
    p.write_text("method,depth,acceptance_length\neagle3,1,1.8\neagle3,2,2.4\neagle3,3,2.9\n")
    return str(p)
