"""The training scripts' thread numbers, so that the lab times its parts with the threads a run gets.

The scripts size their threads inline, once, at the start (``cleanrl/ppo_atari.py``, ``cleanrl/ppo_atari_multigpu.py``):

- the cores: the process's affinity mask (taskset, cgroup cpusets and Slurm set it), split evenly among the ranks of
  a machine in the multigpu script (``LOCAL_WORLD_SIZE``, set by torchrun), at least one each;
- torch: that many intra-op threads for the rollout's inference (the whole batch) and the update alike;
- an envpool pool: one stepping thread per core, never more threads than envs (the ``ale`` backend runs one
  single-env pool, one thread, per env);
- ``--env-threads`` and ``--torch-threads`` replace the automatic numbers.

``plan_threads`` gives the same numbers (``tests/test_placement.py``). The rollout's batch in slices, a form the
scripts no longer use, has its own count: ``benchmark/lab/sliced.py``'s ``inference_slices``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from cleanrl_utils.validation import thread_counts


@dataclass(frozen=True)
class ThreadPlan:
    cores: int
    """cores available to this rank"""
    env_threads: int
    """stepping threads of an envpool pool (the other backends have their own: ale one per env)"""
    torch_threads: int
    """torch intra-op threads, for inference and update alike"""


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask: respects taskset, cgroup cpusets and Slurm)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


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
    if cores is None:
        cores = usable_cores()
    per_rank = max(1, cores // max(1, local_ranks))
    env_threads, torch_threads = thread_counts(env_threads, torch_threads, per_rank, num_envs, notes=False)
    return ThreadPlan(cores=per_rank, env_threads=env_threads, torch_threads=torch_threads)


def use_threads(n: int) -> None:
    """Set torch's intra-op threads (cheap: about a microsecond, so a measurement can change them between forms)."""
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
