"""Faults at the start of a run, on the real scripts: Ctrl-C while a script is still loading, an id with sticky
actions, an empty --runs-dir, and a checkpoint resumed with the wrong script. Each ends in one line."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import REPO_ROOT, TINY_ATARI, assert_one_line_error, start_script, run_each

TINY = [*TINY_ATARI, "--total-timesteps", "64"]


@pytest.mark.slow
@pytest.mark.parametrize("script", ["cleanrl/ppo_atari.py", "cleanrl/ppo.py"])
@pytest.mark.parametrize("delay", [0.5, 2.5])
def test_ctrl_c_at_any_moment_of_start_up_is_a_one_line_stop(tmp_path, script, delay):
    """SIGINT while torch, the emulator or the envs load: a short message and a non-zero exit, never a traceback (a
    signal that lands once the run's own handling is in place is its usual checkpointed stop, also without one)."""
    # a budget that outlasts the signal: the stop lands in start-up or in the run, never after its end
    flags = [*TINY, "--total-timesteps", "1000000"] if script.endswith("ppo_atari.py") else ["--no-progress-bar"]
    log = tmp_path / "out.log"
    proc = start_script([script, *flags, "--runs-dir", str(tmp_path / "runs")], tmp_path, log)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=120)
    text = log.read_text()
    assert code != 0 and "Traceback" not in text and "KeyboardInterrupt" not in text, text
    if code == -signal.SIGINT and not text.strip():
        return  # on a loaded machine the signal came before the interpreter ran any of the script: a silent stop
    assert "interrupted while starting" in text or "stopped at global step" in text, text


# `python -c LISTING FOLDER`: what is in the folder, as a sorted list
LISTING = "import os, sys; print(sorted(os.listdir(sys.argv[1])))"


@pytest.fixture(scope="module")
def start_runs(tmp_path_factory) -> tuple[Path, list[subprocess.CompletedProcess[str]]]:
    """One forked child each (see `run_each`): ppo_atari.py on an id with sticky actions; ppo.py's CartPole run `cp`,
    what its folder holds, and ppo_atari.py resuming it. Their folder and results."""
    root = tmp_path_factory.mktemp("start_runs")
    runs = str(root / "runs")
    cases = [
        ["cleanrl/ppo_atari.py", "--env-id", "ALE/Breakout-v5", *TINY, "--runs-dir", str(root / "sticky")],
        ["cleanrl/ppo.py", "--total-timesteps", "512", "--no-progress-bar", "--runs-dir", runs, "--run-name", "cp"],
        ["-c", LISTING, str(root / "runs" / "cp")],
        ["cleanrl/ppo_atari.py", "--resume", "--run-name", "cp", "--runs-dir", runs],
    ]
    return root, run_each([(args, root) for args in cases], timeout=600, train=True)


@pytest.mark.slow
def test_an_id_with_sticky_actions_runs_with_one_note_naming_cleanrls_id(start_runs):
    result = start_runs[1][0]
    assert result.returncode == 0, result.stderr[-2000:]
    notes = [line for line in result.stdout.splitlines() if "sticky actions" in line]
    assert len(notes) == 1 and notes[0].startswith("note: ") and "BreakoutNoFrameskip-v4" in notes[0], notes
    assert "0.25" in notes[0]


def test_an_empty_runs_dir_is_refused_before_anything_is_written(tmp_path):
    """Both scripts (one forked child each, see `run_each`): one line, and nothing written where they ran."""
    scripts = ["cleanrl/ppo_atari.py", "cleanrl/ppo.py"]
    for script in scripts:
        (tmp_path / Path(script).stem).mkdir()
    cases = [
        ([script, "--runs-dir", "", "--total-timesteps", "64"], tmp_path / Path(script).stem) for script in scripts
    ]
    for (_, cwd), result in zip(cases, run_each(cases, timeout=120)):
        assert_one_line_error(result, "--runs-dir is empty")
        assert os.listdir(cwd) == []


@pytest.mark.slow
def test_a_cartpole_checkpoint_resumed_with_the_atari_script_names_the_script_that_made_it(start_runs):
    root, (_, made, listing, result) = start_runs
    assert made.returncode == 0, made.stderr[-2000:]
    assert listing.returncode == 0, listing.stderr
    assert_one_line_error(result, "ppo.py")
    assert "--total-timesteps" not in result.stderr
    assert str(REPO_ROOT / "cleanrl" / "ppo.py") in result.stderr or "cleanrl/ppo.py" in result.stderr
    # nothing written by the refused resume
    assert sorted(os.listdir(root / "runs" / "cp")) == ast.literal_eval(listing.stdout)


def test_a_run_name_longer_than_a_folder_name_says_so(tmp_path):
    """256 bytes: one line naming the length and the flag to shorten (it used to ask for a writable --runs-dir)."""
    runs = str(tmp_path / "runs")
    cases = [
        (["cleanrl/ppo.py", "--run-name", "a" * 256, "--runs-dir", runs, "--total-timesteps", "512"], tmp_path),
        (["cleanrl/ppo.py", "--exp-name", "a" * 240, "--runs-dir", runs, "--total-timesteps", "512"], tmp_path),
    ]
    named, built = run_each(cases, timeout=120)
    assert_one_line_error(
        named, "the run name is 256 bytes, longer than a folder name may be: give a shorter --run-name"
    )
    assert_one_line_error(built, "give a shorter --exp-name (the run name is ENV__EXP__SEED__TIME)")
    assert "writable" not in named.stderr + built.stderr
