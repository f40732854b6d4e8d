"""A Ray cluster on this machine for tests and benches: a head with no CPUs of its own and
``workers`` worker nodes of one CPU each, all on 127.0.0.1, each a ``ray start --block`` process
of its own (``ray start --head``, then ``ray start --address``), stopped when the block ends."""

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from ridgeline.sweeps import cluster


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def local_cluster(workers: int = 2) -> Iterator[str]:
    """Yields the head's address once every worker has joined; stops every process it started.

    The cluster and this process use token authentication (Ray's default for a new cluster)
    with a token of their own in a temporary file, so nothing is written to ~/.ray and a token
    there does not change the test."""
    import ray

    exe = str(Path(sys.executable).with_name("ray"))
    port = _free_port()
    address = f"127.0.0.1:{port}"
    folder = tempfile.mkdtemp(prefix="ridgeline-ray-")
    token = Path(folder) / "auth_token"
    token.write_text(secrets.token_hex(32))
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")}
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(token)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token"}
    common = ["--block", "--node-ip-address", "127.0.0.1", "--object-store-memory", str(100 * 2**20)]
    procs: list[subprocess.Popen] = []

    def start(*args: str) -> None:
        procs.append(subprocess.Popen([exe, "start", *args, *common], env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True))  # fmt: skip

    try:
        start("--head", "--port", str(port), "--num-cpus", "0", "--include-dashboard=false", "--disable-usage-stats")
        for _ in range(300):  # the head's GCS listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        cluster._token_auth()  # as a driver joining it does (ridgeline.sweeps.cluster)
        ray.init(address=address, logging_level="WARNING")
        try:
            # one worker at a time: two raylets starting at once on one machine race for a socket name
            for nodes in range(2, workers + 2):
                start("--address", address, "--num-cpus", "1")
                for _ in range(600):
                    if sum(n["Alive"] for n in ray.nodes()) == nodes:
                        break
                    time.sleep(0.1)
                else:
                    raise RuntimeError(f"the local Ray cluster did not come up: {ray.nodes()}")
            if ray.cluster_resources().get("CPU") != workers:
                raise RuntimeError(f"the local Ray cluster has {ray.cluster_resources().get('CPU')} CPUs")
        finally:
            ray.shutdown()
        yield address
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(folder, ignore_errors=True)
