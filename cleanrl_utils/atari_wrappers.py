"""The Atari preprocessing of Mnih et al. 2015 for gymnasium 1.x, as in CleanRL and SB3 (``make_atari_env``)."""

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

NOOP_ACTION = 0
FIRE_ACTION = 1
MAX_FRAMES = 108_000  # 30 minutes of play, a game's cap on every backend


class EpisodicLifeEnv(gym.Wrapper):
    """A lost life is ``terminated=True``; ``reset`` then takes a no-op step, not a new game (fewer lives)."""

    lives, was_real_done = 0, True  # the first reset starts a new game

    def step(self, action: int) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.was_real_done = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        terminated = True if 0 < lives < self.lives else terminated
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        if self.was_real_done or kwargs.get("seed") is not None:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(NOOP_ACTION)
            if terminated or truncated:  # the no-op itself ended the game: start a new one
                obs, info = self.env.reset(**kwargs)
        self.lives, self.was_real_done = self.env.unwrapped.ale.lives(), False
        return obs, info


class FireResetEnv(gym.Wrapper):
    """Press FIRE, then action 2, after reset (outside ``EpisodicLifeEnv``: each lost life too), as in the baselines."""

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.env.reset(**kwargs)
        for action in (FIRE_ACTION, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        return obs, info


class EpisodeFramesEnv(gym.Wrapper):
    """``info["episode"]["l"]`` in the emulator's frames of the game (CleanRL's unit), not in agent steps."""

    def step(self, action: int) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if "episode" in info:
            info["episode"]["l"] = self.env.unwrapped.ale.getEpisodeFrameNumber()
        return obs, reward, terminated, truncated, info


class ClipRewardEnv(gym.RewardWrapper):
    """Reward clipped to its sign: -1, 0 or +1."""

    def reward(self, reward: SupportsFloat) -> float:
        return float(np.sign(reward))


def needs_fire_reset(env: gym.Env) -> bool:
    """Whether the game's action set has FIRE, which must then be action 1 of at least 3 (FireResetEnv's actions)."""
    meanings = env.unwrapped.get_action_meanings()  # type: ignore[attr-defined]
    assert "FIRE" not in meanings or (meanings[FIRE_ACTION] == "FIRE" and len(meanings) >= 3), meanings
    return "FIRE" in meanings


def make_atari_env(
    env_id, frame_stack=4, noop_max=30, episodic_life=True, clip_reward=True, max_frames=MAX_FRAMES, video_folder=None
) -> gym.Env:
    """One preprocessed Atari env; with ``video_folder``, whole games are recorded there (``RecordVideo``, moviepy)."""
    import ale_py

    gym.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner on stderr for every emulator
    render_mode = "rgb_array" if video_folder else None
    env = gym.make(env_id, frameskip=1, max_num_frames_per_episode=max_frames, render_mode=render_mode, obs_type="ram")
    # AtariPreprocessing reads the screens it pools from the emulator itself: the env returns its 128-byte RAM, not an
    # RGB screen nobody reads (docs/throughput.md); the screen's space stays declared, for AtariPreprocessing's buffers
    height, width = env.unwrapped.ale.getScreenDims()
    env.observation_space = gym.spaces.Box(0, 255, (height, width, 3), np.uint8)
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=noop_max, frame_skip=4, screen_size=84, terminal_on_life_loss=False, grayscale_obs=True
    )
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env = EpisodeFramesEnv(env)
    if video_folder:  # below EpisodicLifeEnv, so that a video is a whole game
        env = gym.wrappers.RecordVideo(env, video_folder, disable_logger=True)
    if episodic_life:
        env = EpisodicLifeEnv(env)
    if needs_fire_reset(env):
        env = FireResetEnv(env)
    if clip_reward:
        env = ClipRewardEnv(env)
    return gym.wrappers.FrameStackObservation(env, frame_stack)
