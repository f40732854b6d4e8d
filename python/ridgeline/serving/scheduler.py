"""A runtime's scheduler settings (data/calibration/runtime_schedulers.csv, each row sourced from the
runtime's code): the fields a user may give over them, and the defaults a runtime on a device takes."""

from __future__ import annotations

import csv
import functools
from typing import Any, Optional

from .. import _data
from ..catalog.device import Device

_SCHEDULERS = "data/calibration/runtime_schedulers.csv"


#: Scheduler fields a user may give, with their types.
SCHEDULER_FIELDS = {
    "max_num_batched_tokens": int,
    "max_num_seqs": int,
    "block_size": int,
    "chunked_prefill": bool,
    "mixed": bool,
    "reserve_full": bool,
    "memory_fraction": float,
    "fraction_of_free": bool,
    "prefix_caching": bool,
}


@functools.lru_cache(maxsize=1)
def _scheduler_rows() -> tuple[dict[str, str], ...]:
    return tuple(csv.DictReader(_data.read_text(_SCHEDULERS).splitlines()))


def has_scheduler(runtime: Optional[str]) -> bool:
    """Whether the simulator knows how ``runtime`` schedules (runtime_schedulers.csv has rows for
    it): the continuous-batching servers do; llama.cpp and the runtime-less bound do not.

    >>> has_scheduler("vllm"), has_scheduler("llamacpp-cuda"), has_scheduler(None)
    (True, False, False)
    """
    return any(r["runtime"] == runtime for r in _scheduler_rows())


def scheduler_defaults(runtime: Optional[str], dev: Device) -> Optional[dict[str, Any]]:
    """How ``runtime`` schedules on ``dev`` by default (its row of runtime_schedulers.csv for the
    device's memory and name, with the row's source), or None where the table has no row.

    >>> from ridgeline.catalog.store import default_catalog
    >>> scheduler_defaults("vllm", default_catalog().get("H100_SXM"))["max_num_batched_tokens"]
    8192
    """
    rows = [
        r for r in _scheduler_rows()
        if r["runtime"] == runtime and dev.memory_gb >= float(r["min_memory_gb"])
        and not (r["not_devices"] and r["not_devices"].lower() in dev.name.lower())
    ]  # fmt: skip
    if not rows:
        return None
    r = max(rows, key=lambda x: float(x["min_memory_gb"]))
    out: dict[str, Any] = {}
    for k, kind in SCHEDULER_FIELDS.items():
        out[k] = r[k] == "true" if kind is bool else kind(r[k])
    out["source"] = r["source"]
    return out
