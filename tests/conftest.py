"""Shared pytest fixtures and markers.

The suite runs on CPU even on a machine with a GPU: the recorded losses of tests/test_fixed_seed.py and
tests/test_ppo_atari.py are CPU results, and the 2-rank tests expect gloo. CUDA_VISIBLE_DEVICES="" is set before any
test imports torch, and the scripts the tests start inherit it. Tests marked `gpu` get the machine's GPUs back for
the processes they start (the `gpu_env` fixture) and are skipped where there is no CUDA device.
"""

import os
import subprocess
import sys

import pytest

VISIBLE_DEVICES = os.environ.get("CUDA_VISIBLE_DEVICES")  # as the user set it (None: not set)
os.environ["CUDA_VISIBLE_DEVICES"] = ""

# the two-node Slurm cluster fixture (tests/slurm_cluster.py)
from slurm_cluster import slurm_cluster  # noqa: E402, F401


def machine_env() -> dict[str, str]:
    """The environment with the GPUs the user left visible."""
    env = dict(os.environ)
    if VISIBLE_DEVICES is None:
        env.pop("CUDA_VISIBLE_DEVICES")
    else:
        env["CUDA_VISIBLE_DEVICES"] = VISIBLE_DEVICES
    return env


def pytest_xdist_auto_num_workers(config):
    """Workers of `-n auto` (pyproject.toml's addopts): one more than the CPUs this process may use, at most 5. Most
    tests wait on the processes they start, so a worker more than the cores still shortens the suite.
    PYTEST_XDIST_AUTO_NUM_WORKERS, if set, wins (pytest-xdist's own hook reads it)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(cpus + 1, 5)


def module_fixtures(item) -> bool:
    """Whether `item` uses a module-scoped fixture (its runs are made once per worker that runs such a test)."""
    defs = getattr(item, "_fixtureinfo", None)
    return bool(defs) and any(d.scope == "module" for ds in defs.name2fixturedefs.values() for d in ds)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups into the test ids
def pytest_collection_modifyitems(config, items):
    for item in items:  # run in parallel (pytest-xdist), the Slurm tests still share one worker and one cluster
        if item.get_closest_marker("slurm"):
            item.add_marker(pytest.mark.xdist_group("slurm"))
        elif module_fixtures(item):  # the tests of a module's shared runs on one worker: the runs are made once
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    # the long tests first (stable: pytest's order otherwise), so that the short ones fill the workers at the end
    # instead of a long one running on alone
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    # asked in a child process: torch in this one must not see a GPU
    probe = [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"]
    found = subprocess.run(probe, env=machine_env(), capture_output=True, text=True).stdout.strip() == "True"
    if not found:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))


@pytest.fixture
def gpu_env() -> dict[str, str]:
    """The environment for the processes a `gpu` test starts: the machine's GPUs visible."""
    return machine_env()


@pytest.fixture
def read_only():
    """`read_only(folder)` makes the folder a read-only bind mount of itself for the test (skipped where mounting
    is not allowed: as root a folder's mode alone does not stop a write)."""
    mounted = []

    def make(folder) -> None:
        for args in (["--bind", str(folder), str(folder)], ["-o", "remount,bind,ro", str(folder)]):
            res = subprocess.run(["mount", *args], capture_output=True, text=True)
            if res.returncode != 0:
                pytest.skip(f"cannot mount here: {res.stderr.strip()[:200]}")
            if args[0] == "--bind":
                mounted.append(folder)

    yield make
    for folder in mounted:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)
