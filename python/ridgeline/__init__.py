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

from typing import TYPE_CHECKING, Any

from ._version import __version__
from .catalog.device import Device
from .catalog.store import Catalog
from .engine.estimate import estimate
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

if TYPE_CHECKING:
    from .engine.plan import Plan
    from .serving.result import Simulation
    from .serving.simulator import simulate, simulate_grid
    from .sweeps.sweep import Dataset, sweep, write_folder

#: The public names read when first named, each from its module: a cold estimate imports the
#: engine, the catalog and the models, not the simulator, the sweeps or the Plan dataclass.
_LAZY = {
    "Plan": "engine.plan", "Simulation": "serving.result", "simulate": "serving.simulator",
    "simulate_grid": "serving.simulator", "Dataset": "sweeps.sweep", "sweep": "sweeps.sweep",
    "write_folder": "sweeps.sweep",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'ridgeline' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


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
