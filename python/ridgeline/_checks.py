"""The checks every entry point puts a user's value through, one function a kind: each returns
the value or raises a PlanError naming the input, the value and what is accepted.

They sit below the modules that take plans (collectives, estimate, sweep, cli) so every door
shares them."""

from __future__ import annotations

import math
import os
import sys
from typing import Any

from .errors import PlanError

#: The largest integer every f64 holds exactly (2^53): the core counts tokens, devices, steps and
#: bytes below it (a representation limit, the core's MAX_EXACT).
MAX_EXACT = 2**53


def whole(name: str, v: Any, floor: int) -> int:
    """A whole number in [floor, 2^53]; a float that is a whole number is taken as one.

    >>> whole("batch", 8.0, 1)
    8
    """
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise PlanError(f"{name}: must be a whole number >= {floor}, got {v!r}")
    if v < floor:
        raise PlanError(f"{name}: must be a whole number >= {floor}, got {v}")
    if v > MAX_EXACT:
        raise PlanError(f"{name}: must be at most 2^53 = {MAX_EXACT:,} (the counts the engine holds exactly), got {v}")
    return int(v)


def flag(name: str, v: Any) -> bool:
    """A boolean, and only a boolean: "no", 0 and "False" are refused rather than read as truthy."""
    if not isinstance(v, bool):
        raise PlanError(f"{name}: must be True or False, got {v!r}")
    return v


def number(name: str, v: Any, *, positive: bool = False) -> float:
    """A finite real number >= 0 (> 0 where ``positive``); an integer beyond a float is refused too.

    >>> number("rate", 10**400)
    Traceback (most recent call last):
    ...
    ridgeline.errors.PlanError: rate: must be a finite number >= 0, got an integer beyond any float (401 digits)
    """
    huge = isinstance(v, int) and not isinstance(v, bool) and abs(v) > sys.float_info.max  # isfinite would raise
    ok = not huge and not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v >= 0
    if not ok or (positive and v == 0):
        got = f"an integer beyond any float ({len(str(abs(v)))} digits)" if huge else repr(v)
        raise PlanError(f"{name}: must be a finite number {'> 0' if positive else '>= 0'}, got {got}")
    return float(v)


def text(name: str, v: Any) -> str:
    """A non-empty, printable string (an empty one is an error, never the default)."""
    if not isinstance(v, str) or not v.strip():
        raise PlanError(f"{name}: expected a non-empty name, got {v!r}")
    if not v.isprintable():
        raise PlanError(f"{name}: a name holds no control characters, got {v!r}")
    return v


def rate(v: Any, requests: int, name: str = "rate") -> float:
    """An open loop's arrival rate (requests/s, > 0) whose ``requests`` arrivals end within 2^53
    seconds: the simulator's clock holds its times exactly below that (at 1e-320/s the first gap
    is infinite and the run never ends).

    >>> rate(2.5, 100)
    2.5
    """
    r = number(name, v, positive=True)
    if requests / r > MAX_EXACT:
        raise PlanError(
            f"{name}: {r:g} requests/s spreads {requests} requests over more than 2^53 seconds; give a rate whose "
            "run ends within the times the simulator holds exactly"
        )
    return r


def threads(v: Any) -> int:
    """A thread count for the core: 0 (all of this machine's cores) up to its core count; more
    buys nothing and a pool of 100,000 threads costs their stacks.

    >>> threads(0)
    0
    """
    n = whole("threads", v, 0)
    cores = os.cpu_count() or 1
    if n > cores:
        raise PlanError(f"threads: this machine has {cores} cores; give 0 (all of them) to {cores}, got {n}")
    return n
