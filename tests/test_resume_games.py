"""A stopped run ends where an uninterrupted one would (cleanrl_utils/vector_envs.py: `GameState`, `rank_games`,
`restore_games`): with the Python wrappers the checkpoint holds every env's game, and a fixed-seed run stopped and
resumed logs what the same run uninterrupted logs, bit for bit, at every step: losses, learning rate, and the returns
and lengths of the games, those in progress at the stop among them. SIGTERM on `sync` and `async`, a torchrun 2-rank
run, a kill -9 between checkpoints; a checkpoint without games (older, or of a C++ pool) resumes with new ones and
says so. Tiny Breakout runs (1-2 envs per rank x 32 steps): its games last 150+ steps, so games span every stop. And
in-process, on a game whose emulator draws from its RNG (sticky actions), envs put back in saved games play on alike."""

from __future__ import annotations

import re
import signal
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import FAST, LOSS_TAGS, read_scalars, run_script, start_script, wait_for

TAGS = [*LOSS_TAGS, "charts/learning_rate", "charts/episodic_return", "charts/episodic_length"]
NUM_STEPS = 32
TINY = ["--env-id", "BreakoutNoFrameskip-v4", "--num-steps", str(NUM_STEPS), "--num-minibatches", "2"]
TINY += ["--update-epochs", "1", "--torch-threads", "1", "--no-progress-bar", "--seed", "2"]
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
GOES_ON = "; the games in progress go on"


def logged(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar the run logged that a resume must reproduce (not its speed), by tag, in the order logged."""
    return {tag: read_scalars(run_dir, tag) for tag in TAGS}


def games_across(log: dict, stop_step: int, num_envs: int) -> int:
    """The games that ended after `stop_step` and began before it (`num_envs`: of all ranks): a game of `length` emulator frames took at least
    length / 4 - 25 agent steps (its resets' no-ops and serves are frames too), more than the steps since the stop."""
    ends = zip(log["charts/episodic_return"], log["charts/episodic_length"])
    return sum(step > stop_step and length / 4 - 25 > (step - stop_step) / num_envs for (step, _), (_, length) in ends)


def stop_and_resume(command: list[str], args: list[str], cwd: Path, after: str, signum=signal.SIGTERM) -> tuple:
    """Start `command + args` (a run named `cut`), send it `signum` once it printed `after`, then resume it to the end;
    returns the resumed run's output and the stopped run's output."""
    log = cwd / "stopped.log"
    proc = start_script([*command, *args, "--run-name", "cut"], cwd, log, env=FAST)
    try:
        wait_for(log, after, proc, timeout=300)
        if signum == signal.SIGKILL:
            time.sleep(0.5)  # into the iterations after that checkpoint
        proc.send_signal(signum)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    resumed = run_script([*command, *args, "--run-name", "cut", "--resume"], cwd, timeout=400, env=FAST)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    return resumed.stdout + resumed.stderr, log.read_text()


def assert_same_run(command: list[str], args: list[str], tmp_path: Path, after: str, num_envs: int, signum=None):
    """The run stopped after `after` and resumed logs what it logs uninterrupted, bit for bit, games across the stop
    included; returns the resumed run's output."""
    runs = ["--runs-dir", str(tmp_path / "runs")]
    whole = run_script([*command, *args, *runs, "--run-name", "whole"], tmp_path, timeout=400, env=FAST)
    assert whole.returncode == 0, whole.stdout[-3000:] + whole.stderr[-3000:]
    output, stopped = stop_and_resume(command, [*args, *runs], tmp_path, after, signum or signal.SIGTERM)
    resumed = re.search(r"resuming from iteration \d+ \(global step (\d+)\)(.*)", output)
    assert resumed and resumed[2].endswith(GOES_ON), output[-3000:]
    expected, got = logged(tmp_path / "runs" / "whole"), logged(tmp_path / "runs" / "cut")
    assert expected["losses/value_loss"] and expected["charts/episodic_length"]
    assert got == expected, {tag: (got[tag], expected[tag]) for tag in TAGS if got[tag] != expected[tag]}
    stop_step = int(resumed[1])
    assert 0 < stop_step < expected["charts/learning_rate"][-1][0]
    assert games_across(got, stop_step, num_envs) > 0, (stop_step, got["charts/episodic_length"])
    return output, stopped


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sync", "async"])
def test_a_run_stopped_by_sigterm_and_resumed_logs_what_the_uninterrupted_run_logs(backend, tmp_path):
    args = [*TINY, "--num-envs", "2", "--vector-env", backend, "--total-timesteps", str(16 * 2 * NUM_STEPS)]
    assert_same_run(["cleanrl/ppo_atari.py"], [*args, "--checkpoint-interval", "1"], tmp_path, "iteration 4,", 2)


@pytest.mark.slow
def test_a_kill_9_between_checkpoints_resumes_from_the_last_one_and_goes_on_as_the_uninterrupted_run(tmp_path):
    args = [*TINY, "--num-envs", "2", "--vector-env", "sync", "--total-timesteps", str(16 * 2 * NUM_STEPS)]
    args += ["--checkpoint-interval", "4"]
    output, stopped = assert_same_run(
        ["cleanrl/ppo_atari.py"], args, tmp_path, "checkpoint: iteration 4,", 2, signal.SIGKILL
    )
    resumed = int(re.search(r"resuming from iteration (\d+)", output)[1])
    last = max(int(i) for i in re.findall(r"checkpoint: iteration (\d+),", stopped))
    assert resumed == last and resumed % 4 == 0 and "stopped at" not in stopped, stopped[-2000:]


@pytest.mark.slow
@pytest.mark.torchrun
def test_a_torchrun_run_of_2_ranks_stopped_and_resumed_logs_what_the_uninterrupted_run_logs(tmp_path):
    torchrun = [TORCHRUN, "--standalone", "--nnodes=1", "--nproc_per_node=2", "cleanrl/ppo_atari_multigpu.py"]
    args = [*TINY, "--local-num-envs", "1", "--vector-env", "sync", "--dist-timeout", "120"]
    args += ["--total-timesteps", str(12 * 2 * NUM_STEPS), "--checkpoint-interval", "1"]
    assert_same_run(torchrun, args, tmp_path, "iteration 3,", 2)  # 2 envs in all: a step of each is 2 global steps


@pytest.mark.slow
def test_a_checkpoint_without_games_resumes_with_new_ones_and_says_so(tmp_path):
    """A checkpoint saved before games were (its RNG entries without `games`): the resume says once that the games
    are new, and runs; so does a resume on a C++ pool, naming the backends that keep games."""
    runs = tmp_path / "runs"
    args = ["cleanrl/ppo_atari.py", *TINY, "--num-envs", "2", "--vector-env", "sync", "--runs-dir", str(runs)]
    first = run_script([*args, "--total-timesteps", str(2 * NUM_STEPS), "--run-name", "old"], tmp_path, 300, FAST)
    assert first.returncode == 0, first.stderr[-3000:]
    path = runs / "old" / "checkpoint.pt"
    ckpt = torch.load(path, weights_only=True)
    assert ckpt["rng"][0]["games"]["next_obs"].shape == (2, 4, 84, 84)
    for rank in ckpt["rng"]:
        del rank["games"]
    torch.save(ckpt, path)
    longer = ["--resume", "--run-name", "old", "--total-timesteps"]
    old = run_script([*args, *longer, str(4 * NUM_STEPS)], tmp_path, 300, FAST)
    assert old.returncode == 0, old.stderr[-3000:]
    new = "new games (the checkpoint has none for these envs; --vector-env sync and async keep them)"
    assert old.stdout.count("new games") == 1 and f"resuming from iteration 1 (global step 64); {new}" in old.stdout
    # the checkpoint now has games; the ale backend cannot take them
    ale = run_script([*args, *longer, str(6 * NUM_STEPS), "--vector-env", "ale"], tmp_path, 300, FAST)
    assert ale.returncode == 0, ale.stderr[-3000:]
    assert f"resuming from iteration 2 (global step 128); {new}" in ale.stdout


@pytest.mark.slow
def test_the_emulator_rng_goes_on_with_sticky_actions(tmp_path):
    """In-process, on ALE/Breakout-v5 (sticky actions: the emulator draws from its RNG every frame): envs put back
    in the games saved at step 150 (through a checkpoint file read with weights_only) and given the same actions play
    what the envs that went on play, observations, rewards, ends and game statistics, lives and no-op resets included
    (saved on sync, put back on async); new games given the same actions do not."""
    import numpy as np

    from cleanrl_utils.vector_envs import make_atari_vector_env, rank_games, restore_games

    actions = np.random.default_rng(0).integers(0, 4, size=(600, 2))

    def play(envs, start: int, ckpt=None) -> list:
        obs, _ = envs.reset(seed=1 if ckpt is None else 7)
        obs, done = restore_games(envs, ckpt, 0, torch.as_tensor(obs), np.zeros(2, dtype=np.float32))
        played = []
        for t in range(start, len(actions)):
            if t == 150 and ckpt is None:
                torch.save({"rng": [rank_games(envs, obs, done)]}, tmp_path / "games.pt")
            obs, reward, terminated, truncated, info = envs.step(actions[t])
            obs, done = torch.as_tensor(obs), (terminated | truncated).astype(np.float32)
            games = info.get("final_info", {}).get("episode", {})
            played.append([obs.numpy().tobytes(), reward.tolist(), done.tolist(), info["lives"].tolist()])
            played[-1] += [games["r"].tolist(), games["l"].tolist()] if games else []
        return played

    whole = play(make_atari_vector_env("sync", "ALE/Breakout-v5", 2), 0)
    ckpt = torch.load(tmp_path / "games.pt", weights_only=True)
    resumed = play(make_atari_vector_env("async", "ALE/Breakout-v5", 2), 150, ckpt)
    new = play(make_atari_vector_env("sync", "ALE/Breakout-v5", 2), 150)
    assert resumed == whole[150:] and new != whole[150:]
    assert sum(len(step) > 4 for step in resumed) >= 2  # games ended after the save
