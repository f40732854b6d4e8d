"""``python -m ridgeline.cli``: the command line without the console script."""

from .main import main

main()
