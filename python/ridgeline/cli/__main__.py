"""``python -m ridgeline.cli``: the command line without the console script."""

from .commands import main

main()
