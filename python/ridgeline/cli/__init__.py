"""The ``ridgeline`` command line (the top layer): one module a command or command group, each
adding its commands to the one group (``group.cli``); ``main`` is the console script's entry,
every error through its one handler."""

from . import calibration, catalog, collective, estimate, models, plot, recommend, simulate, snapshot, sweep
from .group import cli
from .main import main

# the modules above are imported for the commands they add to the group
__all__ = [
    "calibration", "catalog", "cli", "collective", "estimate", "main", "models", "plot", "recommend", "simulate",
    "snapshot", "sweep",
]  # fmt: skip
