"""Shared by every test: a private catalog cache for the session, and the constants tests name
(the repository's root, the model most tests price)."""

import os
import tempfile
from pathlib import Path

#: The repository's root (tests/ sits one level below it).
REPO = Path(__file__).resolve().parent.parent
#: The model most tests price: a dense GQA model every device and runtime has data for.
LLAMA = "meta-llama/Llama-3.1-8B"

# A private catalog cache for the test session (built once, from the embedded data).
os.environ.setdefault("RIDGELINE_CACHE_DIR", tempfile.mkdtemp(prefix="ridgeline-test-cache-"))
os.environ.pop("RIDGELINE_HARDWARE", None)
