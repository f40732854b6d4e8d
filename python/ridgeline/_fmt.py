"""Numbers as people read them: significant digits, thousands separators, units, never an exponent."""

from __future__ import annotations

import math
from typing import Optional


def sig(x: float, digits: int = 3) -> str:
    """``x`` rounded to ``digits`` significant digits in positional notation (``3,280``,
    ``9.77``, ``0.0123``): no exponent however large or small, trailing zeros kept to the digits."""
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    places = digits - 1 - math.floor(math.log10(abs(x)))
    r = round(x, places)
    if r != 0 and math.floor(math.log10(abs(r))) != math.floor(math.log10(abs(x))):
        places -= 1  # 9.996 -> 10.0, one digit fewer after the point
        r = round(x, places)
    return f"{r:,.{max(places, 0)}f}"


def ms(seconds: Optional[float], digits: int = 3) -> str:
    """A time in milliseconds; "n/a" for none."""
    return "n/a" if seconds is None else f"{sig(seconds * 1e3, digits)} ms"


def duration_us(us: float) -> str:
    """A duration given in microseconds, in us below a millisecond and in ms above."""
    return f"{sig(us / 1e3)} ms" if us >= 1e3 else f"{sig(us)} us"


def pct(fraction: float) -> str:
    """A fraction as a percentage to two significant digits (``82%``, ``4.4%``)."""
    return f"{sig(fraction * 100, 2)}%"


def table(rows: list[tuple[str, str]]) -> str:
    """Label-value lines, the values aligned, indented two spaces."""
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)
