"""benchmark/lab/placement.py: the lab sizes its threads as the training scripts size theirs (the cores of the
process's affinity mask, split among a machine's ranks; torch on all of them, the whole batch; an envpool pool one
thread per core, never more than envs)."""

from __future__ import annotations

import re

import pytest
from helpers import run_script

from benchmark.lab.placement import plan_threads, usable_cores


def test_threads_are_sized_to_the_cores_of_each_rank():
    plan = plan_threads(num_envs=8, cores=16, local_ranks=2)
    assert (plan.cores, plan.env_threads, plan.torch_threads) == (8, 8, 8)
    plan = plan_threads(num_envs=4, cores=16, local_ranks=1)
    assert (plan.env_threads, plan.torch_threads) == (4, 16)  # never more env threads than envs
    plan = plan_threads(num_envs=8, cores=2, local_ranks=4)
    assert (plan.cores, plan.env_threads, plan.torch_threads) == (1, 1, 1)  # at least one each
    plan = plan_threads(num_envs=8, env_threads=3, torch_threads=2, cores=16, local_ranks=1)
    assert (plan.env_threads, plan.torch_threads) == (3, 2)  # --env-threads and --torch-threads as asked


def test_the_ranks_of_a_machine_come_from_torchruns_variable(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert plan_threads(num_envs=8, cores=4).cores == 2
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert plan_threads(num_envs=8, cores=4).cores == 4
    assert plan_threads(num_envs=8).cores == usable_cores()


@pytest.mark.slow
def test_the_plan_is_the_one_the_script_prints(tmp_path):
    result = run_script(
        [
            "cleanrl/ppo_atari.py",
            "--vector-env",
            "envpool",
            "--num-envs",
            "4",
            "--num-steps",
            "8",
            "--num-minibatches",
            "1",
            "--update-epochs",
            "1",
            "--total-timesteps",
            "32",
            "--no-progress-bar",
            "--runs-dir",
            str(tmp_path / "runs"),
        ],
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    found = re.search(r"(\d+) cores: (\d+) env threads, (\d+) torch threads", result.stdout)
    assert found, result.stdout[:1000]
    plan = plan_threads(num_envs=4)
    assert tuple(int(n) for n in found.groups()) == (plan.cores, plan.env_threads, plan.torch_threads)
