"""A fresh fit's CSV against the shipped one, cell by cell.

The fits are deterministic on one machine (seeded differential evolution, then least_squares),
but not bit for bit across machines: libm's log and exp differ by an ulp between CPUs, and a
parameter along a flat direction of the objective (an overlap pinned near its bound, say)
moves by about 1e-4 of its value. So numbers are compared to REL; everything else (row
order, integer counts, the data hash, the structure version, the sources) exactly. A change of data
or structure moves the hash or the fit by far more.
"""

import csv
import io
import math

REL = 1e-3
# a parameter at its bound of 0 prints as ~1e-19 on one machine and ~1e-23 on another
ABS = 1e-12


EXACT = {"structure_version", "data_hash", "fitted_at", "runtime_version"}


def _number(col: str, x: str):
    """A fitted real number, else None (compared exactly): counts, hashes and versions are exact."""
    if col in EXACT or x.lstrip("-").isdigit():
        return None
    try:
        return float(x)
    except ValueError:
        return None


def assert_same_fit_table(got: str, want: str) -> None:
    a = list(csv.reader(io.StringIO(got)))
    b = list(csv.reader(io.StringIO(want)))
    assert a[0] == b[0], "columns differ"
    assert len(a) == len(b), f"{len(a) - 1} rows fitted, {len(b) - 1} shipped"
    head = a[0]
    for i, (ra, rb) in enumerate(zip(a[1:], b[1:]), start=1):
        assert len(ra) == len(rb) == len(head), f"row {i}: width differs"
        for col, x, y in zip(head, ra, rb):
            fx, fy = _number(col, x), _number(col, y)
            if fx is None or fy is None or not (math.isfinite(fx) and math.isfinite(fy)):
                assert x == y, f"row {i} ({ra[:3]}), {col}: fitted {x!r}, shipped {y!r}"
            else:
                assert math.isclose(fx, fy, rel_tol=REL, abs_tol=ABS), (
                    f"row {i} ({ra[:3]}), {col}: fitted {x}, shipped {y}"
                )
