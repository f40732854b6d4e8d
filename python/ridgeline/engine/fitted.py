"""The fitted rows a plan is priced with: the shipped calibration (``_fits``, read without numpy
by every estimate) and ``lookup``, which also refuses rows passed in that were fitted against
another structure version than the engine's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from ..catalog.store import Catalog
from .fits import CALIBRATION_FILE as CALIBRATION_FILE
from .fits import HOLDOUT_FILE as HOLDOUT_FILE
from .fits import PARAMS as PARAMS
from .fits import efficiency_json as efficiency_json
from .fits import formats_of as formats_of
from .fits import shipped_fits as shipped_fits
from .fits import shipped_holdout as shipped_holdout
from .runtimes import default_runtime as default_runtime


def lookup(
    hardware: str,
    runtime: Optional[str],
    catalog: Optional[Catalog] = None,
    fits: Optional[Sequence[dict[str, Any]]] = None,
) -> tuple[str, Optional[dict[str, Any]]]:
    """``_fits.lookup``, with rows given as ``fits`` refused when they were fitted against another
    structure version than the engine's (the shipped rows are checked by a test instead)."""
    from . import fits as _fits
    from .structure import structure_version

    structure = None if fits is None else structure_version(catalog)
    return _fits.lookup(hardware, runtime, catalog, fits, structure)
