"""The vector env backends (cleanrl_utils/vector_envs.py) against each other, and the time split of ppo_atari.py.

The backends play the *same game*: observation shape (N, 4, 84, 84) uint8, the frame stack restarted on the first
frame after a reset and after every lost life, clipped rewards, ``terminated`` on every lost life and at game over,
lives, SAME_STEP autoreset, the serve after every lost life (no-op, FIRE, action 2, taken by the env), and full-game
statistics (all lives, unclipped points, emulator frames). Checked here on the real emulator:

- ``ale`` and the Python chain with no no-ops at reset (so that their random draws can't differ): identical frames,
  rewards, flags, lives and game statistics, step for step, over many whole games of Breakout (FIRE) and MsPacman.
- ``envpool`` bundles its own emulator build and converts to gray itself: with one no-op frame on both sides it
  plays Breakout pixel for pixel like the chain under a NOOP policy; on MsPacman about 1% of the pixels differ.
- with the no-ops drawn at random, a policy that never presses FIRE ends games at the rate of the chain on every
  backend (the test says how close), and the no-op count at reset stays in range.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from helpers import assert_one_line_error, find_run_dir, read_scalars, run_each

from cleanrl_utils.vector_envs import BACKENDS, make_atari_vector_env

BREAKOUT = "BreakoutNoFrameskip-v4"
MSPACMAN = "MsPacmanNoFrameskip-v4"  # no FIRE in its action set: no fire-reset difference between backends


def make(backend: str, env_id: str, num_envs: int = 2) -> gym.vector.VectorEnv:
    return make_atari_vector_env(backend, env_id, num_envs, noop_max=0, seed=3)


def lockstep(backends, env_id, steps, seed=0):
    """Step the backends with one random action sequence; yield the step index and each backend's result."""
    envs = {b: make(b, env_id) for b in backends}
    try:
        first = {b: e.reset(seed=3) for b, e in envs.items()}
        yield -1, {b: (obs, None, None, None, info) for b, (obs, info) in first.items()}
        rng = np.random.default_rng(seed)
        n = envs[backends[0]].single_action_space.n
        assert all(e.single_action_space.n == n for e in envs.values())
        for t in range(steps):
            actions = rng.integers(0, n, size=2)
            yield t, {b: e.step(actions) for b, e in envs.items()}
    finally:
        for e in envs.values():
            e.close()


@pytest.mark.slow
@pytest.mark.parametrize("env_id, steps, lives", [(BREAKOUT, 1500, 5), (MSPACMAN, 800, 3)])
def test_ale_is_identical_to_the_python_wrappers_over_whole_games(env_id, steps, lives):
    games = lost_lives = 0
    for t, res in lockstep(["sync", "ale"], env_id, steps):
        (obs_py, r_py, term_py, trunc_py, info_py), (obs_ale, r_ale, term_ale, trunc_ale, info_ale) = (
            res["sync"],
            res["ale"],
        )
        assert obs_ale.dtype == obs_py.dtype == np.uint8 and obs_ale.shape == obs_py.shape == (2, 4, 84, 84)
        np.testing.assert_array_equal(obs_ale, obs_py, err_msg=f"step {t}")
        np.testing.assert_array_equal(info_ale["lives"], info_py["lives"])
        if t < 0:
            continue
        np.testing.assert_array_equal(r_ale, r_py)
        np.testing.assert_array_equal(term_ale, term_py)
        np.testing.assert_array_equal(trunc_ale, trunc_py)
        final_py, final_ale = info_py.get("final_info", {}), info_ale.get("final_info", {})
        assert ("episode" in final_py) == ("episode" in final_ale), f"step {t}"
        if "episode" in final_py:
            mask = final_py["_episode"]
            np.testing.assert_array_equal(final_ale["_episode"], mask)
            for key in ("r", "l"):
                np.testing.assert_array_equal(final_ale["episode"][key][mask], final_py["episode"][key][mask])
            games += int(mask.sum())
        lost_lives += int(term_py.sum())
    assert games >= 2 and lost_lives >= lives * games  # whole games: every life lost, and new games started


@pytest.mark.slow
def test_envpool_plays_breakout_pixel_for_pixel_like_the_chain_under_noop():
    envs = {b: make_atari_vector_env(b, BREAKOUT, 2, noop_max=1, seed=3) for b in ("sync", "envpool")}
    try:
        for e in envs.values():
            e.reset(seed=3)
        games = 0
        for t in range(700):
            (obs_py, r_py, term_py, _, info_py), (obs_ep, r_ep, term_ep, _, info_ep) = (
                e.step(np.zeros(2, dtype=np.int64)) for e in envs.values()
            )
            np.testing.assert_array_equal(obs_ep, obs_py, err_msg=f"step {t}")
            np.testing.assert_array_equal(r_ep, r_py)
            np.testing.assert_array_equal(term_ep, term_py)
            np.testing.assert_array_equal(info_ep["lives"], info_py["lives"])
            games += int("episode" in info_py.get("final_info", {}))
        assert games >= 2
    finally:
        for e in envs.values():
            e.close()


@pytest.mark.slow
def test_envpool_matches_within_tolerance_at_the_start():
    for t, res in lockstep(["sync", "envpool"], MSPACMAN, 40):
        (obs_py, r_py, term_py, _, info_py), (obs_ep, r_ep, term_ep, _, info_ep) = res["sync"], res["envpool"]
        assert obs_ep.dtype == np.uint8 and obs_ep.shape == obs_py.shape
        np.testing.assert_array_equal(info_ep["lives"], info_py["lives"])
        differ = np.abs(obs_ep.astype(int) - obs_py.astype(int)) > 0
        assert differ.mean() < 0.03, f"step {t}: {differ.mean():.1%} of the pixels differ"
        if t >= 0:
            np.testing.assert_array_equal(r_ep, r_py)
            np.testing.assert_array_equal(term_ep, term_py)


def play_one_game(backend: str, env_id: str, max_steps: int = 5000):
    """Random actions until env 0's first full game ends; per step: (reward, terminated, lives, info, obs)."""
    envs = make(backend, env_id)
    try:
        obs, info = envs.reset(seed=1)
        assert (obs[:, 0] == obs[:, 3]).all()  # the stack starts as 4 copies of the first frame
        rng = np.random.default_rng(1)
        steps = []
        for _ in range(max_steps):
            obs, reward, terminated, truncated, info = envs.step(rng.integers(0, envs.single_action_space.n, 2))
            steps.append((reward[0], terminated[0] or truncated[0], int(info["lives"][0]), info, obs[0]))
            final = info.get("final_info", {})
            if "episode" in final and final["_episode"][0]:
                return steps
        raise AssertionError(f"no game of env 0 ended within {max_steps} steps")
    finally:
        envs.close()


def assert_game_length_in_frames(length: int, agent_steps: int, lives: int) -> None:
    """A game's logged length counts emulator frames, as CleanRL's does: 4 per agent step (fewer in the step that
    ends the game), up to 3 steps per life that the env takes by itself (no-op, FIRE, 2) and up to 30 no-ops."""
    assert 4 * (agent_steps - 1) < length <= 4 * (agent_steps + 3 * lives) + 30, (length, agent_steps)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_lost_life_terminates_without_resetting_the_game(backend):
    steps = play_one_game(backend, BREAKOUT)
    lives = [lv for _, _, lv, _, _ in steps]
    dones = [i for i, (_, done, _, _, _) in enumerate(steps) if done]
    # 5 lives: 4 lost lives and the game over, each one `terminated`, nothing else
    assert len(dones) == 5 and dones[-1] == len(steps) - 1
    # the game goes on with one life less after each loss (a reset would bring back 5 lives) ...
    for k, i in enumerate(dones[:-1]):
        assert lives[i] == 4 - k and lives[i - 1] == 5 - k
    assert all(lives[j] == lives[j - 1] for j in range(1, len(steps)) if j not in dones)
    # ... and only the game over starts a new game (5 lives, a fresh padded frame stack)
    _, _, last_lives, info, obs = steps[-1]
    assert last_lives == 5 and (obs[0] == obs[3]).all()
    # episode statistics are those of the full game, reported once, at its end
    reports = [
        i
        for i, (*_, info, _) in enumerate(steps)
        if "episode" in info.get("final_info", {}) and info["final_info"]["_episode"][0]
    ]
    assert reports == [len(steps) - 1]
    episode = info["final_info"]["episode"]
    assert_game_length_in_frames(int(episode["l"][0]), agent_steps=len(steps), lives=5)
    assert float(episode["r"][0]) >= sum(r for r, *_ in steps) > 0


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_episode_return_counts_unclipped_points(backend):
    steps = play_one_game(backend, MSPACMAN)
    rewards = [r for r, *_ in steps]
    assert set(rewards) <= {0.0, 1.0}  # clipped for learning
    episode = steps[-1][3]["final_info"]["episode"]
    # every MsPacman reward is worth at least 10 points (a pellet), so the raw return is >= 10x the clipped one
    assert float(episode["r"][0]) >= 10 * sum(rewards) > 0
    assert_game_length_in_frames(int(episode["l"][0]), agent_steps=len(steps), lives=3)


def noop_games(backend: str, num_envs: int = 8, steps: int = 1500, seed: int = 1) -> np.ndarray:
    """Lengths (frames) of the Breakout games that a policy that never presses FIRE finishes."""
    envs = make_atari_vector_env(backend, BREAKOUT, num_envs, seed=seed)
    try:
        envs.reset(seed=seed)
        lengths = []
        for _ in range(steps):
            *_, info = envs.step(np.zeros(num_envs, dtype=np.int64))
            final = info.get("final_info", {})
            if "episode" in final:
                lengths += final["episode"]["l"][final["_episode"]].tolist()
        return np.array(lengths, dtype=float)
    finally:
        envs.close()


@pytest.fixture(scope="module")
def sync_noop_games():
    return noop_games("sync")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["ale", "envpool"])
def test_a_policy_that_never_fires_ends_games_at_the_rate_of_the_chain(backend, sync_noop_games):
    """Without the serve after a lost life a native pool waits for FIRE: 0 games would end here (the frame cap is
    108,000 frames). With it, the games end as in the chain. Their lengths vary a lot from game to game (the no-op
    count at reset decides where the ball goes: std ~400 frames for a mean ~800), so the means must agree within 4
    standard errors of their difference, and the counts of games (same steps on both sides) within 30%."""
    ours, chain = noop_games(backend), sync_noop_games
    assert len(chain) >= 40 and len(ours) >= 0.7 * len(chain) and len(chain) >= 0.7 * len(ours)
    stderr = np.sqrt(ours.var() / len(ours) + chain.var() / len(chain))
    assert abs(ours.mean() - chain.mean()) < 4 * stderr, (ours.mean(), chain.mean(), stderr)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_lost_life_is_followed_by_a_served_ball_without_any_agent_action(backend):
    """NOOP only: after the first lost life the ball comes back by itself, so the next life is lost too."""
    envs = make_atari_vector_env(backend, BREAKOUT, 1, seed=5)
    try:
        envs.reset(seed=5)
        lost_at = []
        for t in range(600):
            _, _, terminated, _, info = envs.step(np.zeros(1, dtype=np.int64))
            if terminated[0]:
                lost_at.append((t, int(info["lives"][0])))
            if len(lost_at) == 2:
                break
        assert [lives for _, lives in lost_at] == [4, 3], lost_at
        assert lost_at[1][0] - lost_at[0][0] < 200  # a served ball is missed within ~100 steps
    finally:
        envs.close()


BREAKOUT_FRAME_COUNTER = 90  # Breakout's RAM byte 90 counts frames (found by stepping the emulator one frame at a time)


@pytest.mark.slow
def test_no_ops_at_reset_stay_in_range_on_every_backend():
    """The chain and EnvPool draw 1-30 no-op frames at the start of a game, ale-py's pool 0-29 (its own rule, see
    AleVectorEnv). The serve adds 2 steps of 4 frames in Breakout."""
    serve = 8
    for backend, low, high in (("sync", 1, 30), ("ale", 0, 29)):
        envs = make_atari_vector_env(backend, BREAKOUT, 16, seed=11)
        _, info = envs.reset(seed=11)
        envs.close()
        noops = info["episode_frame_number"] - serve
        assert noops.min() >= low and noops.max() <= high and len(set(noops.tolist())) >= 8, (backend, noops)
    # EnvPool reports no frame counter: read the game's own, in the RAM its pool returns at reset; 64 draws, from 16
    # envs reset 4 times (building an EnvPool env costs more than a reset)
    envs = make_atari_vector_env("envpool", BREAKOUT, 16, seed=11)
    rams = [envs.pool.reset()[1]["ram"] for _ in range(4)]
    envs.close()
    probe = gym.make(BREAKOUT, frameskip=1)
    probe.reset(seed=0)
    start = int(probe.unwrapped.ale.getRAM()[BREAKOUT_FRAME_COUNTER])  # the counter right after reset_game
    probe.close()
    noops = (np.concatenate(rams)[:, BREAKOUT_FRAME_COUNTER].astype(int) - start) % 256
    assert noops.min() >= 1 and noops.max() <= 30 and len(set(noops.tolist())) >= 15, noops


def test_envpool_takes_a_new_seed_at_reset():
    """A resumed run reseeds its envs with reset(seed=...); EnvPool takes seeds only when it is built."""
    envs = make_atari_vector_env("envpool", BREAKOUT, 4, seed=1)

    def play(seed):  # NOOP steps: where the served balls go depends on the no-ops the seed drew
        envs.reset(seed=seed)
        return np.stack([envs.step(np.zeros(4, dtype=np.int64))[0][:, -1] for _ in range(60)])

    try:
        first, again, other, back = play(1), play(1), play(100), play(1)
    finally:
        envs.close()
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, back)
    assert not np.array_equal(first, other)


# ---------------------------------------------------------------- runs of ppo_atari.py: the time split, bad options

TIME_SPLIT = ["--vector-env", "ale", "--num-envs", "4", "--num-steps", "64", "--num-minibatches", "1"]
TIME_SPLIT += ["--update-epochs", "1", "--total-timesteps", "512"]
BAD_OPTIONS = {
    # fragment of the error: the flags
    "--capture-video needs the Python wrappers": ["--vector-env", "ale", "--capture-video"],
    "must be >= 0": ["--env-threads", "-1"],
}


@pytest.fixture(scope="module")
def atari_runs(tmp_path_factory):
    """{"time split" or a fragment of BAD_OPTIONS: (its working directory, its completed process)}: ppo_atari.py runs,
    each `python cleanrl/ppo_atari.py ...` in a folder of its own, in processes forked from one that imported torch
    first (run_each)."""
    root = tmp_path_factory.mktemp("atari_runs")
    cases = {"time split": TIME_SPLIT}
    for fragment, flags in BAD_OPTIONS.items():
        cases[fragment] = [*flags, "--num-steps", "8", "--total-timesteps", "64"]
    jobs = []
    for i, flags in enumerate(cases.values()):
        (root / str(i)).mkdir()
        args = ["cleanrl/ppo_atari.py", *flags, "--runs-dir", str(root / str(i) / "runs"), "--no-progress-bar"]
        jobs.append({"args": args, "cwd": str(root / str(i))})
    results = run_each([(job["args"], job["cwd"]) for job in jobs], timeout=600, train=True)
    return {case: (root / str(i), result) for i, (case, result) in enumerate(zip(cases, results))}


@pytest.mark.slow
def test_ale_run_logs_the_time_split(atari_runs):
    cwd, result = atari_runs["time split"]
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = find_run_dir(cwd / "runs")
    assert [s for s, _ in read_scalars(run_dir, "losses/value_loss")] == [256, 512]
    for key in ("env", "inference", "learn"):
        seconds = [v for _, v in read_scalars(run_dir, f"perf/{key}_seconds")]
        assert len(seconds) == 2 and all(v > 0 for v in seconds)
    assert [s for s, _ in read_scalars(run_dir, "charts/SPS")] == [256, 512]  # the rate the split goes with


@pytest.mark.slow
@pytest.mark.parametrize("fragment", BAD_OPTIONS)
def test_bad_backend_options_are_one_line_errors(atari_runs, fragment):
    _, result = atari_runs[fragment]
    assert_one_line_error(result, fragment)


@pytest.mark.parametrize("backend", ["envpool", "ale"])
def test_a_native_pool_builds_in_a_fresh_process(backend):
    """Nothing else has registered the ALE ids yet (a program that builds the pool first)."""
    import subprocess
    import sys

    code = (
        "from cleanrl_utils.vector_envs import make_atari_vector_env; "
        f"make_atari_vector_env({backend!r}, 'BreakoutNoFrameskip-v4', 2).close()"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
