"""The Atari preprocessing of the PPO/DQN literature (Mnih et al. 2015; Machado et al. 2018) for gymnasium 1.x.

Order, from the emulator outwards (as in CleanRL / Stable-Baselines3):

1. ``gymnasium.wrappers.AtariPreprocessing``: no-op reset (1..30 no-ops), frame skip 4 with a max-pool of the
   last two frames, 84x84 grayscale (read straight from the emulator's grayscale screen, resized with
   ``INTER_AREA``). gymnasium's own wrapper does exactly these steps, so we use it rather than re-writing them.
2. ``RecordEpisodeStatistics``: the *full-game* return (all lives, unclipped rewards) and, through
   ``EpisodeFramesEnv``, length in emulator frames (CleanRL's unit). It sits below ``EpisodicLifeEnv`` so that a
   lost life is not reported as an episode.
3. ``EpisodicLifeEnv``: a lost life ends the episode for learning, without resetting the emulator.
4. ``FireResetEnv``: presses FIRE after every reset (real or after a lost life) in games whose action set has FIRE
   (the rule of baselines, CleanRL and Stable-Baselines3). Breakout needs it; Pong has FIRE too and gets it,
   harmlessly (FIRE does nothing at Pong's start, then action 2 moves the paddle for 4 frames).
5. ``ClipRewardEnv``: reward clipped to its sign.
6. ``gymnasium.wrappers.FrameStackObservation``: the last 4 frames, shape ``(4, 84, 84)`` uint8.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

NOOP_ACTION = 0
FIRE_ACTION = 1


def _ale(env: gym.Env) -> Any:
    return env.unwrapped.ale  # type: ignore[attr-defined]


class EpisodicLifeEnv(gym.Wrapper):
    """A lost life returns ``terminated=True`` while the game goes on (Mnih et al. 2015).

    ``reset`` after a lost life does not reset the emulator: it takes one no-op step from where the game is, so
    the agent keeps playing the same game with fewer lives. Only a real game over (or truncation) resets the
    emulator, or a ``reset(seed=...)``: a seed asks for a new, reproducible game and is never silently ignored.
    ``info["lives"]`` is left as the emulator reports it.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives = 0
        self.was_real_done = True

    def step(self, action: int) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.was_real_done = terminated or truncated
        lives = _ale(self.env).lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        if self.was_real_done or kwargs.get("seed") is not None:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(NOOP_ACTION)
            if terminated or truncated:  # the no-op itself ended the game: start a new one
                obs, info = self.env.reset(**kwargs)
        self.lives = _ale(self.env).lives()
        self.was_real_done = False
        return obs, info


class FireResetEnv(gym.Wrapper):
    """Press FIRE (then action 2) after reset, for games that stand still until FIRE is pressed.

    Wrapped outside ``EpisodicLifeEnv``, it fires after each lost life too, as in the baselines.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings()  # type: ignore[attr-defined]
        assert meanings[FIRE_ACTION] == "FIRE" and len(meanings) >= 3

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.env.reset(**kwargs)
        for action in (FIRE_ACTION, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        return obs, info


class EpisodeFramesEnv(gym.Wrapper):
    """Make ``info["episode"]["l"]`` the game's length in emulator frames, the unit of CleanRL's curves.

    CleanRL's ``RecordEpisodeStatistics`` sits under its frame skip and counts emulator frames: the no-ops at reset,
    4 per agent step, and the steps FIRE reset and the episodic-life reset take by themselves. The statistics here
    sit above the frame skip (they would count 4-frame steps without the no-ops), so this wrapper, right above
    them, writes the emulator's own frame count of the game instead (the same counter ale-py's pool reports).
    """

    def step(self, action: int) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if "episode" in info:
            info["episode"]["l"] = _ale(self.env).getEpisodeFrameNumber()
        return obs, reward, terminated, truncated, info


class ClipRewardEnv(gym.RewardWrapper):
    """Reward clipped to its sign: -1, 0 or +1."""

    def reward(self, reward: SupportsFloat) -> float:
        return float(np.sign(reward))


def needs_fire_reset(env: gym.Env) -> bool:
    return "FIRE" in env.unwrapped.get_action_meanings()  # type: ignore[attr-defined]


def make_atari_env(
    env_id: str,
    *,
    frame_stack: int = 4,
    noop_max: int = 30,
    episodic_life: bool = True,
    clip_reward: bool = True,
    render_mode: str | None = None,
    max_episode_frames: int = 108_000,
    video_folder: str | None = None,
) -> gym.Env:
    """Create one preprocessed Atari env. ``gym.register_envs(ale_py)`` is called here.

    ``frameskip=1`` is forced on the emulator because the frame skip (with max-pool) is done by the wrapper;
    ``max_episode_frames`` (108,000 frames = 30 minutes of play) is the usual cap, the same as ale-py's native
    vector env, so that every backend truncates at the same point. With ``video_folder``, whole games (not
    single lives) are recorded there by ``gymnasium.wrappers.RecordVideo`` (needs moviepy).
    """
    import ale_py

    gym.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner on stderr for every emulator
    env = gym.make(
        env_id,
        frameskip=1,
        max_num_frames_per_episode=max_episode_frames,
        render_mode="rgb_array" if video_folder else render_mode,
        obs_type="ram",
    )
    # AtariPreprocessing discards what the emulator env returns at each of its frames and grabs the two screens it
    # pools from the emulator itself: the env returns its 128-byte RAM instead of an RGB screen that nobody reads
    # (docs/throughput.md has the cost). The screen's space stays declared: AtariPreprocessing sizes its frame
    # buffers from it.
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
    env = gym.wrappers.FrameStackObservation(env, frame_stack)
    return env
