"""The benchmark scripts (benchmark/*.sh) and, in `benchmark.lab`, the Python that measures the project."""
