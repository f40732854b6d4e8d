"""ridgeline: an LLM inference performance estimator with a Rust core.

>>> import ridgeline
>>> e = ridgeline.estimate("meta-llama/Llama-3.1-8B", "H100_SXM")
>>> e.fits
True
>>> ridgeline.sweep({"model": "meta-llama/Llama-3.1-8B", "hardware": "H100_SXM", "batch": [1, 8]}).height
2
"""

from ._version import __version__
from .catalog import Catalog, Device
from .errors import (
    CatalogError,
    ClusterError,
    DoesNotFitError,
    HardwareError,
    ModelConfigError,
    PlanError,
    RidgelineError,
    UnknownNameError,
)
from .estimate import Estimate, estimate
from .models import Model
from .recommend import Recommendation, recommend
from .serving import Simulation, simulate, simulate_grid
from .sweeps import Dataset, sweep, write_folder

__all__ = [
    "Catalog",
    "CatalogError",
    "ClusterError",
    "Dataset",
    "Device",
    "DoesNotFitError",
    "Estimate",
    "HardwareError",
    "Model",
    "ModelConfigError",
    "PlanError",
    "Recommendation",
    "RidgelineError",
    "Simulation",
    "UnknownNameError",
    "__version__",
    "estimate",
    "recommend",
    "simulate",
    "simulate_grid",
    "sweep",
    "write_folder",
]
