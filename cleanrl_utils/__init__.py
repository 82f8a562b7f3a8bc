"""Shared tools of the cleanrl scripts. Importing the package (as every script and entry point does before torch)
makes idle OpenMP threads sleep unless the environment says otherwise: busy-waiting torch workers take the cores
from everything else (docs/throughput.md)."""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
