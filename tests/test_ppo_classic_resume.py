"""cleanrl/ppo.py's run handling, the same as the Atari scripts' (cleanrl_utils/resume.py): a SIGTERM stop and its
resume end where an uninterrupted run ends, `--resume` needs a checkpoint, `--resume auto` starts a run, and the sweep
tools give its runs fixed names so that they resume."""

from __future__ import annotations

import os
import re
import signal
import subprocess

import pytest
import torch
from helpers import FAST, LOSS_TAGS, REPO_ROOT, assert_one_line_error, read_scalars, run_each, run_script
from helpers import stop_after

from cleanrl_utils.launch.runs import sweep_run_of
from cleanrl_utils.script_shape import read_script

SCRIPT = "cleanrl/ppo.py"
# 2 envs x 64 steps a batch; 120 iterations (about 5 s here), so that a SIGTERM sent after the first checkpoint
# lands long before the end
BATCH, ITERATIONS, OPT_STEPS = 128, 120, 4 * 4  # 4 epochs x 4 minibatches per iteration
FIXED_RUN = [
    SCRIPT,
    "--seed",
    "3",
    "--num-envs",
    "2",
    "--num-steps",
    "64",
    "--total-timesteps",
    str(BATCH * ITERATIONS),
    "--no-progress-bar",
]
TAGS = [*LOSS_TAGS, "charts/learning_rate"]  # one value per iteration
EPISODE_TAGS = ["charts/episodic_return", "charts/episodic_length"]  # at the step each episode ended


def logged(run_dir) -> dict[str, list[tuple[int, float]]]:
    return {tag: read_scalars(run_dir, tag) for tag in TAGS + EPISODE_TAGS}


def checkpoint_counts(run_dir) -> tuple[int, int, set[int]]:
    """Iteration, global step and the optimizer's step counts of the run's checkpoint."""
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    return (
        ckpt["iteration"],
        ckpt["global_step"],
        {int(s["step"]) for s in ckpt["state"]["optimizer"]["state"].values()},
    )


def fake_crash_after_checkpoint(run_dir, step: int) -> None:
    """What a run killed after its checkpoint leaves behind: scalars logged past the checkpoint's step, in an event
    file that TensorBoard reads after the stopped run's own (the resume must hide them)."""
    from torch.utils.tensorboard import SummaryWriter

    own = sorted(p.name for p in run_dir.iterdir() if "tfevents" in p.name)[-1]
    crash_dir = run_dir / "crash"
    with SummaryWriter(str(crash_dir)) as writer:
        writer.add_scalar("losses/value_loss", 1e9, step + BATCH)
        writer.add_scalar("charts/episodic_return", 1e9, step + 2)
    (crash_file,) = crash_dir.iterdir()
    crash_file.rename(run_dir / (own + "x"))  # sorts right after the stopped run's file
    crash_dir.rmdir()


@pytest.mark.slow
def test_sigterm_then_resume_ends_where_an_uninterrupted_run_ends(tmp_path):
    """A fixed-seed run stopped by SIGTERM after a checkpoint, then continued with the command it printed: up to the
    stop it logged exactly what the uninterrupted run logs on this machine, bit for bit (checkpointing draws no random
    numbers); resumed, it continues the same TensorBoard log on one step axis (each step once, what a crash logged
    past the checkpoint hidden) and ends at the uninterrupted run's iteration, global step and optimizer steps."""
    result = run_script([*FIXED_RUN, "--runs-dir", str(tmp_path / "whole"), "--run-name", "whole"], tmp_path, 300, FAST)
    assert result.returncode == 0, result.stderr[-3000:]
    whole = logged(tmp_path / "whole" / "whole")
    assert [step for step, _ in whole["losses/value_loss"]] == [BATCH * i for i in range(1, ITERATIONS + 1)]

    runs = tmp_path / "runs"
    log = tmp_path / "cut.log"
    code, output = stop_after(
        [*FIXED_RUN, "--runs-dir", str(runs), "--run-name", "cut", "--checkpoint-interval", "1"],
        tmp_path,
        log,
        "checkpoint: iteration 1,",
        env=FAST,
    )
    assert code == 128 + signal.SIGTERM, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    run_dir = runs / "cut"
    stopped, stop_step, _ = checkpoint_counts(run_dir)
    assert 1 <= stopped < ITERATIONS and stop_step == stopped * BATCH, output[-3000:]
    # the last line on stderr: where it stopped, where its logs are, and the command that continues it
    assert (
        output.strip()
        .splitlines()[-1]
        .startswith(f"stopped at global step {stop_step}; logs kept in {run_dir}; resume with: ")
    ), output[-3000:]
    cut = logged(run_dir)
    for tag in TAGS:
        assert cut[tag] == whole[tag][:stopped], tag
    for tag in EPISODE_TAGS:
        assert cut[tag] and cut[tag] == [(s, v) for s, v in whole[tag] if s <= stop_step], tag

    fake_crash_after_checkpoint(run_dir, stop_step)
    hint = re.search(r"resume with: (.+)", output).group(1)
    assert "--resume --run-name cut" in hint and "--num-envs" not in hint, hint  # the run's settings are stored
    env = {**os.environ, **FAST, "PYTHONPATH": str(REPO_ROOT)}
    res = subprocess.run(["bash", "-c", hint], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert f"resuming from iteration {stopped} (global step {stop_step})" in res.stdout

    assert checkpoint_counts(run_dir) == checkpoint_counts(tmp_path / "whole" / "whole")
    assert checkpoint_counts(run_dir)[2] == {ITERATIONS * OPT_STEPS}
    resumed = logged(run_dir)
    for tag in TAGS:  # every step once, in the same TensorBoard folder; the same values up to the stop
        assert [step for step, _ in resumed[tag]] == [BATCH * i for i in range(1, ITERATIONS + 1)], tag
        assert resumed[tag][:stopped] == whole[tag][:stopped], tag
    assert resumed["charts/learning_rate"] == whole["charts/learning_rate"]  # the same schedule to the end
    for tag in EPISODE_TAGS:
        steps = [step for step, _ in resumed[tag]]
        assert steps == sorted(steps) and steps[-1] <= BATCH * ITERATIONS, tag
        assert [(s, v) for s, v in resumed[tag] if s <= stop_step] == cut[tag], tag
        assert 1e9 not in [value for _, value in resumed[tag]], tag
    assert [p.name for p in runs.iterdir()] == ["cut"]


def test_resume_without_a_checkpoint_is_a_one_line_error(tmp_path):
    runs = tmp_path / "runs"
    result = run_script([*FIXED_RUN, "--runs-dir", str(runs), "--run-name", "nothing", "--resume"], tmp_path, 120, FAST)
    assert_one_line_error(result, f"no checkpoint to resume in {runs / 'nothing'}")
    assert not runs.exists()  # nothing written


@pytest.mark.slow
def test_resume_auto_starts_a_run_and_then_finds_it_complete(tmp_path):
    runs = tmp_path / "runs"
    command = [
        SCRIPT,
        "--num-envs",
        "2",
        "--num-steps",
        "64",
        "--total-timesteps",
        str(2 * BATCH),
        "--no-progress-bar",
        "--runs-dir",
        str(runs),
        "--run-name",
        "new",
        "--resume",
        "auto",
    ]
    result = run_script(command, tmp_path, 300, FAST)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[0] == f"note: no checkpoint in {runs / 'new'} yet: starting the run"
    assert checkpoint_counts(runs / "new")[:2] == (2, 2 * BATCH)
    assert [step for step, _ in read_scalars(runs / "new", "losses/value_loss")] == [BATCH, 2 * BATCH]

    # the same command again (a requeued job), then without --resume: two processes forked from one that imported
    # torch first (run_each), one after the other
    again, refused = run_each([(command, tmp_path), (command[:-2], tmp_path)], env=FAST, timeout=240)
    # the run is complete, nothing changes
    assert again.returncode == 0 and f"run new is complete: global step {2 * BATCH}" in again.stdout, again.stderr
    assert len(read_scalars(runs / "new", "losses/value_loss")) == 2
    # without --resume, a run that has a checkpoint is never started over
    assert_one_line_error(refused, "already has a checkpoint: pass --resume")


ROUNDING = "is not a multiple of the batch"


@pytest.mark.slow
@pytest.mark.parametrize("flags, iterations", [([], 976), (["--total-timesteps", "100000"], 195)])
def test_the_rounding_note_is_silent_on_the_defaults_and_the_readmes_first_command(tmp_path, flags, iterations):
    """As in the Atari scripts, only a remainder above 1% of the steps is noted: the default (500000 steps, batch 512:
    0.1%) and the README's CartPole command (100000: 0.16%) run without the note."""
    if flags:
        assert f"python {SCRIPT} {' '.join(flags)}\n" in (REPO_ROOT / "README.md").read_text()
    code, output = stop_after(
        [SCRIPT, *flags, "--checkpoint-interval", "1", "--runs-dir", str(tmp_path / "runs")],
        tmp_path,
        tmp_path / "run.log",
        "checkpoint: iteration 1,",
        env=FAST,
    )
    assert code == 128 + signal.SIGTERM, output[-3000:]
    assert f", {iterations} iterations, " in output.splitlines()[0], output[:2000]
    assert ROUNDING not in output, output[:2000]


@pytest.mark.slow
def test_the_rounding_note_comes_for_a_remainder_above_one_percent_and_never_on_a_resume(tmp_path):
    command = [
        SCRIPT,
        "--num-envs",
        "4",
        "--num-steps",
        "256",
        "--no-progress-bar",
        "--runs-dir",
        str(tmp_path / "runs"),
        "--run-name",
        "rounded",
    ]
    result = run_script(command + ["--total-timesteps", "1500"], tmp_path, 300, FAST)  # 476 of 1500 steps left out
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"note: --total-timesteps 1500 {ROUNDING} (1024): runs 1024 steps" in result.stdout.splitlines()
    resumed = run_script(command + ["--resume", "--total-timesteps", "2500"], tmp_path, 300, FAST)  # 452 left out
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from iteration 1 (global step 1024)" in resumed.stdout, resumed.stdout[-2000:]
    assert ROUNDING not in resumed.stdout, resumed.stdout[-2000:]
    assert checkpoint_counts(tmp_path / "runs" / "rounded")[:2] == (2, 2048)


def test_the_sweep_tools_resume_its_runs():
    # the benchmark runner and the cluster submission give each run of a resumable script a fixed name
    assert read_script(SCRIPT).resumes and read_script(str(REPO_ROOT / SCRIPT)).resumes
    assert sweep_run_of(["python", SCRIPT, "--num-envs", "4"], "CartPole-v1", 2) == "CartPole-v1__ppo__2"
