"""ridgeline: an LLM inference performance estimator with a Rust core.

>>> import ridgeline
>>> e = ridgeline.estimate("meta-llama/Llama-3.1-8B", "H100_SXM")
>>> e.fits
True
"""

from ._version import __version__
from .catalog import Catalog, Device
from .errors import (
    CatalogError,
    DoesNotFitError,
    HardwareError,
    ModelConfigError,
    PlanError,
    RidgelineError,
    UnknownNameError,
)
from .estimate import Estimate, estimate
from .models import Model
from .serving import Simulation, simulate

__all__ = [
    "Catalog",
    "CatalogError",
    "Device",
    "DoesNotFitError",
    "Estimate",
    "HardwareError",
    "Model",
    "ModelConfigError",
    "PlanError",
    "RidgelineError",
    "Simulation",
    "UnknownNameError",
    "__version__",
    "estimate",
    "simulate",
]
