"""Vector Atari envs for the PPO scripts, one contract for every backend.

Backends (``--vector-env``):

- ``sync``: gymnasium ``SyncVectorEnv`` over the Python wrapper chain of ``atari_wrappers.make_atari_env``
  (all envs in the training process, one after the other).
- ``async``: gymnasium ``AsyncVectorEnv`` over the same chain (one process per env, shared memory).
- ``ale``: ale-py's C++ ``AtariVectorEnv`` (preprocessing and stepping in C++ threads), behind ``NativeAtariVectorEnv``.
- ``envpool``: EnvPool's C++ Atari pool (optional extra: ``pip install -e '.[envpool]'``), behind the same adapter.

The contract the scripts rely on, identical for all four (tests/test_vector_envs.py checks it on the emulator):

- observations ``uint8`` of shape ``(num_envs, 4, 84, 84)``; after a reset (a new game or a lost life) the stack
  holds 4 copies of the first frame (gymnasium's ``FrameStackObservation`` padding);
- SAME_STEP autoreset: on the step where a game ends, the env is reset at once and the step returns the *reset*
  observation, so every step is a real transition;
- reward clipped to its sign;
- ``terminated`` is True on a lost life while the game goes on (``EpisodicLifeEnv``: value bootstrapping stops there,
  the emulator is *not* reset), and on game over; a life count that drops to 0 before the game is over is no lost
  life (the game over follows);
- the same game after a reset and after every lost life: a no-op step after a lost life, then, in games with
  FIRE, FIRE and action 2, taken by the env itself (``FireResetEnv``), so a policy that never presses FIRE still
  sees the ball served and loses its games. None of these steps is an agent step: no action enters the rollout
  that the policy did not sample;
- 1 to 30 no-op frames at the start of every game (ale-py's pool: 0 to 29, see ``AleVectorEnv``);
- the statistics of every *full game* (all lives, unclipped rewards, length in emulator frames as CleanRL logs it)
  arrive on the step where it ends in ``infos["final_info"]["episode"]`` (``"r"``, ``"l"``, ``"t"``) with the mask
  ``infos["final_info"]["_episode"]``;
- ``reset(seed=s)`` seeds env i with ``s + i`` on every backend (EnvPool: a new pool, since it takes seeds only
  when it is built);
- ``step_async(actions)`` / ``step_wait()``: a step in two halves, as gymnasium's AsyncVectorEnv has it (``sync``: the
  whole step in ``step_wait``).

The native pools run with none of their own episode logic (no autoreset, FIRE reset, episodic life or reward
clipping): ale-py's ``episodic_life`` resets the whole game on every lost life (lives go 5, 4, 5, 4, ...), EnvPool's
keeps the game going but serves with a random 0-29 no-op frames and one frame of FIRE, and both press FIRE for one
frame at game start only. ``NativeAtariVectorEnv`` does what the Python chain does on top of the emulator itself,
stepping only the envs that need it (a subset step of the pool).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Literal, NamedTuple

import gymnasium as gym
import numpy as np

from cleanrl_utils.atari_wrappers import FIRE_ACTION, NOOP_ACTION, make_atari_env
from cleanrl_utils.validation import fail

VectorEnvBackend = Literal["sync", "async", "ale", "envpool"]
BACKENDS: tuple[str, ...] = ("sync", "async", "ale", "envpool")
SAME_STEP = gym.vector.AutoresetMode.SAME_STEP
MAX_EPISODE_FRAMES = 108_000  # 30 minutes of play; the same cap for every backend
FRAME_SKIP = 4
MAX_SERVE_ROUNDS = 4  # games that end during their own serve, in a row (never seen more than 1)


class PoolStep(NamedTuple):
    """What a pool call returns for the envs it stepped or reset, in their order."""

    obs: np.ndarray  # uint8 (n, 4, 84, 84), the pool's own frame stack
    reward: np.ndarray  # float64 raw points
    game_over: np.ndarray  # bool
    truncated: np.ndarray  # bool, the frame cap
    lives: np.ndarray  # int64
    frames: np.ndarray  # int64, emulator frames of the current game so far


def _merge_stats(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two ``final_info`` dicts of disjoint env masks as one."""
    mask = b["_episode"]
    episode = {k: np.where(mask, b["episode"][k], a["episode"][k]) for k in a["episode"]}
    return {"episode": episode, "_episode": a["_episode"] | mask}


def make_env(env_id: str, idx: int, video_folder: str, noop_max: int = 30) -> Callable[[], gym.Env]:
    """A thunk building one preprocessed Atari env; env 0 records videos to ``video_folder`` if one is given."""

    def thunk() -> gym.Env:
        return make_atari_env(env_id, noop_max=noop_max, video_folder=video_folder if video_folder and idx == 0 else None)

    return thunk


class SyncVectorEnv(gym.vector.SyncVectorEnv):
    """gymnasium's SyncVectorEnv with the ``step_async``/``step_wait`` pair of the other backends."""

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

    The pool runs without autoreset, FIRE reset, episodic life or reward clipping; what the Python chain does on
    top of the emulator happens here, per env: a game over resets the game at once (SAME_STEP), a lost life (lives
    drop and stay above 0) is ``terminated`` while the game goes on, and after both the env *serves by itself*
    (``_restart``: a no-op after a lost life, then FIRE and action 2 in games with FIRE) before the frame stack
    restarts on the last frame. Subclasses implement the pool calls ``_pool_reset``, ``_pool_reset_ids``,
    ``_pool_send``, ``_pool_recv`` and ``_pool_step_ids``.
    """

    metadata = {"autoreset_mode": SAME_STEP}

    def __init__(self, num_envs: int, num_actions: int, fire: bool):
        self.num_envs = num_envs
        self.single_observation_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
        self.single_action_space = gym.spaces.Discrete(num_actions)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.metadata = {"autoreset_mode": SAME_STEP}
        self.fire = fire  # FIRE is action 1 and action 2 exists, as FireResetEnv asserts
        self._lives = np.zeros(num_envs, dtype=np.int64)
        self._return = np.zeros(num_envs, dtype=np.float64)
        self._frames = np.zeros(num_envs, dtype=np.int64)  # emulator frames of the current game
        self._start = np.full(num_envs, time.perf_counter())
        self._stacked = np.zeros(num_envs, dtype=np.int64)  # frames since the stack restarted (up to 4)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        step = self._pool_reset(seed)
        self._return[:] = 0
        self._frames[:] = step.frames
        self._start[:] = time.perf_counter()
        everyone = np.ones(self.num_envs, dtype=bool)
        obs, _ = self._restart(step.obs, step.lives, new_game=everyone, life_lost=~everyone)
        _pad_stack(obs, self._stacked)
        return obs, {"lives": self._lives.copy(), "episode_frame_number": self._frames.copy()}

    def step_async(self, actions: np.ndarray) -> None:
        self._pool_send(np.asarray(actions, dtype=np.int32))

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        step = self._pool_recv()
        self._return += step.reward
        self._frames[:] = step.frames
        game_over, truncated = step.game_over, step.truncated & ~step.game_over
        ended = game_over | truncated
        life_lost = (step.lives > 0) & (step.lives < self._lives) & ~ended  # EpisodicLifeEnv's rule
        infos: dict[str, Any] = {}
        ended_stats = self._end_games(ended) if ended.any() else None
        obs, lives = step.obs, step.lives
        if ended.any():
            obs, lives = obs.copy(), lives.copy()
            reset = self._pool_reset_ids(np.flatnonzero(ended))
            obs[ended], lives[ended], self._frames[ended] = reset.obs, reset.lives, reset.frames
        if ended.any() or life_lost.any():  # most steps: nobody to serve
            obs, late = self._restart(obs, lives, new_game=ended, life_lost=life_lost)
            if late is not None:  # a game that ended during the serve: reported with the others
                ended_stats = late if ended_stats is None else _merge_stats(ended_stats, late)
        else:
            self._lives[:] = lives
        self._stacked = np.where(ended | life_lost, self._stacked, np.minimum(self._stacked + 1, 4))
        _pad_stack(obs, self._stacked)
        infos["lives"] = self._lives.copy()
        infos["episode_frame_number"] = self._frames.copy()
        if ended_stats is not None:
            infos["final_info"] = ended_stats
            infos["_final_info"] = ended_stats["_episode"].copy()
        return obs, np.sign(step.reward).astype(np.float32), game_over | life_lost, truncated, infos

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        self.step_async(actions)
        return self.step_wait()

    def _end_games(self, ended: np.ndarray) -> dict[str, Any]:
        """The statistics of the games that ``ended`` (final_info layout), and their counters zeroed."""
        now = time.perf_counter()
        stats = {
            "episode": {
                "r": np.where(ended, self._return, 0.0),
                "l": np.where(ended, self._frames, 0),
                "t": np.where(ended, np.round(now - self._start, 6), 0.0),
            },
            "_episode": ended.copy(),
        }
        self._return[ended] = 0
        self._start[ended] = now
        return stats

    def _restart(self, obs, lives, new_game, life_lost):
        """The Python chain's reset steps, for the envs of a new game or a lost life: a no-op step after a lost life
        (EpisodicLifeEnv), FIRE then action 2 in games with FIRE (FireResetEnv), then the frame stack restarts on
        the last frame. The pool steps only these envs; their points count in the game's return (not in the
        learning reward), their frames in its length. A game that ends during these steps (rare: the serve itself
        loses the last life, or the frame cap) is reset and served again; its statistics are returned.
        Returns the observations and the statistics of such games (or None)."""
        plan = [(life_lost, NOOP_ACTION)] if life_lost.any() else []
        if self.fire:
            restarting = new_game | life_lost
            plan += [(restarting, FIRE_ACTION), (restarting, 2)]
        late = None
        for _ in range(MAX_SERVE_ROUNDS):
            redo = np.zeros(self.num_envs, dtype=bool)
            for mask, action in plan:
                mask = mask & ~redo
                if not mask.any():
                    continue
                ids = np.flatnonzero(mask)
                step = self._pool_step_ids(ids, np.full(len(ids), action, dtype=np.int32))
                self._return[ids] += step.reward
                self._frames[ids] = step.frames
                obs[ids], lives[ids] = step.obs, step.lives
                over = step.game_over | step.truncated
                if over.any():
                    redo[ids[over]] = True
            if not redo.any():
                break
            stats = self._end_games(redo)
            late = stats if late is None else _merge_stats(late, stats)
            reset = self._pool_reset_ids(np.flatnonzero(redo))
            obs[redo], lives[redo], self._frames[redo] = reset.obs, reset.lives, reset.frames
            plan = [(redo, FIRE_ACTION), (redo, 2)] if self.fire else []
        restarted = new_game | life_lost
        self._stacked[restarted] = 1
        self._lives[:] = lives
        return obs, late

    # implemented by the pools
    def _pool_reset(self, seed: int | None) -> PoolStep:
        """Start a new game in every env (the pool's 1-30 no-ops included); env i seeded with ``seed + i``."""
        raise NotImplementedError

    def _pool_reset_ids(self, ids: np.ndarray) -> PoolStep:
        """Start a new game in the envs ``ids`` (unseeded: their random streams go on)."""
        raise NotImplementedError

    def _pool_send(self, actions: np.ndarray) -> None:
        raise NotImplementedError

    def _pool_recv(self) -> PoolStep:
        """The outcome of the actions sent to all envs, in env order."""
        raise NotImplementedError

    def _pool_step_ids(self, ids: np.ndarray, actions: np.ndarray) -> PoolStep:
        """Step only the envs ``ids`` (the others wait); results in the order of ``ids``."""
        raise NotImplementedError


def _pad_stack(obs: np.ndarray, frames: np.ndarray) -> None:
    """In place: in the stack of an env with ``frames[i] < 4`` frames of its game so far, fill the older slots with
    copies of the game's first frame (FrameStackObservation's padding; the native pools pad with zeros)."""
    stack = obs.shape[1]
    for n in range(1, stack):  # n = frames of the new game in the stack
        envs = frames == n
        if envs.any():
            obs[envs, : stack - n] = obs[envs, stack - n : stack - n + 1]


class AleVectorEnv(NativeAtariVectorEnv):
    """ale-py's ``AtariVectorEnv`` as one 1-env pool per env. An ale-py pool steps all of its envs or none, and the
    serve after a lost life must step one env alone; every pool has its own C++ thread, and all are sent their
    actions before any is waited for, so the envs still step in parallel (docs/throughput.md has the cost).

    ale-py draws 0 to ``noop_max - 1`` no-op frames at the start of a game, one frame fewer than the Python chain
    and EnvPool (1 to ``noop_max``); none of its options shifts that.
    """

    def __init__(self, env_id: str, num_envs: int, noop_max: int = 30):
        from ale_py.vector_env import AtariVectorEnv

        spec = gym.registry[env_id].kwargs
        self.pools = [
            AtariVectorEnv(
                ale_game(env_id),
                1,
                num_threads=1,
                autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,  # the adapter resets, at once
                frameskip=FRAME_SKIP,
                noop_max=noop_max,
                repeat_action_probability=spec.get("repeat_action_probability", 0.0),
                full_action_space=spec.get("full_action_space", False),
                max_num_frames_per_episode=MAX_EPISODE_FRAMES,
                episodic_life=False,
                life_loss_info=False,
                reward_clipping=False,
                use_fire_reset=False,
            )
            for _ in range(num_envs)
        ]
        super().__init__(num_envs, self.pools[0].single_action_space.n, has_fire(env_id))

    @staticmethod
    def _gather(results: list[tuple]) -> PoolStep:
        obs = np.concatenate([r[0] for r in results])
        info = [r[-1] for r in results]
        if len(results[0]) == 2:  # reset: (obs, info)
            zero = np.zeros(len(results))
            return PoolStep(obs, zero, zero.astype(bool), zero.astype(bool),
                            np.concatenate([i["lives"] for i in info]).astype(np.int64),
                            np.concatenate([i["episode_frame_number"] for i in info]).astype(np.int64))
        return PoolStep(
            obs,
            np.concatenate([r[1] for r in results]).astype(np.float64),
            np.concatenate([r[2] for r in results]),
            np.concatenate([r[3] for r in results]),
            np.concatenate([i["lives"] for i in info]).astype(np.int64),
            np.concatenate([i["episode_frame_number"] for i in info]).astype(np.int64),
        )

    def _pool_reset(self, seed: int | None) -> PoolStep:
        return self._gather([p.reset(seed=None if seed is None else seed + i) for i, p in enumerate(self.pools)])

    def _pool_reset_ids(self, ids: np.ndarray) -> PoolStep:
        return self._gather([self.pools[i].reset() for i in ids])

    def _pool_send(self, actions: np.ndarray) -> None:
        for i, pool in enumerate(self.pools):
            pool.send(actions[i : i + 1])

    def _pool_recv(self) -> PoolStep:
        return self._gather([pool.recv() for pool in self.pools])

    def _pool_step_ids(self, ids: np.ndarray, actions: np.ndarray) -> PoolStep:
        for i, action in zip(ids, actions):
            self.pools[i].send(np.array([action], dtype=np.int32))
        return self._gather([self.pools[i].recv() for i in ids])

    def close_extras(self, **kwargs: Any) -> None:
        for pool in self.pools:
            pool.close()


def has_fire(env_id: str) -> bool:
    """Whether the game's action set has FIRE, as action 1 with at least 3 actions (FireResetEnv's condition)."""
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make(env_id)
    try:
        meanings = env.unwrapped.get_action_meanings()  # type: ignore[attr-defined]
    finally:
        env.close()
    if "FIRE" not in meanings:
        return False
    assert meanings[FIRE_ACTION] == "FIRE" and len(meanings) >= 3, meanings
    return True


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
    """EnvPool's Atari pool. It would reset an ended env on the *next* step (ignoring that action); the adapter resets
    the ended envs at once instead (a partial ``reset``), which gives SAME_STEP semantics. EnvPool reports no frame
    counter: game lengths count 4 frames per step, without the 1-30 no-op frames of the start (<1% of a game)."""

    def __init__(self, env_id: str, num_envs: int, num_threads: int = 0, noop_max: int = 30, seed: int = 0):
        task_id = envpool_task(env_id)  # first: registers the ALE ids that the next line reads
        spec = gym.registry[env_id].kwargs
        self._make_kwargs = dict(
            task_id=task_id,
            env_type="gymnasium",
            num_envs=num_envs,
            num_threads=num_threads,
            noop_max=max(noop_max, 1),  # EnvPool draws 1 to noop_max no-op frames (without its FIRE reset)
            repeat_action_probability=spec.get("repeat_action_probability", 0.0),
            full_action_space=spec.get("full_action_space", False),
            max_episode_steps=MAX_EPISODE_FRAMES // FRAME_SKIP,
            episodic_life=False,
            reward_clip=False,
            use_fire_reset=False,
            stack_num=4,
            img_height=84,
            img_width=84,
            gray_scale=True,
            use_inter_area_resize=True,
        )
        self.pool = self._make_pool(seed)
        super().__init__(num_envs, self.pool.single_action_space.n, has_fire(env_id))
        self._ids = np.arange(num_envs, dtype=np.int32)
        self._pool_frames = np.zeros(num_envs, dtype=np.int64)

    def _make_pool(self, seed: int) -> Any:
        import envpool

        self._unused_seed: int | None = seed  # a reset with this seed needs no new pool
        return envpool.make(seed=seed, **self._make_kwargs)  # env i gets seed + i

    def _step(self, obs, reward, terminated, truncated, info, ids) -> PoolStep:
        """The pool's results for the envs ``ids`` (sorted), in that order."""
        order = np.argsort(info["env_id"])
        assert (info["env_id"][order] == ids).all()
        self._pool_frames[ids] += FRAME_SKIP
        return PoolStep(obs[order], reward[order].astype(np.float64), terminated[order], truncated[order],
                        info["lives"][order].astype(np.int64), self._pool_frames[ids].copy())

    def _reset(self, obs, info, ids) -> PoolStep:
        order = np.argsort(info["env_id"])
        self._pool_frames[ids] = 0
        zero = np.zeros(len(ids))
        return PoolStep(obs[order], zero, zero.astype(bool), zero.astype(bool),
                        info["lives"][order].astype(np.int64), self._pool_frames[ids].copy())

    def _pool_reset(self, seed: int | None) -> PoolStep:
        if seed is not None and seed != self._unused_seed:  # EnvPool takes seeds only when it is built
            self.pool.close()
            self.pool = self._make_pool(seed)
        self._unused_seed = None
        return self._reset(*self.pool.reset(), self._ids)

    def _pool_reset_ids(self, ids: np.ndarray) -> PoolStep:
        return self._reset(*self.pool.reset(ids.astype(np.int32)), ids)

    def _pool_send(self, actions: np.ndarray) -> None:
        self.pool.send(actions, self._ids)

    def _pool_recv(self) -> PoolStep:
        return self._step(*self.pool.recv(), self._ids)

    def _pool_step_ids(self, ids: np.ndarray, actions: np.ndarray) -> PoolStep:
        self.pool.send(actions, ids.astype(np.int32))
        return self._step(*self.pool.recv(), ids)

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
    video_folder: str = "videos",
    noop_max: int = 30,
) -> gym.vector.VectorEnv:
    """``num_envs`` preprocessed Atari envs behind the backend ``backend`` (see the module docstring).

    ``env_threads`` is the number of EnvPool's C++ stepping threads (0: one per core; ale-py runs one per env);
    ``seed`` is the seed EnvPool is built with (``reset(seed=...)`` seeds every backend).
    """
    check_backend(backend, num_envs, capture_video=capture_video)
    if backend in ("sync", "async"):
        env_fns = [make_env(env_id, i, video_folder if capture_video else "", noop_max) for i in range(num_envs)]
        if backend == "async":
            return gym.vector.AsyncVectorEnv(env_fns, shared_memory=True, autoreset_mode=SAME_STEP)
        return SyncVectorEnv(env_fns, autoreset_mode=SAME_STEP)
    if backend == "ale":
        return AleVectorEnv(env_id, num_envs, noop_max=noop_max)  # one C++ thread per env
    return EnvPoolVectorEnv(env_id, num_envs, num_threads=env_threads, noop_max=noop_max, seed=seed)


def check_backend(backend: str, num_envs: int, capture_video: bool = False) -> None:
    """One-line errors for backend options that can't work together (call before building anything)."""
    if backend not in BACKENDS:
        fail(f"unknown vector env backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "envpool" and not envpool_available():
        fail("--vector-env envpool needs EnvPool: pip install -e '.[envpool]'")
    if capture_video and backend not in ("sync", "async"):
        fail(f"--capture-video needs the Python wrappers: use --vector-env sync or async, not {backend}")

