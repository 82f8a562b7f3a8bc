"""One run per folder (cleanrl_utils/resume.py): two or three processes started on one --run-name run one of them, the
others stop before writing anything with one line naming the holder; a killed holder blocks nothing (the kernel lets
go of its lock); a restarted attempt (a Slurm requeue) waits for the old one by the stated rule; a start over a dead
attempt's logs sets them aside, and plots do not read them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import pytest
from helpers import FAST, REPO_ROOT, read_scalars, start_script, wait_for

from cleanrl_utils import plot

ATARI = [
    "--num-envs",
    "2",
    "--num-steps",
    "32",
    "--num-minibatches",
    "2",
    "--update-epochs",
    "1",
    "--torch-threads",
    "1",
]
CLASSIC = ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1"]
SCRIPTS = {"ppo_atari": ("cleanrl/ppo_atari.py", ATARI), "ppo": ("cleanrl/ppo.py", CLASSIC)}


def start(tmp_path, script, flags, log, env=None):
    args = [script, *flags, "--no-progress-bar", "--run-name", "same", "--runs-dir", str(tmp_path / "runs")]
    return start_script(args, tmp_path, tmp_path / log, env={**FAST, **(env or {})})


def finish(proc, timeout=300):
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
# each script, and two as well as three processes at once (two scripts x two counts would repeat the same lock)
@pytest.mark.parametrize("name, count", [("ppo_atari", 3), ("ppo", 2)])
def test_processes_on_one_run_name_run_one_and_the_others_stop_naming_it(tmp_path, name, count):
    script, flags = SCRIPTS[name]
    procs = [start(tmp_path, script, [*flags, "--total-timesteps", "1024"], f"out{i}.txt") for i in range(count)]
    codes = [finish(proc) for proc in procs]
    outputs = [(tmp_path / f"out{i}.txt").read_text() for i in range(count)]
    assert sorted(codes) == [0] + [1] * (count - 1), outputs
    for code, output in zip(codes, outputs):
        if code == 1:  # stopped before writing: one line, the holder's host and pid, and what to do
            lines = [line for line in output.splitlines() if line.strip() and not line.startswith("note: torch sees")]
            assert len(lines) == 1 and lines[0].startswith("error: "), output
            if "got a checkpoint from another run" not in lines[0]:  # (the winner ended before this one opened)
                assert "is in use by another run (host " in lines[0] and "pass another --run-name" in lines[0]
                assert f"host {socket.gethostname()}, pid " in lines[0]
    run_dir = tmp_path / "runs" / "same"
    # one attempt's logs and checkpoint: one event file, one value per iteration, no temporary files
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 1
    steps = [step for step, _ in read_scalars(run_dir, "charts/learning_rate")]
    assert steps == sorted(set(steps)) and len(steps) == 1024 // 64
    assert not list(run_dir.glob("*.tmp*"))


@pytest.mark.slow
def test_a_killed_holder_blocks_nothing_and_resume_starts_at_once(tmp_path):
    script, flags = SCRIPTS["ppo_atari"]
    proc = start(tmp_path, script, [*flags, "--total-timesteps", "100000", "--checkpoint-interval", "1"], "a.txt")
    wait_for(tmp_path / "a.txt", "checkpoint: iteration 1,", proc, timeout=300)
    proc.kill()  # SIGKILL: no clean-up of any kind
    proc.wait()
    began = time.monotonic()
    resumed = start(tmp_path, script, [*flags, "--total-timesteps", "256", "--resume"], "b.txt")
    assert finish(resumed) == 0, (tmp_path / "b.txt").read_text()
    assert "resuming from iteration" in (tmp_path / "b.txt").read_text()
    assert "waiting" not in (tmp_path / "b.txt").read_text() and time.monotonic() - began < 120


@pytest.mark.slow
def test_a_requeued_attempt_waits_for_the_old_one_then_continues_or_stops_with_the_line(tmp_path):
    """A Slurm requeue while the old task still runs: the new attempt (SLURM_RESTART_COUNT > 0) waits up to
    CLEANRL_LOCK_WAIT seconds for the old one to let go, then continues the run; if it never lets go, one line."""
    script, flags = SCRIPTS["ppo_atari"]
    old = start(tmp_path, script, [*flags, "--total-timesteps", "100000", "--checkpoint-interval", "1"], "old.txt")
    try:
        wait_for(tmp_path / "old.txt", "checkpoint: iteration 1,", old, timeout=300)
        # the old task stays alive and keeps its lock, but idle (it would only train on, taking CPU from the others)
        old.send_signal(signal.SIGSTOP)
        requeued = {"SLURM_RESTART_COUNT": "1"}
        auto = [*flags, "--total-timesteps", "100000", "--resume", "auto"]
        gave_up = start(tmp_path, script, auto, "gave_up.txt", env={**requeued, "CLEANRL_LOCK_WAIT": "3"})
        assert finish(gave_up) == 1
        output = (tmp_path / "gave_up.txt").read_text()
        assert "note: waiting for the previous attempt (host " in output and "error: " in output
        assert output.count("error: ") == 1 and "is in use by another run" in output and "Traceback" not in output

        waiting = start(tmp_path, script, auto, "new.txt", env=requeued)
        wait_for(tmp_path / "new.txt", "note: waiting for the previous attempt", waiting, timeout=300)
        old.send_signal(signal.SIGCONT)
        old.send_signal(signal.SIGTERM)  # as Slurm stops the old task: it checkpoints and lets go
        assert finish(old) == 128 + signal.SIGTERM
        wait_for(tmp_path / "new.txt", "resuming from iteration", waiting, timeout=300)
        wait_for(tmp_path / "new.txt", "checkpoint: iteration", waiting, timeout=300)
        waiting.send_signal(signal.SIGTERM)
        assert finish(waiting) == 128 + signal.SIGTERM
    finally:
        if old.poll() is None:  # a failed check: not left stopped
            old.kill()
            old.wait()


@pytest.mark.slow
@pytest.mark.torchrun
def test_two_torchrun_jobs_on_one_run_name_run_one(tmp_path):
    def launch(i):
        command = [
            "torchrun", "--standalone", "--nnodes=1", "--nproc-per-node=2", str(REPO_ROOT / "cleanrl/ppo_atari_multigpu.py"),
            "--local-num-envs", "1", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1",
            "--torch-threads", "1", "--total-timesteps", "512", "--no-progress-bar", "--run-name", "same",
            "--runs-dir", str(tmp_path / "runs"),
        ]  # fmt: skip
        env = {**os.environ, **FAST, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}
        with open(tmp_path / f"job{i}.txt", "wb") as out:
            return subprocess.Popen(command, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)

    jobs = [launch(0), launch(1)]
    codes = sorted(finish(job, timeout=400) for job in jobs)
    outputs = [(tmp_path / f"job{i}.txt").read_text() for i in range(2)]
    assert codes[0] == 0 and codes[1] != 0, outputs
    assert sum("is in use by another run (host " in output for output in outputs) == 1, outputs
    assert len(list((tmp_path / "runs" / "same").glob("events.out.tfevents.*"))) == 1


@pytest.mark.slow
def test_a_start_over_a_dead_attempts_logs_sets_them_aside_and_plots_skip_them(tmp_path):
    script, flags = SCRIPTS["ppo"]
    proc = start(tmp_path, script, [*flags, "--total-timesteps", "100000", "--checkpoint-interval", "0"], "a.txt")
    wait_for(tmp_path / "a.txt", "global_step=", proc, timeout=300)  # its first iteration logged
    proc.kill()  # dies before its first checkpoint
    proc.wait()
    run_dir = tmp_path / "runs" / "same"
    assert list(run_dir.glob("events.out.tfevents.*")) and not (run_dir / "checkpoint.pt").exists()
    again = start(tmp_path, script, [*flags, "--total-timesteps", "128"], "b.txt")
    assert finish(again) == 0
    assert (
        "held the logs of an attempt that stopped before its first checkpoint: moved to"
        in (tmp_path / "b.txt").read_text()
    )
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 1
    assert len(list((run_dir / "dead_attempts").glob("*/events.out.tfevents.*"))) == 1
    assert [name for _, name in plot.find_run_dirs([str(tmp_path / "runs")])] == ["same"]
