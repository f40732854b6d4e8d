"""Shared by every test: a private catalog cache for the session, and the constants tests name
(the repository's root, the model most tests price)."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

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
