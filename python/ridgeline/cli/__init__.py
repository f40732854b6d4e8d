"""The ``ridgeline`` command line (the top layer): one module a command or command group, each
adding its commands to the one group (``group.cli``), imported when its command runs; ``main`` is
the console script's entry, every error through its one handler."""

from .group import cli
from .main import main

__all__ = ["cli", "main"]
