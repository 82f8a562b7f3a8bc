"""How many threads the env pools and PyTorch get, sized to the machine (and to the ranks sharing it).

The rule: oversubscription is catastrophic for PyTorch (measurements in docs/throughput.md): every parallel region
ends in a barrier, and a barrier waits for its slowest, descheduled thread. So:

- inference and update run while the envs are idle (env threads and processes block on a queue), on **all cores
  of this rank**: the update on that many torch threads; the rollout's small batch on CPU in slices, one per core,
  each on one torch thread (``cleanrl_utils/sliced.py``), since its parallel regions are too short for sleeping
  OpenMP workers;
- an envpool pool gets **one stepping thread per core of this rank** (never more threads than envs); the ``ale``
  backend is one single-env pool, one thread, per env;
- ranks on one machine split its cores evenly (``LOCAL_WORLD_SIZE``, set by torchrun).

``--env-threads`` and ``--torch-threads`` override the automatic numbers (an explicit ``--torch-threads`` is
used for inference and update alike, without slices).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from cleanrl_utils.sliced import inference_slices


@dataclass(frozen=True)
class ThreadPlan:
    cores: int
    """cores available to this rank"""
    env_threads: int
    """stepping threads of an envpool pool (the other backends have their own: ale one per env)"""
    inference_threads: int
    """torch intra-op threads while collecting the rollout"""
    learning_threads: int
    """torch intra-op threads during the update"""
    inference_slices: int = 1
    """slices of the rollout's batch inferred in parallel, each on its own thread (1: the whole batch at once)"""

    def describe(self, vector_env: str) -> str:
        """One line for the run's first print; env threads only for the backend they apply to (envpool)."""
        env = f"{self.env_threads} env threads, " if vector_env == "envpool" else ""
        sliced = f" (the batch in {self.inference_slices} slices in parallel)" if self.inference_slices > 1 else ""
        return (
            f"{self.cores} cores: {env}torch {self.inference_threads} thread(s) for inference{sliced}, "
            f"{self.learning_threads} for learning"
        )


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
    sliced: bool = True,
) -> ThreadPlan:
    """The thread numbers for one rank; 0 means automatic (see the module docstring). ``sliced``: whether the
    rollout's inference may run in slices (eager on CPU; a GPU or ``torch.compile`` takes the whole batch)."""
    if local_ranks is None:
        local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if cores is None:
        cores = usable_cores()
    per_rank = max(1, cores // max(1, local_ranks))
    slices = inference_slices(num_envs, per_rank) if sliced and not torch_threads else 1
    return ThreadPlan(
        cores=per_rank,
        env_threads=env_threads or min(per_rank, num_envs),
        inference_threads=torch_threads or (1 if slices > 1 else per_rank),
        learning_threads=torch_threads or per_rank,
        inference_slices=slices,
    )


def use_threads(n: int) -> None:
    """Set torch's intra-op threads (cheap: about a microsecond, so it can change between rollout and update)."""
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
