"""The peers benches measure ridgeline against, each in a venv of its own (never a dependency)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path


def peer_python(given: str | None, venv_name: str, requirement: str) -> str:
    """``given``, else the python of a venv under the system temp folder holding ``requirement``
    (made and installed from PyPI on first use)."""
    if given:
        return given
    venv = Path(tempfile.gettempdir()) / venv_name
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", requirement], check=True)
    return str(py)
