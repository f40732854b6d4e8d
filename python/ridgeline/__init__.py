"""ridgeline: an LLM inference performance estimator with a Rust core.

>>> import ridgeline
>>> e = ridgeline.estimate("meta-llama/Llama-3.1-8B", "H100_SXM")
>>> e.fits
True
>>> ridgeline.estimate("meta-llama/Llama-3.1-8B", "H100_SXM", plan=ridgeline.Plan(tp=2)).plan["tp"]
2
>>> ridgeline.sweep({"model": "meta-llama/Llama-3.1-8B", "hardware": "H100_SXM", "batch": [1, 8]}).height
2
"""

from ._version import __version__
from .catalog.device import Device
from .catalog.store import Catalog
from .engine.estimate import estimate
from .engine.plan import Plan
from .engine.result import Estimate
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
from .models.config import Model
from .recommend import Recommendation, recommend
from .serving.result import Simulation
from .serving.simulator import simulate, simulate_grid
from .sweeps.sweep import Dataset, sweep, write_folder

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
    "Plan",
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
