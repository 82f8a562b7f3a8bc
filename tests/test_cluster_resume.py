"""Cluster jobs that survive, on the throwaway Slurm cluster: a job requeued after its first checkpoint continues its
run to the final step of an uninterrupted run, and a job reaching its time limit checkpoints, requeues itself and
continues. One run folder, every step logged once (tiny runs: 2 envs x 16 steps)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import torch
from helpers import REPO_ROOT, read_scalars, run_submit

BATCH = 32
TINY = (
    f"python {REPO_ROOT / 'cleanrl' / 'ppo_atari.py'} --env-id BreakoutNoFrameskip-v4 --num-envs 2 --num-steps 16 "
    "--num-minibatches 2 --update-epochs 1 --vector-env sync --no-progress-bar --checkpoint-interval 1"
)


def submit(cluster, tmp_path: Path, iterations: int, timeout_seconds: int) -> tuple[str, Path]:
    """Submit one seed of the tiny run (no waiting); returns the job id and its log."""
    res = run_submit(
        [
            "--provider",
            "slurm",
            "--vcpus",
            "1",
            "--memory",
            "1000",
            "--gpus",
            "0",
            "--submit",
            "--timeout-seconds",
            str(timeout_seconds),
            "--slurm-script-path",
            str(tmp_path / "job.sbatch"),
            "--command",
            f"{TINY} --total-timesteps {iterations * BATCH} --runs-dir {tmp_path / 'runs'}",
        ],
        tmp_path,
        cluster.env,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    job_id = re.search(r"Submitted batch job (\d+)", res.stdout).group(1)
    return job_id, tmp_path / "logs" / f"ppo_atari-BreakoutNoFrameskip-v4_{job_id}_0.log"


def wait_log(cluster, log: Path, text: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        output = log.read_text(errors="replace") if log.exists() else ""
        if text in output:
            return output
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not in the job log within {timeout} s:\n{output[-3000:]}\n{cluster.logs()}")


def wait_gone(cluster, job_id: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and cluster.run("squeue", "-h", "-j", job_id).stdout.strip():
        time.sleep(1)


def assert_one_continuous_run(tmp_path: Path, iterations: int) -> None:
    """The run an uninterrupted job makes: one folder, ends at the final step, every iteration logged once."""
    run_dir = tmp_path / "runs" / "BreakoutNoFrameskip-v4__ppo_atari__1"
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [run_dir.name]
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert (ckpt["iteration"], ckpt["global_step"]) == (iterations, iterations * BATCH)
    for tag in ("charts/learning_rate", "losses/value_loss"):
        assert [step for step, _ in read_scalars(run_dir, tag)] == [BATCH * i for i in range(1, iterations + 1)]


@pytest.mark.slow
@pytest.mark.slurm
def test_requeued_job_resumes_and_ends_where_an_uninterrupted_job_ends(slurm_cluster, tmp_path):
    iterations = 60
    job_id, log = submit(slurm_cluster, tmp_path, iterations, 3600)
    wait_log(slurm_cluster, log, "checkpoint: iteration 1,", timeout=240)
    res = slurm_cluster.run("scontrol", "requeue", f"{job_id}_0")
    assert res.returncode == 0, res.stderr
    output = wait_log(slurm_cluster, log, f"checkpoint: iteration {iterations},", timeout=300)
    wait_gone(slurm_cluster, job_id, 60)
    assert "(attempt 1)" in output and "(attempt 2)" in output, output  # both attempts in one log
    resumed = re.search(r"resuming from iteration (\d+)", output)
    assert resumed and 1 <= int(resumed[1]) < iterations, output
    assert_one_continuous_run(tmp_path, iterations)


@pytest.mark.slow
@pytest.mark.slurm
def test_time_limit_checkpoints_requeues_and_continues(slurm_cluster, tmp_path):
    # a 1-minute limit (Slurm's least) with the warning 20 s before it: the run is far from done when warned (at the
    # tiny run's 300-400 SPS on 2 cores, 400 iterations could end before the warning; it is cancelled once resumed)
    iterations = 4000
    job_id, log = submit(slurm_cluster, tmp_path, iterations, 60)
    output = wait_log(slurm_cluster, log, "resuming from iteration", timeout=240)
    slurm_cluster.run("scancel", job_id)
    wait_gone(slurm_cluster, job_id, 60)
    first = output.split("(attempt 2)")[0]
    assert "time limit near: stopping the run at a checkpoint, then requeueing" in first, output
    stopped = re.findall(r"checkpoint: iteration (\d+),", first)[-1]
    assert "stopped at global step" in first and "DUE TO TIME LIMIT" not in first, output
    assert f"resuming from iteration {stopped} " in output, output  # nothing after the last checkpoint was lost
