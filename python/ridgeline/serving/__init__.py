"""Serving: the Rust simulator's Python side (``simulator``: simulate, its grids, the workload and
scheduler settings, the capacity search ``max_rate``)."""
