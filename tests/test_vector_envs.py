"""The vector env backends (cleanrl_utils/vector_envs.py) against each other, and overlapped sampling in ppo_atari.py.

What the backends share *exactly* (checked here): observation shape (N, 4, 84, 84) and dtype uint8, the
frame-stack padding after a reset, clipped rewards, ``terminated`` on every lost life and at game over, lives,
SAME_STEP autoreset, and full-game episode statistics (all lives, unclipped points, agent steps).

What they share only within tolerance, or not at all, by design:

- ``ale`` vs the Python wrappers, same game, seed and actions, no no-ops, a game without FIRE (MsPacman): frames,
  rewards, flags and lives are *identical* up to and including the first lost life. After it the Python chain
  takes a no-op step and restarts its frame stack (``EpisodicLifeEnv.reset``), the native pool plays on.
- games with FIRE (Breakout): the Python chain presses FIRE and action 2 (two agent steps) after every reset and
  lost life, the native pools press FIRE for one frame at game start only, so the frames differ from the start.
- ``envpool`` bundles its own, older emulator core and converts to gray itself: frames differ in about 1% of the
  pixels at the start, and the game itself drifts from ale-py's after some dozens of steps.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import assert_one_line_error, find_run_dir, load_script, read_scalars, run_script

from cleanrl_utils.placement import plan_threads
from cleanrl_utils.vector_envs import BACKENDS, SyncVectorEnv, make_atari_vector_env

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


def test_ale_is_identical_to_the_python_wrappers_until_the_first_lost_life():
    compared = 0
    for t, res in lockstep(["sync", "ale"], MSPACMAN, 1000):
        (obs_py, r_py, term_py, trunc_py, info_py), (obs_ale, r_ale, term_ale, trunc_ale, info_ale) = (
            res["sync"], res["ale"],
        )
        assert obs_ale.dtype == obs_py.dtype == np.uint8 and obs_ale.shape == obs_py.shape == (2, 4, 84, 84)
        np.testing.assert_array_equal(info_ale["lives"], info_py["lives"])
        if t >= 0:
            np.testing.assert_array_equal(r_ale, r_py)
            np.testing.assert_array_equal(term_ale, term_py)
            np.testing.assert_array_equal(trunc_ale, trunc_py)
            if term_py.any():  # a lost life; from here on the Python chain takes its own no-op step
                assert info_py["lives"][term_py].tolist() == [2] * int(term_py.sum())
                break
        np.testing.assert_array_equal(obs_ale, obs_py)
        compared += 1
    assert compared > 100  # MsPacman's first life lasts well over 100 random steps; a lost life was reached


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
    reports = [i for i, (*_, info, _) in enumerate(steps) if "episode" in info.get("final_info", {})
               and info["final_info"]["_episode"][0]]
    assert reports == [len(steps) - 1]
    episode = info["final_info"]["episode"]
    assert int(episode["l"][0]) == len(steps)
    assert float(episode["r"][0]) >= sum(r for r, *_ in steps) > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_episode_return_counts_unclipped_points(backend):
    steps = play_one_game(backend, MSPACMAN)
    rewards = [r for r, *_ in steps]
    assert set(rewards) <= {0.0, 1.0}  # clipped for learning
    episode = steps[-1][3]["final_info"]["episode"]
    # every MsPacman reward is worth at least 10 points (a pellet), so the raw return is >= 10x the clipped one
    assert float(episode["r"][0]) >= 10 * sum(rewards) > 0
    assert int(episode["l"][0]) == len(steps)


# ---------------------------------------------------------------- overlapped sampling

ppo_atari = load_script("cleanrl/ppo_atari.py", "ppo_atari_overlap_test")


class StepCounterEnv(gym.Env):
    """Frame value = 16 * env index + steps taken (mod 16); records the actions it receives; ends every 5 steps."""

    observation_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    action_space = gym.spaces.Discrete(6)

    def __init__(self, index: int):
        self.index, self.steps, self.received = index, 0, []

    def _obs(self):
        return np.full((4, 84, 84), 16 * self.index + self.steps % 16, dtype=np.uint8)

    def reset(self, *, seed=None, options=None):
        return self._obs(), {}

    def step(self, action):
        self.received.append(int(action))
        self.steps += 1
        return self._obs(), float(self.steps), self.steps % 5 == 0, False, {}


class RecordingAgent(torch.nn.Module):
    """Samples random actions and remembers which action it sampled for which observation (one call at a time)."""

    def __init__(self):
        super().__init__()
        self.sampled: dict[int, list[int]] = {}
        self.generator = torch.Generator().manual_seed(0)

    def get_action_and_value(self, x, action=None):
        frame = x[:, 0, 0, 0].long()
        action = torch.randint(0, 6, (len(x),), generator=self.generator)
        for f, a in zip(frame.tolist(), action.tolist()):
            self.sampled.setdefault(f, []).append(a)
        return action, -action.float(), torch.zeros(len(x)), frame.float().unsqueeze(1)


def test_overlapped_rollout_keeps_every_env_trajectory_contiguous_and_its_own_actions():
    num_envs, num_steps = 4, 12
    env_objs = [StepCounterEnv(i) for i in range(num_envs)]
    groups = [
        SyncVectorEnv([lambda e=e: e for e in env_objs[g * 2 : g * 2 + 2]],
                      autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        for g in range(2)
    ]
    first = np.concatenate([g.reset(seed=0)[0] for g in groups])
    obs = torch.zeros((num_steps, num_envs, 4, 84, 84), dtype=torch.uint8)
    actions = torch.zeros((num_steps, num_envs), dtype=torch.long)
    logprobs, rewards, dones, values = (torch.zeros((num_steps, num_envs)) for _ in range(4))
    agent = RecordingAgent()
    timings = {}
    next_obs, next_done, _ = ppo_atari.collect_rollout_overlapped(
        groups, agent, torch.as_tensor(first), torch.zeros(num_envs), obs, actions, logprobs, rewards, dones,
        values, torch.device("cpu"), timings,
    )
    frames = obs[:, :, 0, 0, 0].long()
    for e in range(num_envs):
        # column e holds env e's own steps 0..num_steps-1, in order, none skipped or repeated
        assert frames[:, e].tolist() == [16 * e + t for t in range(num_steps)]
        # the env received exactly the actions stored in its column, in that order ...
        assert env_objs[e].received == actions[:, e].tolist()
        # ... and each is the action the policy sampled for that very observation
        for t in range(num_steps):
            assert agent.sampled[16 * e + t] == [int(actions[t, e])]
        assert rewards[:, e].tolist() == [float(t + 1) for t in range(num_steps)]
        assert dones[:, e].tolist() == [0.0] + [float(t % 5 == 0) for t in range(1, num_steps)]
        assert logprobs[:, e].tolist() == (-actions[:, e].float()).tolist()
        assert values[:, e].tolist() == frames[:, e].float().tolist()
    assert next_obs[:, 0, 0, 0].tolist() == [16 * e + num_steps for e in range(num_envs)]
    assert next_done.tolist() == [0.0] * num_envs  # step 12 is not a multiple of 5
    assert set(timings) == {"env", "inference"}
    for g in groups:
        g.close()


def test_overlapped_ale_run_logs_the_time_split(tmp_path):
    result = run_script(
        ["cleanrl/ppo_atari.py", "--vector-env", "ale", "--overlap", "--num-envs", "4", "--num-steps", "64",
         "--num-minibatches", "1", "--update-epochs", "1", "--total-timesteps", "512",
         "--runs-dir", str(tmp_path / "runs"), "--no-progress-bar"],
        cwd=tmp_path, timeout=400,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = find_run_dir(tmp_path / "runs")
    assert [s for s, _ in read_scalars(run_dir, "losses/value_loss")] == [256, 512]
    for key in ("env", "inference", "learn"):
        seconds = [v for _, v in read_scalars(run_dir, f"perf/{key}_seconds")]
        assert len(seconds) == 2 and all(v > 0 for v in seconds)
    perf = [line for line in result.stdout.splitlines() if line.startswith("perf: ")]
    assert len(perf) == 1 and "steps=512" in perf[0] and " learn=" in perf[0]


@pytest.mark.parametrize(
    "flags, fragment",
    [
        (["--vector-env", "sync", "--overlap"], "--overlap needs"),
        (["--vector-env", "ale", "--overlap", "--num-envs", "3"], "divisible by 2"),
        (["--vector-env", "ale", "--capture-video"], "--capture-video needs the Python wrappers"),
        (["--env-threads", "-1"], "must be >= 0"),
    ],
)
def test_bad_backend_options_are_one_line_errors(tmp_path, flags, fragment):
    result = run_script(["cleanrl/ppo_atari.py", *flags, "--num-steps", "8", "--total-timesteps", "64",
                         "--runs-dir", str(tmp_path / "runs")], cwd=tmp_path, timeout=120)
    assert_one_line_error(result, fragment)


def test_threads_are_sized_to_the_cores_of_each_rank():
    plan = plan_threads(num_envs=8, cores=16, local_ranks=2)
    assert (plan.cores, plan.env_threads, plan.inference_threads, plan.learning_threads) == (8, 8, 8, 8)
    plan = plan_threads(num_envs=8, cores=16, local_ranks=2, overlap=True)  # inference runs next to env threads
    assert (plan.env_threads, plan.inference_threads, plan.learning_threads) == (8, 1, 8)
    plan = plan_threads(num_envs=4, cores=16, local_ranks=1)
    assert plan.env_threads == 4  # never more threads than envs
    plan = plan_threads(num_envs=8, cores=2, local_ranks=4)
    assert (plan.env_threads, plan.learning_threads) == (1, 1)  # at least one each
    plan = plan_threads(num_envs=8, env_threads=3, torch_threads=2, cores=16, local_ranks=1)
    assert (plan.env_threads, plan.inference_threads, plan.learning_threads) == (3, 2, 2)
