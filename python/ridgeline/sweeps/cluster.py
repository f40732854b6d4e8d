"""Where the work of a sweep, a grid of simulations or a recommend search runs: in this process,
or as tasks on a Ray cluster (the optional extra, ``pip install "ridgeline[ray]"``).

The caller cuts its work into tasks, each a call of a module-level function on plain arguments
(a chunk of a sweep's grid, one simulated scenario, one recommend candidate), and hands them to
``run_tasks``. On Ray each task runs in a worker process of its own (one CPU; a sweep's chunk
runs the Rust core on one thread, so a node of N cores evaluates N chunks at once); a worker that
dies mid-task is replaced and its task run again by Ray (``TASK_RETRIES`` attempts more); results
come back to the driver, which hands each to the caller as it arrives (a sweep writes its part)
and returns them in task order, so a result never depends on where or in which order tasks ran.

Every task first checks that its worker runs the driver's ridgeline: the same version, the same
shipped data and the same hardware catalog (``fingerprint``), else it refuses with a
``ClusterError`` naming the node: a cluster of mixed installs would price plans differently on
different nodes. A ridgeline error a task raises (an unknown model, a bad plan) reaches the
caller as itself, with its exit code.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any, Optional

from .. import _data
from .._checks import whole
from ..errors import ClusterError, PlanError, RidgelineError

BACKENDS = ("local", "ray")

#: How to get the Ray backend where it is not installed.
INSTALL_HINT = 'pip install "ridgeline[ray]"'

#: Attempts Ray makes again at a task whose worker process died (killed, out of memory, its node
#: lost) before the run fails. A policy of the backend (Ray's own default is 3), not a number
#: that shapes a prediction: a task is deterministic, so running it again gives the same result.
TASK_RETRIES = 3

#: Tasks kept in flight per CPU of the cluster: enough that no CPU waits for the driver, few
#: enough that a grid of a million chunks is not submitted at once (results held in the store).
IN_FLIGHT_PER_CPU = 2

#: The environment variables a worker must see as the driver does: the user's hardware files
#: and constants override (``Catalog``), sent to the workers with the job.
_CATALOG_ENV = ("RIDGELINE_HARDWARE", "RIDGELINE_CONSTANTS")


def check_backend(backend: str, ray_address: Optional[str] = None) -> str:
    """The backend, checked: ``local`` or ``ray``; an address goes with ``ray`` only.

    >>> check_backend("dask")
    Traceback (most recent call last):
    ...
    ridgeline.errors.PlanError: backend: 'dask' is not one of local, ray
    """
    if backend not in BACKENDS:
        raise PlanError(f"backend: {backend!r} is not one of {', '.join(BACKENDS)}")
    if ray_address is not None:
        if backend != "ray":
            raise PlanError("ray_address: goes with backend='ray'")
        if not isinstance(ray_address, str) or not ray_address.strip():
            raise PlanError(f"ray_address: expected 'local', 'auto' or host:port (or ray://host:port), got "
                            f"{ray_address!r}")  # fmt: skip
    return backend


def by_name(name: str, value: Any, backend: str) -> None:
    """On Ray a model or device travels to the workers as its name (an id, a catalog name or a
    config path each node can read): the loaded objects hold the Rust core's handles, which
    are not sent.

    >>> by_name("model", 3, "ray")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ridgeline.errors.PlanError: model: with backend='ray' give it by name (an id, ...), not as a loaded int
    """
    if backend == "ray" and value is not None and not isinstance(value, str):
        raise PlanError(f"{name}: with backend='ray' give it by name (an id, a catalog name or a config path every "
                        f"node can read), not as a loaded {type(value).__name__}")  # fmt: skip


def import_ray() -> Any:
    """The ``ray`` module, or a PlanError saying how to install it (CLI exit code 2)."""
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise PlanError(f"--ray needs the Ray backend, which is not installed: {INSTALL_HINT}") from None


def fingerprint() -> dict[str, str]:
    """What must be the same on the driver and every worker for a task to give the driver's
    result: the ridgeline version, the shipped data's hash, and the default catalog's
    fingerprint (the shipped devices plus any ``RIDGELINE_HARDWARE`` / ``RIDGELINE_CONSTANTS``
    files)."""
    from .._version import __version__
    from ..catalog.store import default_catalog

    return {"version": __version__, "data": _data.data_hash(), "catalog": default_catalog().fingerprint}


@dataclasses.dataclass(frozen=True)
class RunReport:
    """Where a run's tasks ran and how long they took: ``nodes`` maps a node's label (its host
    and, on Ray, the start of its node id) to ``{"tasks": n, "seconds": s}``; ``skipped`` counts
    the tasks a resumed run found complete and did not run again; ``slowest_s`` is the longest
    task (no run on any cluster ends sooner)."""

    backend: str
    tasks: int
    skipped: int
    wall_s: float
    task_s: float
    slowest_s: float
    nodes: dict[str, dict[str, float]]

    def text(self) -> str:
        """One line for people: ``12 tasks on 2 nodes (a: 6 in 3.1 s, b: 6 in 3.0 s), ...``."""
        where = ", ".join(f"{k}: {int(v['tasks'])} in {v['seconds']:.2f} s" for k, v in sorted(self.nodes.items()))
        nodes = len(self.nodes)
        skip = f"; {self.skipped} already complete and verified, skipped" if self.skipped else ""
        on = f"on {nodes} node{'s' if nodes != 1 else ''} ({where})" if nodes else "(none to run)"
        return (f"{self.tasks} task{'s' if self.tasks != 1 else ''} {on}{skip}; {self.wall_s:.2f} s wall, "
                f"{self.task_s:.2f} s of task time, the slowest {self.slowest_s:.2f} s [{self.backend}]")  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _call(fn: Callable[..., Any], args: Sequence[Any], expect: Optional[dict[str, str]]) -> dict[str, Any]:
    """One task, where it runs: the fingerprint checked, ``fn(*args)`` called, its value or its
    ridgeline error returned with the node and the seconds it took."""
    t0 = time.perf_counter()
    node = socket.gethostname()
    if expect is not None:
        ray = importlib.import_module("ray")
        node += f" {ray.get_runtime_context().get_node_id()[:8]}"
        got = fingerprint()
        if got != expect:
            diff = ", ".join(f"{k} {got[k]} (the driver's: {expect[k]})" for k in expect if got.get(k) != expect[k])
            return {"error": ("ClusterError", f"the worker on {node} runs another ridgeline: {diff}; install the "
                              "driver's ridgeline and hardware files on every node"), "node": node}  # fmt: skip
    try:
        value = fn(*args)
    except RidgelineError as e:
        return {"error": (type(e).__name__, str(e)), "node": node}
    return {"value": value, "node": node, "seconds": time.perf_counter() - t0}


def _raise(name: str, message: str) -> None:
    from .. import errors

    cls = getattr(errors, name, RidgelineError)
    raise cls(message)


def run_tasks(
    fn: Callable[..., Any],
    tasks: Sequence[Sequence[Any]],
    *,
    backend: str = "local",
    ray_address: Optional[str] = None,
    on_result: Optional[Callable[[int, Any], None]] = None,
    keep: bool = True,
    skipped: int = 0,
    progress: Optional[Callable[[int, int], Any]] = None,
) -> tuple[list[Any], RunReport]:
    """``[fn(*t) for t in tasks]``, here or on Ray, and where they ran.

    ``on_result(i, value)`` is called on the driver as each task's value arrives (in any order on
    Ray); the values are returned in task order. With ``keep=False`` they are not kept (``None``
    in the list): a sweep's parts go to disk as they come, never all in memory.
    ``skipped`` is reported as the tasks a resumed run did not need to run. ``progress`` is called
    with (tasks done, tasks) before the first and as each ends.

    >>> values, report = run_tasks(pow, [(2, 3), (3, 2)])
    >>> values, report.tasks
    ([8, 9], 2)
    """
    check_backend(backend, ray_address)
    whole("skipped", skipped, 0)
    t0 = time.perf_counter()
    out: list[Any] = [None] * len(tasks)
    nodes: dict[str, dict[str, float]] = {}
    slowest = 0.0

    def take(i: int, r: dict[str, Any]) -> None:
        nonlocal slowest
        if "error" in r:
            _raise(*r["error"])
        slowest = max(slowest, r["seconds"])
        n = nodes.setdefault(r["node"], {"tasks": 0, "seconds": 0.0})
        n["tasks"] += 1
        n["seconds"] += r["seconds"]
        if on_result is not None:
            on_result(i, r["value"])
        if keep:
            out[i] = r["value"]
        if progress is not None:
            progress(sum(int(v["tasks"]) for v in nodes.values()), len(tasks))

    if progress is not None:
        progress(0, len(tasks))

    if backend == "local":
        for i, t in enumerate(tasks):
            take(i, _call(fn, t, None))
    elif tasks:
        _run_on_ray(fn, tasks, ray_address, take)
    task_s = sum(v["seconds"] for v in nodes.values())
    return out, RunReport(backend, len(tasks), skipped, time.perf_counter() - t0, task_s, slowest, nodes)


def _run_on_ray(
    fn: Callable[..., Any], tasks: Sequence[Sequence[Any]], address: Optional[str],
    take: Callable[[int, dict[str, Any]], None],
) -> None:  # fmt: skip
    ray = import_ray()
    started = _connect(ray, address)
    try:
        expect = fingerprint()
        remote = ray.remote(num_cpus=1, max_retries=TASK_RETRIES, retry_exceptions=False)(_call)
        fn_ref = ray.put(fn)
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        window = IN_FLIGHT_PER_CPU * cpus
        pending: dict[Any, int] = {}
        queue = iter(enumerate(tasks))
        try:
            while True:
                while len(pending) < window:
                    nxt = next(queue, None)
                    if nxt is None:
                        break
                    i, t = nxt
                    # the task's name is its worker's process title while it runs: ray::ridgeline <fn> <i>
                    name = f"ridgeline {fn.__name__.lstrip('_')} {i}"
                    pending[remote.options(name=name).remote(fn_ref, list(t), expect)] = i
                if not pending:
                    return
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    i = pending.pop(ref)
                    try:
                        r = ray.get(ref)
                    except ray.exceptions.RayError as e:
                        first = (str(e).strip().splitlines() or [type(e).__name__])[-1]
                        raise ClusterError(f"task {i} failed on the cluster ({type(e).__name__}: {first}; a task "
                                           f"whose worker died is run again up to {TASK_RETRIES} times); a sweep "
                                           "into a folder resumes from the parts that landed") from None  # fmt: skip
                    take(i, r)
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
    finally:
        if started:
            ray.shutdown()


def _token_auth() -> None:
    """Before joining a running cluster: where RAY_AUTH_MODE is unset and a Ray token is at hand
    (RAY_AUTH_TOKEN, the file RAY_AUTH_TOKEN_PATH names, or ~/.ray/auth_token), token
    authentication is turned on for this process, as ``ray start`` does for the processes it
    starts (Ray's own ``maybe_enable_token_auth_if_token_available``). A cluster started once a
    token existed requires it, and a Ray 2.60 driver does not turn it on by itself; a cluster
    without authentication accepts a driver that sends one. A Ray without token authentication
    has nothing to turn on."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    try:
        setup = importlib.import_module("ray._private.authentication.authentication_token_setup")
    except ImportError:
        return
    enable = getattr(setup, "maybe_enable_token_auth_if_token_available", None)
    if enable is not None:
        enable(warn_if_disabled=False)


#: How long a cluster's address may take to accept a connection before it is called unreachable.
#: A wait bound, not a model constant: Ray itself retries an address where nothing listens every
#: few seconds for ever, so without it ``--ray host:port`` to a wrong address hangs.
CONNECT_TIMEOUT_S = 10.0


def _reachable(address: str) -> None:
    """Refuses (ClusterError) a cluster address where nothing accepts a connection within
    CONNECT_TIMEOUT_S: host:port or ray://host:port (the GCS or the client server). An empty
    address (``auto`` without RAY_ADDRESS: Ray finds the cluster started on this machine, or
    says at once there is none) and one without a port are left to Ray."""
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if address in ("", "auto", "local") or not sep or not port.isdigit():
        return
    host = host.strip("[]")  # an IPv6 literal
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except (OSError, ValueError, OverflowError) as e:
        timed_out = isinstance(e, (TimeoutError, socket.timeout))
        why = f"no answer within {CONNECT_TIMEOUT_S:g} s" if timed_out else (
            getattr(e, "strerror", None) or str(e) or type(e).__name__)  # fmt: skip
        raise ClusterError(
            f"cannot connect to the Ray cluster at {address!r}: {why} (is `ray start --head` running there, and is "
            "the port its GCS or client server?)"
        ) from None


def _connect(ray: Any, address: Optional[str]) -> bool:
    """Joins the cluster at ``address`` (``auto``: the one running on this machine or named by
    RAY_ADDRESS; host:port or ray://host:port: that one) or, with none or ``local``, starts a
    local Ray with this machine's CPUs; returns whether this call started the connection (and
    so ends it). A program that has called ``ray.init`` itself keeps its connection. Ray's usage
    statistics stay off unless the user turned them on: ridgeline works offline."""
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address not in (None, "local"):
        _token_auth()
    env = {k: os.environ[k] for k in _CATALOG_ENV if k in os.environ}
    target = None if address in (None, "local") else address
    if target is not None:
        _reachable(os.environ.get("RAY_ADDRESS", "") if target == "auto" else target)
    kw: dict[str, Any] = {"include_dashboard": False} if target is None else {}
    try:
        # Ray's own notes (connecting, started) at warning level: the command's output is its result
        ray.init(address=target or "local", runtime_env={"env_vars": env} if env else None,
                 log_to_driver=False, logging_level=logging.WARNING, **kw)  # fmt: skip
    except Exception as e:  # Ray raises ConnectionError, RuntimeError or ValueError by case
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        where = "start a local Ray" if target is None else f"connect to the Ray cluster at {target!r}"
        raise ClusterError(f"cannot {where}: {first}") from None
    return True
