import os
import tempfile

# A private catalog cache for the test session (built once, from the embedded data).
os.environ.setdefault("RIDGELINE_CACHE_DIR", tempfile.mkdtemp(prefix="ridgeline-test-cache-"))
os.environ.pop("RIDGELINE_HARDWARE", None)
