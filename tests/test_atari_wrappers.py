"""The Atari preprocessing, checked frame by frame on the real emulator (Breakout and Pong).

A "tap" on the raw ALE env (``frameskip=1``, so one call = one emulator frame) records every frame's action and
raw reward, and ``ale.cloneState()/restoreState()`` replays an agent step by hand, so each semantic is checked
against what the emulator really did, not against the wrappers' own bookkeeping.
"""

from __future__ import annotations

import math
from typing import Any

import cv2
import gymnasium as gym
import numpy as np
import pytest

from cleanrl_utils.atari_wrappers import ClipRewardEnv, make_atari_env

BREAKOUT = "BreakoutNoFrameskip-v4"
PONG = "PongNoFrameskip-v4"
NOOP, FIRE, RIGHT = 0, 1, 2  # action indices in both games' minimal action sets
FIRE_RESET_ACTIONS = [FIRE] * 4 + [RIGHT] * 4  # FireResetEnv: one agent step of FIRE, one of action 2


class FrameTap:
    """Records (action, raw reward) of every emulator frame the wrapped env plays."""

    def __init__(self, env: gym.Env):
        self.frames: list[tuple[int, float]] = []
        base = env.unwrapped
        inner_step = base.step

        def step(action: int) -> Any:
            out = inner_step(action)
            self.frames.append((int(action), float(out[1])))
            return out

        base.step = step  # the wrappers call the base env's step: an instance attribute takes precedence

    def actions(self) -> list[int]:
        return [a for a, _ in self.frames]

    def reward(self) -> float:
        return sum(r for _, r in self.frames)

    def clear(self) -> None:
        self.frames.clear()


def ale(env: gym.Env) -> Any:
    return env.unwrapped.ale


def frame_number(env: gym.Env) -> int:
    return ale(env).getEpisodeFrameNumber()


def wrapper_chain(env: gym.Env) -> list[str]:
    names = []
    while isinstance(env, gym.Wrapper):
        names.append(type(env).__name__)
        env = env.env
    return names


def leading_noops(actions: list[int]) -> int:
    return next((i for i, a in enumerate(actions) if a != NOOP), len(actions))


def breakout_tracker(env: gym.Env) -> int:
    """Move the paddle under the ball (Breakout RAM: 72 = paddle x, 99 = ball x): keeps the ball in play."""
    ram = ale(env).getRAM()
    paddle_centre, ball = int(ram[72]) + 8, int(ram[99])
    if ball == 0 or abs(paddle_centre - ball) < 4:
        return NOOP
    return RIGHT if paddle_centre < ball else 3  # 3 = LEFT


# --- the chain --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", [BREAKOUT, PONG])
def test_wrapper_chain_and_observation_space(env_id: str) -> None:
    env = make_atari_env(env_id)
    # Pong's minimal action set has FIRE too, so it gets FireResetEnv (the rule of baselines/CleanRL/SB3; harmless
    # there, see test_pong_plays_without_fire).
    assert env.unwrapped.get_action_meanings()[FIRE] == "FIRE"
    assert wrapper_chain(env) == [
        "FrameStackObservation",
        "ClipRewardEnv",
        "FireResetEnv",
        "EpisodicLifeEnv",
        "EpisodeFramesEnv",
        "RecordEpisodeStatistics",
        "AtariPreprocessing",
        "OrderEnforcing",
        "PassiveEnvChecker",
    ]
    assert env.observation_space.shape == (4, 84, 84) and env.observation_space.dtype == np.uint8
    assert ale(env).getInt("max_num_frames_per_episode") == 108_000
    assert ale(env).getFloat("repeat_action_probability") == 0.0
    plain = make_atari_env(env_id, episodic_life=False, clip_reward=False, frame_stack=2)
    assert "EpisodicLifeEnv" not in wrapper_chain(plain) and "ClipRewardEnv" not in wrapper_chain(plain)
    assert plain.observation_space.shape == (2, 84, 84)


# --- no-op reset ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", [PONG, BREAKOUT])
def test_noop_reset_takes_1_to_30_noops_depending_on_seed(env_id: str) -> None:
    env = make_atari_env(env_id)
    tap = FrameTap(env)
    counts = []
    for seed in range(8):
        tap.clear()
        _, info = env.reset(seed=seed)  # a seeded reset always starts a new game
        actions = tap.actions()
        noops = leading_noops(actions)
        # what reset played: the no-ops, then FireResetEnv's FIRE and action 2 (one agent step = 4 frames each)
        assert actions[noops:] == FIRE_RESET_ACTIONS
        assert 1 <= noops <= 30
        assert info["episode_frame_number"] == frame_number(env) == noops + len(FIRE_RESET_ACTIONS)
        counts.append(noops)
        env.step(NOOP)
    assert len(set(counts)) >= 3, f"the no-op count should vary with the seed, got {counts}"
    tap.clear()
    env.reset(seed=5)
    assert leading_noops(tap.actions()) == counts[5]  # the same seed gives the same no-ops


def test_noop_max_bounds_the_noops() -> None:
    env = make_atari_env(PONG, noop_max=3, episodic_life=False)  # without episodic life every reset is a new game
    tap = FrameTap(env)
    env.reset(seed=0)
    counts = []
    for _ in range(10):
        tap.clear()
        env.reset()
        counts.append(leading_noops(tap.actions()))
    assert set(counts) <= {1, 2, 3} and len(set(counts)) >= 2, counts


# --- frame skip, max-pool, grayscale 84x84, frame stack ---------------------------------------------------------


def test_step_is_4_frames_max_pooled_grayscale_84x84() -> None:
    env = make_atari_env(BREAKOUT)
    obs, _ = env.reset(seed=0)
    a = ale(env)
    action_set = a.getMinimalActionSet()
    rng = np.random.default_rng(0)
    pooling_mattered = 0
    for t in range(40):
        action = FIRE if t == 0 else int(rng.integers(env.action_space.n))
        before, frame_before = a.cloneState(), frame_number(env)
        obs, *_ = env.step(action)
        after, ram_after = a.cloneState(), a.getRAM().copy()
        assert frame_number(env) == frame_before + 4
        # replay the same step by hand from the saved emulator state
        a.restoreState(before)
        screens = []
        for _ in range(4):
            a.act(action_set[action])
            screens.append(a.getScreenGrayscale())
        np.testing.assert_array_equal(a.getRAM(), ram_after)  # the wrapper played exactly these 4 frames
        expected = cv2.resize(np.maximum(screens[2], screens[3]), (84, 84), interpolation=cv2.INTER_AREA)
        assert obs.dtype == np.uint8 and obs.shape == (4, 84, 84)
        np.testing.assert_array_equal(obs[-1], expected)
        last_only = cv2.resize(screens[3], (84, 84), interpolation=cv2.INTER_AREA)
        pooling_mattered += not np.array_equal(expected, last_only)
        a.restoreState(after)
    assert pooling_mattered > 0, "the ball moved in no step: the max-pool was not exercised"


def test_frame_stack_shifts_by_one_frame_per_step() -> None:
    env = make_atari_env(BREAKOUT)
    prev, _ = env.reset(seed=1)
    assert all(np.array_equal(prev[k], prev[3]) for k in range(3))  # a new episode starts with its first frame x4
    changed = 0
    for _ in range(30):
        obs, _, terminated, truncated, _ = env.step(breakout_tracker(env))
        assert not (terminated or truncated)
        for k in range(3):
            np.testing.assert_array_equal(obs[k], prev[k + 1])
        changed += not np.array_equal(obs[3], prev[3])
        prev = obs
    assert changed > 0


# --- episodic life and fire reset -------------------------------------------------------------------------------


def play_until_done(env: gym.Env, action: int, limit: int) -> tuple[int, bool, bool, dict[str, Any]]:
    for steps in range(1, limit + 1):
        _, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return steps, terminated, truncated, info
    raise AssertionError(f"no episode end within {limit} agent steps")


def test_episodic_life_ends_episode_on_lost_life_without_resetting_emulator() -> None:
    env = make_atari_env(BREAKOUT)
    tap = FrameTap(env)
    env.reset(seed=0)
    assert ale(env).lives() == 5
    for lives_left in (4, 3, 2, 1):
        # NOOP only: the ball is launched by FireResetEnv, the paddle never moves, so a life is lost quickly
        _, terminated, truncated, info = play_until_done(env, NOOP, limit=300)
        assert terminated and not truncated
        assert ale(env).lives() == info["lives"] == lives_left
        assert not ale(env).game_over()
        assert "episode" not in info  # a lost life is not a finished game
        frame_at_loss = frame_number(env)
        tap.clear()
        env.reset()
        # the game goes on from where it was: same lives, frame counter keeps running; then FIRE relaunches the ball
        assert ale(env).lives() == lives_left
        assert tap.actions() == [NOOP] * 4 + FIRE_RESET_ACTIONS
        assert frame_number(env) == frame_at_loss + 12
    _, terminated, truncated, info = play_until_done(env, NOOP, limit=300)
    assert terminated and not truncated
    assert ale(env).lives() == 0 and ale(env).game_over()
    assert "episode" in info
    tap.clear()
    env.reset()
    # a real game over resets the emulator: a new game with 5 lives, a fresh frame counter
    assert ale(env).lives() == 5
    assert frame_number(env) == len(tap.frames) <= 30 + len(FIRE_RESET_ACTIONS)


def test_without_episodic_life_a_lost_life_does_not_end_the_episode() -> None:
    env = make_atari_env(BREAKOUT, episodic_life=False)
    env.reset(seed=0)
    for _ in range(300):
        _, _, terminated, truncated, _ = env.step(NOOP)
        assert not (terminated or truncated)
        if ale(env).lives() < 5:
            return
    raise AssertionError("no life lost in 300 NOOP steps")


def test_breakout_needs_fire_and_fire_reset_provides_it() -> None:
    # Control: the same game without FireResetEnv never launches the ball, so NOOP play loses no life ...
    raw = gym.wrappers.AtariPreprocessing(gym.make(BREAKOUT, frameskip=1), noop_max=30)
    raw.reset(seed=0)
    for _ in range(300):
        _, _, terminated, truncated, _ = raw.step(NOOP)
        assert not (terminated or truncated)
    assert ale(raw).lives() == 5
    # ... while with make_atari_env the ball is in play after reset without the agent ever pressing FIRE
    env = make_atari_env(BREAKOUT)
    env.reset(seed=0)
    _, terminated, _, _ = play_until_done(env, NOOP, limit=300)
    assert terminated and ale(env).lives() == 4
    # (test_episodic_life_... shows the same after each lost life, down to game over)


def test_pong_plays_without_fire() -> None:
    # Pong serves by itself: with no FireResetEnv and NOOP only, the opponent scores. FireResetEnv in Pong's
    # chain therefore only moves the paddle for one agent step at reset.
    raw = gym.wrappers.AtariPreprocessing(gym.make(PONG, frameskip=1), noop_max=30)
    raw.reset(seed=0)
    for _ in range(300):
        _, reward, *_ = raw.step(NOOP)
        if reward == -1:
            return
    raise AssertionError("Pong scored no point in 300 NOOP steps")


# --- reward clipping and episode statistics ---------------------------------------------------------------------


class _RewardList(gym.Env):
    def __init__(self, rewards: list[float]):
        self.rewards = list(rewards)
        self.observation_space = gym.spaces.Box(0, 1, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(1)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> tuple[Any, float, bool, bool, dict]:
        return np.zeros(1, np.float32), self.rewards.pop(0), False, False, {}


def test_clip_reward_env_gives_the_sign() -> None:
    raw = [-7.0, -1.0, -0.5, 0.0, 0.25, 1.0, 4.0, 7.0]
    env = ClipRewardEnv(_RewardList(raw))
    env.reset()
    clipped = [env.step(0)[1] for _ in raw]
    assert clipped == [-1.0, -1.0, -1.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    assert all(type(r) is float for r in clipped)


def test_breakout_clipped_rewards_and_full_game_statistics() -> None:
    """A 4-point brick gives reward 1; the game's return sums raw points over all lives; its length is every
    emulator frame of the game (no-ops, agent steps and the resets' own steps: CleanRL's unit)."""
    env = make_atari_env(BREAKOUT)
    tap = FrameTap(env)
    env.reset(seed=1)
    agent_steps, clipped_sum, big_brick_seen, lives_lost = 0, 0.0, False, 0
    while True:
        action = breakout_tracker(env) if not big_brick_seen else NOOP  # play well, then let the game end
        before = len(tap.frames)
        _, reward, terminated, truncated, info = env.step(action)
        agent_steps += 1
        raw_step = sum(r for _, r in tap.frames[before:])
        assert reward == np.sign(raw_step)
        clipped_sum += reward
        if raw_step > 1:
            big_brick_seen = True
            assert reward == 1.0
        assert not truncated and agent_steps < 3000
        if terminated:
            if ale(env).game_over():
                break
            assert "episode" not in info
            lives_lost += 1
            env.reset()
    assert big_brick_seen and lives_lost == 4
    episode = info["episode"]
    # every raw point of the game, including any scored during reset's own FIRE / no-op steps
    assert episode["r"] == tap.reward() > clipped_sum
    assert episode["l"] == len(tap.frames) > 4 * agent_steps


# --- the frame cap and seeded resets ----------------------------------------------------------------------------


def test_max_episode_frames_truncates() -> None:
    env = make_atari_env(PONG, max_frames=200)
    env.reset(seed=0)
    start = frame_number(env)
    steps, terminated, truncated, info = play_until_done(env, NOOP, limit=100)
    assert truncated and not terminated
    assert frame_number(env) == 200
    assert steps == math.ceil((200 - start) / 4)
    assert info["episode"]["l"] == 200  # frames, the no-ops included
    env.reset()
    assert frame_number(env) <= 30 + len(FIRE_RESET_ACTIONS)  # truncation ends the game: a real reset follows
    # a seeded reset mid-game starts a new game, and a new length count
    env.step(NOOP)
    env.reset(seed=0)
    again, _, truncated, info = play_until_done(env, NOOP, limit=100)
    assert truncated and again == steps and info["episode"]["l"] == 200


def test_seeded_reset_starts_a_new_game_even_mid_game() -> None:
    fresh = make_atari_env(BREAKOUT)
    first_obs, _ = fresh.reset(seed=7)
    env = make_atari_env(BREAKOUT)
    env.reset(seed=3)
    for _ in range(10):
        env.step(RIGHT)
    obs, _ = env.reset(seed=7)
    assert frame_number(env) == frame_number(fresh) and ale(env).lives() == 5
    np.testing.assert_array_equal(obs, first_obs)


def test_the_emulator_env_grabs_no_screen_per_frame() -> None:
    """AtariPreprocessing reads the screens it pools from the emulator; the env below it returns its RAM, not an
    RGB screen per emulator frame that nobody reads."""
    env = make_atari_env(BREAKOUT)
    env.reset(seed=0)
    frame_obs = env.unwrapped.step(0)[0]
    assert frame_obs.shape == (128,) and frame_obs.dtype == np.uint8
    obs, *_ = env.step(0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
