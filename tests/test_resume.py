"""Resume from the run's own settings (cleanrl_utils/resume.py: start_run), the same for both Atari scripts:
--resume auto, the stop hint run verbatim, changed flags refused, a complete run, a larger --total-timesteps, and no
empty run folder after a refused start."""

from __future__ import annotations

import os
import re
import signal
import subprocess

import pytest
import torch
from helpers import REPO_ROOT, assert_one_line_error, read_scalars, run_script, start_script, wait_for

from cleanrl_utils.resume import given_flags

SCRIPTS = ["cleanrl/ppo_atari.py", "cleanrl/ppo_atari_multigpu.py"]
FAST = {"OMP_NUM_THREADS": "1"}
# a run with non-default flags (env, rate, sizes): a resume must not need any of them again; 32 steps an iteration
BATCH = 32
CUSTOM = ["--env-id", "PongNoFrameskip-v4", "--learning-rate", "1e-3", "--num-envs", "2", "--num-steps", "16",
          "--num-minibatches", "2", "--update-epochs", "1", "--vector-env", "sync", "--no-progress-bar"]


def steps(run_dir, tag="charts/learning_rate") -> list[int]:
    return [step for step, _ in read_scalars(run_dir, tag)]


def test_given_flags_are_the_typed_ones():
    fields = ["env_id", "learning_rate", "anneal_lr", "track", "seed", "run_name"]
    argv = ["--env-id", "PongNoFrameskip-v4", "--learning_rate=1e-3", "--no-anneal-lr", "--track", "--run-name", "x"]
    assert given_flags(argv, fields) == {"env_id", "learning_rate", "anneal_lr", "track", "run_name"}
    assert given_flags(["--seed", "3", "--resume"], fields) == {"seed"}


def hyperparameter_texts(run_dir) -> list[tuple[int, str]]:
    """(step, text) of every `hyperparameters` text the run logged, by step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"tensors": 0})
    acc.Reload()
    events = acc.Tensors("hyperparameters/text_summary")
    return sorted((e.step, e.tensor_proto.string_val[0].decode()) for e in events)


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_stop_hint_verbatim_resumes_then_extends_and_refuses_changes(script, tmp_path):
    runs = tmp_path / "runs"
    log = tmp_path / "first.log"
    proc = start_script([script, *CUSTOM, "--total-timesteps", str(20 * BATCH), "--checkpoint-interval", "1",
                         "--runs-dir", str(runs), "--run-name", "cut", "--resume", "auto"], tmp_path, log, env=FAST)
    try:
        wait_for(log, "checkpoint: iteration 1,", proc, timeout=300)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    # --resume auto started the run, which had no checkpoint
    assert f"note: no checkpoint in {runs / 'cut'} yet: starting the run" in log.read_text()
    hint = re.search(r"resume with: (.+)", log.read_text()).group(1)
    assert "--resume --run-name cut" in hint and "Pong" not in hint and "--num-envs" not in hint, hint

    # the hint as printed: continues with the run's own settings, up to the stored --total-timesteps
    env = {**os.environ, **FAST, "PYTHONPATH": str(REPO_ROOT)}
    res = subprocess.run(["bash", "-c", hint], cwd=tmp_path, capture_output=True, text=True, timeout=400, env=env)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "resuming from iteration" in res.stdout
    run_dir = runs / "cut"
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert (ckpt["env_id"], ckpt["global_step"], ckpt["settings"]["learning_rate"]) == ("PongNoFrameskip-v4", 640, 1e-3)
    assert steps(run_dir) == [BATCH * i for i in range(1, 21)]

    # complete: says so, exits 0, changes nothing
    again = run_script([script, "--resume", "--run-name", "cut", "--runs-dir", str(runs)], tmp_path, 120, FAST)
    assert again.returncode == 0 and "run cut is complete: global step 640" in again.stdout, again.stderr

    # changed settings: refused in one line naming every one of them
    refused = run_script([script, "--resume", "--run-name", "cut", "--runs-dir", str(runs), "--learning-rate",
                          "2e-3", "--clip-coef", "0.3", "--seed", "7", "--num-envs", "2"], tmp_path, 120, FAST)
    assert_one_line_error(refused, "--learning-rate 0.002 (the run has --learning-rate 0.001)")
    assert "--clip-coef 0.3" in refused.stderr and "--seed 7" in refused.stderr and "--num-envs" not in refused.stderr
    assert "in a cleanrl_utils.benchmark sweep: another --exp-name" in refused.stderr  # where a sweep names its runs

    # a larger --total-timesteps extends the finished run; the learning rate anneals to the new end
    longer = run_script([script, "--resume", "--run-name", "cut", "--runs-dir", str(runs), "--total-timesteps",
                         str(22 * BATCH)], tmp_path, 300, FAST)
    assert longer.returncode == 0, longer.stderr[-2000:]
    assert "note: resuming with --total-timesteps 704 (the run has --total-timesteps 640)" in longer.stdout
    assert "note: the learning rate now anneals to 0 at step 704" in longer.stdout
    assert steps(run_dir) == [BATCH * i for i in range(1, 23)]
    rates = dict(read_scalars(run_dir, "charts/learning_rate"))
    assert rates[21 * BATCH] == pytest.approx(1e-3 * (1 - 20 / 22), rel=1e-5)
    assert len(list(runs.iterdir())) == 1
    # TensorBoard's TEXT tab: the settings the run started with, then those of each resume, at its step
    settings = hyperparameter_texts(run_dir)
    assert [step for step, _ in settings][0] == 0 and "|total_timesteps|640|" in settings[0][1]
    assert settings[-1][0] == 640 and "|total_timesteps|704|" in settings[-1][1]

    # a start without --resume never overwrites a run that has a checkpoint
    again = run_script([script, "--run-name", "cut", "--runs-dir", str(runs)], tmp_path, 120, FAST)
    assert_one_line_error(again, "already has a checkpoint: pass --resume")


@pytest.mark.parametrize("script", SCRIPTS)
def test_resume_without_a_checkpoint_and_no_empty_folder(script, tmp_path):
    runs = tmp_path / "runs"
    base = [script, *CUSTOM, "--runs-dir", str(runs), "--run-name", "new"]
    # --resume: the run must exist (both scripts)
    assert_one_line_error(run_script([*base, "--resume"], tmp_path, 120, FAST), "no checkpoint to resume in")
    # a refused start leaves no run folder behind (a missing extra is checked before the folder is made)
    code = ("import sys, runpy; sys.modules['wandb'] = None; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    assert_one_line_error(run_script(["-c", code, script, *base[1:], "--track"], tmp_path, 120, FAST),
                          "--track needs wandb")
    assert not runs.exists() or not list(runs.iterdir())
