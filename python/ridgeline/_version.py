"""The package version (one place: the package, the fits and the snapshots it stamps read it)."""

__version__ = "0.1.0"
