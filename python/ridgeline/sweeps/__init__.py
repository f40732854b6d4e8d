"""Sweeps: grids of plans in the Rust core (``sweep``), written as dataset folders (``parts``), run
in this process or on a Ray cluster (``cluster``, which serving and recommend also use)."""
