"""The hardware catalog: the DuckDB store built from data/ (``store``) and the importers of the
measured rows under data/benchmarks/ it holds (``benchmarks``)."""
