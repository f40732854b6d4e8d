"""The ``ridgeline`` command line (the top layer): one command a function, errors through one
handler. ``main`` is the console script's entry point."""

from .commands import cli, main

__all__ = ["cli", "main"]
