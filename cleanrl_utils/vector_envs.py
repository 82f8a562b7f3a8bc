"""Vector Atari envs for the PPO scripts, one contract for every backend.

Backends (``--vector-env``):

- ``sync``: gymnasium ``SyncVectorEnv`` over the Python wrapper chain of ``atari_wrappers.make_atari_env``
  (all envs in the training process, one after the other).
- ``async``: gymnasium ``AsyncVectorEnv`` over the same chain (one process per env, shared memory).
- ``ale``: ale-py's C++ ``AtariVectorEnv`` (preprocessing and stepping in C++ threads), behind ``NativeAtariVectorEnv``.
- ``envpool``: EnvPool's C++ Atari pool (optional extra: ``pip install -e '.[envpool]'``), behind the same adapter.

The contract the scripts rely on, identical for all four:

- observations ``uint8`` of shape ``(num_envs, 4, 84, 84)``; after a reset the stack holds 4 copies of the first
  frame (gymnasium's ``FrameStackObservation`` padding; the native pools pad with zeros, the adapter fixes that);
- SAME_STEP autoreset: on the step where a game ends, the env is reset at once and the step returns the *reset*
  observation, so every step is a real transition;
- reward clipped to its sign;
- ``terminated`` is True on a lost life while the game goes on (``EpisodicLifeEnv``: value bootstrapping stops there,
  the emulator is *not* reset), and on game over;
- the statistics of every *full game* (all lives, unclipped rewards, length in agent steps) arrive on the step where
  it ends in ``infos["final_info"]["episode"]`` (``"r"``, ``"l"``, ``"t"``) with the mask
  ``infos["final_info"]["_episode"]``;
- ``step_async(actions)`` / ``step_wait()`` for overlapped sampling (a blocking step for ``sync``).

The native pools run *without* their own ``episodic_life`` option: in ale-py it resets the whole game on every lost
life (lives go 5, 4, 5, 4, ...), so the agent would never play with fewer lives, which is what degrades EnvPool's
Breakout results in CleanRL's benchmarks. The adapter instead turns a drop of ``info["lives"]`` into ``terminated``
and keeps the game going; it runs the pool with unclipped rewards, clips them itself and sums the raw ones into
the episode return.

Fire after a lost life: the Python chain (``FireResetEnv``) presses FIRE (then action 2) by itself after every
reset and every lost life. The native pools press FIRE only once at the start of a game (``use_fire_reset``); after a
lost life the *agent* has to press FIRE to serve again (Machado et al. 2018 recommend not scripting it at all). The
adapter does not inject it: an injected action would not be the one the policy sampled, and the step can't be
hidden because all envs of a pool step together. A random policy presses FIRE within a few steps, and PPO learns
it early; a policy that never fires is stopped by the 108,000-frame truncation. Also different by design: the
Python chain takes one no-op step and restarts the frame stack after a lost life, the native pools do neither.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Literal

import gymnasium as gym
import numpy as np

from cleanrl_utils.atari_wrappers import make_atari_env
from cleanrl_utils.checks import fail

VectorEnvBackend = Literal["sync", "async", "ale", "envpool"]
BACKENDS: tuple[str, ...] = ("sync", "async", "ale", "envpool")
SAME_STEP = gym.vector.AutoresetMode.SAME_STEP
MAX_EPISODE_FRAMES = 108_000  # 30 minutes of play; the same cap for every backend
FRAME_SKIP = 4


def make_env(env_id: str, idx: int, capture_video: bool, run_name: str, noop_max: int = 30) -> Callable[[], gym.Env]:
    """A thunk building one preprocessed Atari env; env 0 records videos to ``videos/{run_name}`` if asked."""

    def thunk() -> gym.Env:
        video_folder = f"videos/{run_name}" if capture_video and idx == 0 else None
        return make_atari_env(env_id, noop_max=noop_max, video_folder=video_folder)

    return thunk


class SyncVectorEnv(gym.vector.SyncVectorEnv):
    """gymnasium's SyncVectorEnv with the ``step_async``/``step_wait`` pair of the other backends (no overlap)."""

    def step_async(self, actions: np.ndarray) -> None:
        self._pending_actions = actions

    def step_wait(self) -> tuple[Any, ...]:
        return gym.vector.SyncVectorEnv.step(self, self._pending_actions)


def ale_game(env_id: str) -> str:
    """The ROM name (``breakout``) of a registered ALE id (``BreakoutNoFrameskip-v4``, ``ALE/Breakout-v5``)."""
    import ale_py

    gym.register_envs(ale_py)
    return gym.registry[env_id].kwargs["game"]


class NativeAtariVectorEnv(gym.vector.VectorEnv):
    """A C++ Atari pool (ale-py or EnvPool) presented with the contract of the module docstring.

    The pool must run with SAME_STEP-like autoreset (the adapter calls ``_reset_ended`` to complete it for pools
    that reset on the next step), unclipped rewards, no episodic life and its frame stack of 4 84x84 gray frames.
    Subclasses implement ``_pool_reset(seed)``, ``_pool_send(actions)``, ``_pool_recv()`` and ``_reset_ended``.
    """

    metadata = {"autoreset_mode": SAME_STEP}

    def __init__(self, num_envs: int, num_actions: int):
        self.num_envs = num_envs
        self.single_observation_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
        self.single_action_space = gym.spaces.Discrete(num_actions)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.metadata = {"autoreset_mode": SAME_STEP}
        self._lives = np.zeros(num_envs, dtype=np.int64)
        self._return = np.zeros(num_envs, dtype=np.float64)
        self._length = np.zeros(num_envs, dtype=np.int64)
        self._start = np.full(num_envs, time.perf_counter())
        self._frames = np.zeros(num_envs, dtype=np.int64)  # frames of the current game in the stack (up to 4)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        obs, info = self._pool_reset(seed)
        self._frames[:] = 1
        _pad_stack(obs, self._frames)
        self._lives[:] = info["lives"]
        self._return[:] = 0
        self._length[:] = 0
        self._start[:] = time.perf_counter()
        return obs, {"lives": self._lives.copy()}

    def step_async(self, actions: np.ndarray) -> None:
        self._pool_send(np.asarray(actions, dtype=np.int32))

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        obs, raw_reward, game_over, truncated, lives = self._pool_recv()
        ended = game_over | truncated
        if ended.any():
            obs, lives = self._reset_ended(obs, lives, ended)
        self._return += raw_reward
        self._length += 1
        life_lost = (lives < self._lives) & ~ended
        self._lives[:] = lives
        terminated = game_over | life_lost
        infos: dict[str, Any] = {"lives": self._lives.copy()}
        self._frames = np.where(ended, 1, np.minimum(self._frames + 1, 4))
        _pad_stack(obs, self._frames)
        if ended.any():
            now = time.perf_counter()
            infos["final_info"] = {
                "episode": {
                    "r": np.where(ended, self._return, 0.0),
                    "l": np.where(ended, self._length, 0),
                    "t": np.where(ended, np.round(now - self._start, 6), 0.0),
                },
                "_episode": ended.copy(),
            }
            infos["_final_info"] = ended.copy()
            self._return[ended] = 0
            self._length[ended] = 0
            self._start[ended] = now
        return obs, np.sign(raw_reward).astype(np.float32), terminated, truncated & ~game_over, infos

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        self.step_async(actions)
        return self.step_wait()

    # implemented by the pools
    def _pool_reset(self, seed: int | None) -> tuple[np.ndarray, dict]:
        raise NotImplementedError

    def _pool_send(self, actions: np.ndarray) -> None:
        raise NotImplementedError

    def _pool_recv(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(obs, raw reward float64, game over, truncated, lives) of all envs, in env order."""
        raise NotImplementedError

    def _reset_ended(self, obs: np.ndarray, lives: np.ndarray, ended: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Make ``obs`` and ``lives`` of the ended envs those of their new game (a no-op for SAME_STEP pools)."""
        return obs, lives


def _pad_stack(obs: np.ndarray, frames: np.ndarray) -> None:
    """In place: in the stack of an env with ``frames[i] < 4`` frames of its game so far, fill the older slots with
    copies of the game's first frame (FrameStackObservation's padding; the native pools pad with zeros)."""
    stack = obs.shape[1]
    for n in range(1, stack):  # n = frames of the new game in the stack
        envs = frames == n
        if envs.any():
            obs[envs, : stack - n] = obs[envs, stack - n : stack - n + 1]


class AleVectorEnv(NativeAtariVectorEnv):
    """ale-py's ``AtariVectorEnv`` (C++ threads, SAME_STEP autoreset built in)."""

    def __init__(self, env_id: str, num_envs: int, num_threads: int = 0, noop_max: int = 30):
        from ale_py.vector_env import AtariVectorEnv

        spec = gym.registry[env_id].kwargs
        self.pool = AtariVectorEnv(
            ale_game(env_id),
            num_envs,
            num_threads=num_threads,
            autoreset_mode=SAME_STEP,
            frameskip=FRAME_SKIP,
            noop_max=noop_max,
            repeat_action_probability=spec.get("repeat_action_probability", 0.0),
            full_action_space=spec.get("full_action_space", False),
            max_num_frames_per_episode=MAX_EPISODE_FRAMES,
            episodic_life=False,  # would reset the whole game on each lost life; the adapter does EpisodicLife
            life_loss_info=False,  # terminated = game over only, so the adapter can tell a lost life from game over
            reward_clipping=False,  # the raw rewards are summed into the episode return, then clipped
            use_fire_reset=True,
        )
        super().__init__(num_envs, self.pool.single_action_space.n)

    def _pool_reset(self, seed: int | None) -> tuple[np.ndarray, dict]:
        return self.pool.reset(seed=seed)

    def _pool_send(self, actions: np.ndarray) -> None:
        self.pool.send(actions)

    def _pool_recv(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        obs, reward, terminated, truncated, info = self.pool.recv()
        return obs, reward.astype(np.float64), terminated, truncated, info["lives"]

    def close_extras(self, **kwargs: Any) -> None:
        self.pool.close()


def envpool_task(env_id: str) -> str:
    """EnvPool's task id (``Breakout-v5``) for a registered ALE id."""
    import envpool

    game = ale_game(env_id)
    task = "".join(part.capitalize() for part in game.split("_")) + "-v5"
    known = {t.lower(): t for t in envpool.list_all_envs()}
    if task.lower() not in known:
        fail(f"EnvPool has no Atari task for {env_id!r} (looked for {task}); use --vector-env ale")
    return known[task.lower()]


class EnvPoolVectorEnv(NativeAtariVectorEnv):
    """EnvPool's Atari pool. It resets an ended env on the *next* step (ignoring that action); the adapter resets
    the ended envs at once instead (a partial ``reset``), which gives SAME_STEP semantics."""

    def __init__(self, env_id: str, num_envs: int, num_threads: int = 0, noop_max: int = 30, seed: int = 0):
        import envpool

        spec = gym.registry[env_id].kwargs
        self.pool = envpool.make(
            envpool_task(env_id),
            env_type="gymnasium",
            num_envs=num_envs,
            num_threads=num_threads,
            seed=seed,
            noop_max=max(noop_max, 1),  # EnvPool draws from [0, noop_max): 1 means no no-ops
            repeat_action_probability=spec.get("repeat_action_probability", 0.0),
            full_action_space=spec.get("full_action_space", False),
            max_episode_steps=MAX_EPISODE_FRAMES // FRAME_SKIP,
            episodic_life=False,
            reward_clip=False,
            use_fire_reset=True,
            stack_num=4,
            img_height=84,
            img_width=84,
            gray_scale=True,
            use_inter_area_resize=True,
        )
        super().__init__(num_envs, self.pool.single_action_space.n)
        self._ids = np.arange(num_envs, dtype=np.int32)

    def _pool_reset(self, seed: int | None) -> tuple[np.ndarray, dict]:
        return self.pool.reset()  # EnvPool is seeded at construction (``seed``), not by reset

    def _pool_send(self, actions: np.ndarray) -> None:
        self.pool.send(actions, self._ids)

    def _pool_recv(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        obs, reward, terminated, truncated, info = self.pool.recv()
        order = np.argsort(info["env_id"])
        return (
            obs[order],
            reward[order].astype(np.float64),
            terminated[order],
            truncated[order],
            info["lives"][order],
        )

    def _reset_ended(self, obs: np.ndarray, lives: np.ndarray, ended: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ids = self._ids[ended]
        new_obs, info = self.pool.reset(ids)
        order = np.argsort(info["env_id"])
        obs = obs.copy()
        lives = lives.copy()
        obs[ids] = new_obs[order]
        lives[ids] = info["lives"][order]
        return obs, lives

    def close_extras(self, **kwargs: Any) -> None:
        self.pool.close()


def envpool_available() -> bool:
    try:
        import envpool  # noqa: F401
    except ImportError:  # the optional extra is not installed
        return False
    return True


def make_atari_vector_env(
    backend: str,
    env_id: str,
    num_envs: int,
    *,
    env_threads: int = 0,
    seed: int = 0,
    capture_video: bool = False,
    run_name: str = "",
    noop_max: int = 30,
) -> gym.vector.VectorEnv:
    """``num_envs`` preprocessed Atari envs behind the backend ``backend`` (see the module docstring).

    ``env_threads`` is the number of C++ stepping threads of the native pools (0: one per core); ``seed`` is used
    by EnvPool, which is seeded at construction (the others are seeded by ``reset(seed=...)``).
    """
    check_backend(backend, num_envs, capture_video=capture_video)
    if backend in ("sync", "async"):
        env_fns = [make_env(env_id, i, capture_video, run_name, noop_max) for i in range(num_envs)]
        if backend == "async":
            return gym.vector.AsyncVectorEnv(env_fns, shared_memory=True, autoreset_mode=SAME_STEP)
        return SyncVectorEnv(env_fns, autoreset_mode=SAME_STEP)
    if backend == "ale":
        return AleVectorEnv(env_id, num_envs, num_threads=env_threads, noop_max=noop_max)
    return EnvPoolVectorEnv(env_id, num_envs, num_threads=env_threads, noop_max=noop_max, seed=seed)


def check_backend(backend: str, num_envs: int, overlap: bool = False, capture_video: bool = False) -> None:
    """One-line errors for backend options that can't work together (call before building anything)."""
    if backend not in BACKENDS:
        fail(f"unknown vector env backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "envpool" and not envpool_available():
        fail("--vector-env envpool needs EnvPool: pip install -e '.[envpool]'")
    if capture_video and backend not in ("sync", "async"):
        fail(f"--capture-video needs the Python wrappers: use --vector-env sync or async, not {backend}")
    if overlap and backend == "sync":
        fail("--overlap needs a backend that steps in the background: --vector-env async, ale or envpool")
    if overlap and num_envs % 2 != 0:
        fail(f"--overlap splits the envs into 2 groups: --num-envs {num_envs} must be divisible by 2")


def split_groups(backend: str, env_id: str, num_envs: int, **kwargs: Any) -> list[gym.vector.VectorEnv]:
    """Two vector envs of ``num_envs // 2`` envs each, for overlapped sampling (the second seeded after the first)."""
    check_backend(backend, num_envs, overlap=True)
    size = num_envs // 2
    seed = kwargs.pop("seed", 0)
    return [make_atari_vector_env(backend, env_id, size, seed=seed + g * size, **kwargs) for g in range(2)]
