"""The training scripts' thread numbers, so that the lab times its parts with the threads a run gets: the scripts'
own rule, ``cleanrl_utils/cpu.py``'s ``thread_plan`` (the flags, OMP_NUM_THREADS, Slurm's CPUs, or the cores this
process may use, split among a machine's ranks)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from cleanrl_utils.cpu import thread_plan, usable_cores  # noqa: F401 (usable_cores: for the lab)


@dataclass(frozen=True)
class ThreadPlan:
    cores: int
    """cores available to this rank"""
    env_threads: int
    """stepping threads of an envpool pool (the other backends have their own: ale one per env)"""
    torch_threads: int
    """torch intra-op threads, for inference and update alike"""


def plan_threads(
    num_envs: int,
    env_threads: int = 0,
    torch_threads: int = 0,
    local_ranks: int | None = None,
    cores: int | None = None,
) -> ThreadPlan:
    """The thread numbers the scripts give one rank; 0 means automatic (see the module docstring)."""
    if local_ranks is None:
        local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    cores, env_threads, torch_threads, _ = thread_plan(env_threads, torch_threads, num_envs, local_ranks, cores, False)
    return ThreadPlan(cores=cores, env_threads=env_threads, torch_threads=torch_threads)


def use_threads(n: int) -> None:
    """Set torch's intra-op threads (cheap: about a microsecond, so a measurement can change them between forms)."""
    import torch  # here: the lab's launchers (learning runs, --help) need not load it

    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
