"""cleanrl_utils/cpu.py's keep_freed_memory (the scripts' mallopt settings, the lab's too): after it, a big tensor
freed and allocated again costs no page faults."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import REPO_ROOT

PROGRAM = """
import resource, sys, torch
from cleanrl_utils.cpu import keep_freed_memory
took = keep_freed_memory() if sys.argv[1] == "keep" else None
def faults(n=5):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(n):
        torch.ones(25_000_000)  # 100 MB, freed at once (conv1's unfolded input for a minibatch is about this)
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / n
faults(15)  # glibc settles within some allocations
print(took, faults())
"""


def page_faults(mode: str) -> tuple[str, float]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    out = subprocess.run([sys.executable, "-c", PROGRAM, mode], env=env, capture_output=True, text=True, timeout=120)
    took, faults = out.stdout.split()
    return took, float(faults)


@pytest.mark.slow
def test_freed_memory_is_reused_without_page_faults():
    _, default = page_faults("default")
    took, kept = page_faults("keep")
    assert took == "True"
    # glibc maps a 100 MB block afresh at every allocation by default (above its 32 MiB threshold): about 24,000
    # faults of 4 KiB pages each time; kept, the memory is reused as it is
    assert default > 10_000
    assert kept < 100
