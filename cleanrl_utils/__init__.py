"""Shared tools of the cleanrl scripts.

Importing the package makes idle OpenMP threads sleep (`OMP_WAIT_POLICY=PASSIVE`) unless the environment says
otherwise, as the training scripts do at their top: PyTorch's OpenMP workers busy-wait after every parallel region
and, on a busy machine, take the cores from everything else (docs/throughput.md). Python imports this package
before any module in it, so every `python -m cleanrl_utils...` entry point gets the policy before it imports torch
(and those run by path import it first); it has no effect once torch is loaded.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
