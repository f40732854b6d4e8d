"""ridgeline's exceptions: all are ValueErrors, each with the CLI exit code it maps to.

They are created in the Rust core (one mapping from the core's error enum) and
re-exported here under their public path.
"""

from ._core import (
    CatalogError,
    DoesNotFitError,
    HardwareError,
    InternalError,
    ModelConfigError,
    PlanError,
    RidgelineError,
    UnknownNameError,
)


class ClusterError(RidgelineError):
    """The cluster could not run the work: Ray would not start or connect, a worker runs another
    ridgeline, or a task kept failing after its retries (exit code 5). Raised in Python, by
    ``ridgeline.cluster``; the core's errors come from the Rust mapping."""


EXIT_CODES: dict[type, int] = {
    ClusterError: 5,
    PlanError: 2,
    ModelConfigError: 2,
    HardwareError: 2,
    CatalogError: 2,
    UnknownNameError: 3,
    DoesNotFitError: 4,
    InternalError: 70,
    RidgelineError: 2,
}


def exit_code(e: BaseException) -> int:
    """The CLI exit code of an error: 2 usage, 3 unknown name, 4 does not fit, 5 the cluster failed, 70 a bug
    (InternalError)."""
    for cls in type(e).__mro__:
        if cls in EXIT_CODES:
            return EXIT_CODES[cls]
    return 1


__all__ = [
    "EXIT_CODES",
    "CatalogError",
    "ClusterError",
    "DoesNotFitError",
    "HardwareError",
    "InternalError",
    "ModelConfigError",
    "PlanError",
    "RidgelineError",
    "UnknownNameError",
    "exit_code",
]
