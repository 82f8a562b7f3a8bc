"""Vector Atari envs for the PPO scripts: four backends (``--vector-env``) with one contract (docs/notes.md), and a
run's games in its checkpoint (the Python wrappers keep them)."""

import functools
import importlib.util
import time
from collections import deque
from typing import Any, Literal, get_args

import gymnasium as gym
import numpy as np
import torch
from torch.utils._pytree import tree_map_only

from cleanrl_utils.atari_wrappers import FIRE_ACTION, MAX_FRAMES, NOOP_ACTION, make_atari_env, needs_fire_reset
from cleanrl_utils.validation import fail

VectorEnvBackend = Literal["sync", "async", "ale", "envpool"]
BACKENDS: tuple[str, ...] = get_args(VectorEnvBackend)
SAME_STEP = gym.vector.AutoresetMode.SAME_STEP
FRAME_SKIP = 4
MAX_STEPS = MAX_FRAMES // FRAME_SKIP
MAX_SERVE_ROUNDS = 4  # games that end during their own serve, in a row (never seen more than 1)


def game_options(env_id: str) -> dict[str, Any]:
    """The registered id's sticky actions and action set, for a pool."""
    spec = gym.registry[env_id].kwargs
    return {k: spec.get(k, v) for k, v in (("repeat_action_probability", 0.0), ("full_action_space", False))}


def ale_game(env_id: str) -> str:
    """The ROM name (``breakout``) of a registered ALE id (``BreakoutNoFrameskip-v4``, ``ALE/Breakout-v5``)."""
    import ale_py

    gym.register_envs(ale_py)
    return gym.registry[env_id].kwargs["game"]


class NativeAtariVectorEnv(gym.vector.VectorEnv):
    """A C++ Atari pool with the chain's episode logic (docs/notes.md). For the envs ``ids``, in their order:
    ``_pool_reset(ids, seed)`` (env i seeded ``seed + i``) -> obs, lives, frames; ``_pool_send(ids, actions)``;
    ``_pool_recv(ids)`` -> obs (uint8, stacked), raw points, game over, truncated, lives, emulator frames of the game."""

    metadata = {"autoreset_mode": SAME_STEP}

    def __init__(self, env_id: str, num_envs: int, num_actions: int):
        self.num_envs = num_envs
        self.single_observation_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
        self.single_action_space = gym.spaces.Discrete(num_actions)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        with gym.make(env_id) as probe:
            self.fire = needs_fire_reset(probe)  # whether the game is served with FIRE (then action 2)
        self._all = np.arange(num_envs)
        self._lives = np.zeros(num_envs, dtype=np.int64)
        self._return = np.zeros(num_envs, dtype=np.float64)
        self._frames = np.zeros(num_envs, dtype=np.int64)  # emulator frames of the current game
        self._start = np.full(num_envs, time.perf_counter())
        self._stacked = np.zeros(num_envs, dtype=np.int64)  # frames since the stack restarted (up to 4)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        obs, lives, self._frames[:] = self._pool_reset(self._all, seed)
        self._return[:] = 0
        self._start[:] = time.perf_counter()
        everyone = np.ones(self.num_envs, dtype=bool)
        self._serve(obs, lives, new_game=everyone, life_lost=~everyone, stats=self._no_games())
        return self._observe(obs, lives, restart=everyone)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        self._pool_send(self._all, np.asarray(actions, dtype=np.int32))
        obs, reward, game_over, truncated, lives, self._frames[:] = self._pool_recv(self._all)
        self._return += reward
        truncated = truncated & ~game_over
        ended = game_over | truncated
        life_lost = (lives > 0) & (lives < self._lives) & ~ended  # EpisodicLifeEnv's rule
        stats = self._no_games()
        restart = ended | life_lost
        if restart.any():  # most steps: nobody to serve
            obs, lives = obs.copy(), lives.copy()
            self._new_games(ended, obs, lives, stats)
            self._serve(obs, lives, new_game=ended, life_lost=life_lost, stats=stats)
        obs, infos = self._observe(obs, lives, restart)
        if stats["_episode"].any():
            infos["final_info"] = stats
            infos["_final_info"] = stats["_episode"].copy()
        return obs, np.sign(reward).astype(np.float32), game_over | life_lost, truncated, infos

    def _observe(self, obs: np.ndarray, lives: np.ndarray, restart: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        """``obs`` and its info; a stack of under 4 frames of its game is padded with its first frame, not zeros."""
        self._lives[:] = lives
        self._stacked = np.where(restart, 1, np.minimum(self._stacked + 1, 4))
        for n in range(1, 4):  # n = frames of the new game in the stack
            envs = self._stacked == n
            if envs.any():
                obs[envs, : 4 - n] = obs[envs, 4 - n : 5 - n]
        return obs, {"lives": self._lives.copy(), "episode_frame_number": self._frames.copy()}

    def _no_games(self) -> dict[str, Any]:
        """Statistics of no game yet, in the layout of ``final_info``."""
        n = self.num_envs
        episode = {"r": np.zeros(n), "l": np.zeros(n, dtype=np.int64), "t": np.zeros(n)}
        return {"episode": episode, "_episode": np.zeros(n, dtype=bool)}

    def _new_games(self, over: np.ndarray, obs: np.ndarray, lives: np.ndarray, stats: dict[str, Any]) -> None:
        """The games ``over`` end (their statistics into ``stats``) and new ones start (into ``obs``, ``lives``)."""
        if not over.any():
            return
        now = time.perf_counter()
        stats["episode"]["r"][over] = self._return[over]
        stats["episode"]["l"][over] = self._frames[over]
        stats["episode"]["t"][over] = np.round(now - self._start[over], 6)
        stats["_episode"] |= over
        self._return[over] = 0
        self._start[over] = now
        obs[over], lives[over], self._frames[over] = self._pool_reset(np.flatnonzero(over), None)

    def _serve(self, obs: np.ndarray, lives: np.ndarray, new_game, life_lost, stats: dict[str, Any]) -> None:
        """The serve of the envs ``new_game`` and ``life_lost`` into ``obs``, ``lives`` (points count in the game only)."""
        noop, serve = life_lost, new_game | life_lost
        for _ in range(MAX_SERVE_ROUNDS):
            over = np.zeros(self.num_envs, dtype=bool)
            plan = [(noop, NOOP_ACTION)] + ([(serve, FIRE_ACTION), (serve, 2)] if self.fire else [])
            for mask, action in plan:
                ids = np.flatnonzero(mask & ~over)
                if len(ids) == 0:
                    continue
                self._pool_send(ids, np.full(len(ids), action, dtype=np.int32))
                obs[ids], reward, game_over, truncated, lives[ids], self._frames[ids] = self._pool_recv(ids)
                self._return[ids] += reward
                over[ids[game_over | truncated]] = True
            if not over.any():
                return
            self._new_games(over, obs, lives, stats)
            noop, serve = np.zeros_like(over), over


class AleVectorEnv(NativeAtariVectorEnv):
    """ale-py's ``AtariVectorEnv``, one 1-env pool (and C++ thread) per env: a serve steps one env alone. It draws 0 to
    ``noop_max - 1`` no-op frames at a game's start, one fewer than the chain and EnvPool (no option shifts that)."""

    def __init__(self, env_id: str, num_envs: int, noop_max: int = 30):
        from ale_py.vector_env import AtariVectorEnv

        # the emulator alone: episodes, serves and clipping are the adapter's (it resets an ended game at once)
        options = dict(episodic_life=False, life_loss_info=False, reward_clipping=False, use_fire_reset=False)
        options.update(frameskip=FRAME_SKIP, max_num_frames_per_episode=MAX_FRAMES, **game_options(env_id))
        make = functools.partial(AtariVectorEnv, ale_game(env_id), 1, num_threads=1, noop_max=noop_max, **options)
        self.pools = [make(autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP) for _ in range(num_envs)]
        super().__init__(env_id, num_envs, self.pools[0].single_action_space.n)

    @staticmethod
    def _gather(results: list[tuple]) -> list[np.ndarray]:
        """The 1-env pools' results (a reset's or a step's) as one batch, the info as its lives and frame counts."""
        *arrays, infos = zip(*results)
        lives, frames = ([info[key] for info in infos] for key in ("lives", "episode_frame_number"))
        return [np.concatenate(a) for a in (*arrays, lives, frames)]

    def _pool_reset(self, ids: np.ndarray, seed: int | None) -> list[np.ndarray]:
        return self._gather([self.pools[i].reset(seed=None if seed is None else seed + i) for i in ids.tolist()])

    def _pool_send(self, ids: np.ndarray, actions: np.ndarray) -> None:
        for k, i in enumerate(ids):
            self.pools[i].send(actions[k : k + 1])

    def _pool_recv(self, ids: np.ndarray) -> list[np.ndarray]:
        return self._gather([self.pools[i].recv() for i in ids])

    def close_extras(self, **kwargs: Any) -> None:
        for pool in self.pools:
            pool.close()


class EnvPoolVectorEnv(NativeAtariVectorEnv):
    """EnvPool's Atari pool, ended envs reset at once (a partial ``reset``: SAME_STEP). It reports no frame counter:
    a game's length counts 4 frames a step, without the 1-30 no-op frames of its start (<1% of a game)."""

    def __init__(self, env_id: str, num_envs: int, num_threads: int = 0, noop_max: int = 30, seed: int = 0):
        import envpool

        task = "".join(part.capitalize() for part in ale_game(env_id).split("_")) + "-v5"  # Breakout-v5
        known = {t.lower(): t for t in envpool.list_all_envs()}
        if task.lower() not in known:
            fail(f"EnvPool has no Atari task for {env_id!r} (looked for {task}); use --vector-env ale")
        # the emulator alone (the adapter has episodes, serves, clipping), framed as the chain; 1 to noop_max no-ops
        options = dict(episodic_life=False, reward_clip=False, use_fire_reset=False, max_episode_steps=MAX_STEPS)
        options.update(stack_num=4, img_height=84, img_width=84, gray_scale=True, use_inter_area_resize=True)
        options.update(num_envs=num_envs, num_threads=num_threads, noop_max=max(noop_max, 1), **game_options(env_id))
        self._make = functools.partial(envpool.make, task_id=known[task.lower()], env_type="gymnasium", **options)
        self.pool = self._make(seed=seed)  # env i gets seed + i
        self._unused_seed: int | None = seed  # a reset with this seed needs no new pool
        super().__init__(env_id, num_envs, self.pool.single_action_space.n)

    def _pool_reset(self, ids: np.ndarray, seed: int | None) -> tuple[np.ndarray, ...]:
        if seed is not None and seed != self._unused_seed:  # EnvPool takes seeds only when it is built
            self.pool.close()
            self.pool = self._make(seed=seed)
        self._unused_seed = None
        obs, info = self.pool.reset(ids.astype(np.int32))
        order = np.argsort(info["env_id"])
        return obs[order], info["lives"][order], np.zeros(len(ids), dtype=np.int64)

    def _pool_send(self, ids: np.ndarray, actions: np.ndarray) -> None:
        self.pool.send(actions, ids.astype(np.int32))

    def _pool_recv(self, ids: np.ndarray) -> tuple[np.ndarray, ...]:
        obs, reward, game_over, truncated, info = self.pool.recv()
        order = np.argsort(info["env_id"])
        assert (info["env_id"][order] == ids).all()
        lives, frames = info["lives"][order], self._frames[ids] + FRAME_SKIP
        return obs[order], reward[order], game_over[order], truncated[order], lives, frames

    def close_extras(self, **kwargs: Any) -> None:
        self.pool.close()


def envpool_available() -> bool:
    return importlib.util.find_spec("envpool") is not None  # the optional extra


def make_atari_vector_env(
    backend, env_id, num_envs, *, env_threads=0, seed=0, video_folder=None, noop_max=30
) -> gym.vector.VectorEnv:
    """``num_envs`` Atari envs on ``backend``; ``env_threads``: EnvPool's C++ threads (0: one per core; ale-py runs one
    per env); ``seed``: EnvPool's (``reset(seed=...)`` seeds every backend); env 0 records to ``video_folder``, if any."""
    check_backend(backend, capture_video=video_folder is not None)
    if backend == "ale":
        return AleVectorEnv(env_id, num_envs, noop_max=noop_max)
    if backend == "envpool":
        return EnvPoolVectorEnv(env_id, num_envs, num_threads=env_threads, noop_max=noop_max, seed=seed)
    videos = [video_folder] + [None] * (num_envs - 1)  # env 0 records
    # each env's state can be saved and restored (`GameState`: a checkpoint's games)
    env_fns = [lambda v=v: GameState(make_atari_env(env_id, noop_max=noop_max, video_folder=v)) for v in videos]
    if backend == "async":
        return gym.vector.AsyncVectorEnv(env_fns, shared_memory=True, autoreset_mode=SAME_STEP)
    return gym.vector.SyncVectorEnv(env_fns, autoreset_mode=SAME_STEP)


# A run's games in its checkpoint (sync, async): every env's state and the step loop's `next_obs`/`next_done`, all a
# SAME_STEP vector env carries from one step to the next; the C++ pools (ale, envpool) expose none: new games.


def _wrappers(env: gym.Wrapper):
    """The wrappers under `env`, but a video recorder (its frames would fill the checkpoint)."""
    while isinstance(env := env.env, gym.Wrapper):
        yield from [] if isinstance(env, gym.wrappers.RecordVideo) else [env]


def _arrays(w: gym.Wrapper) -> dict[str, np.ndarray]:
    """A wrapper's state, each of its numbers, flags, arrays, lists and deques (of frames, of numbers) as an array."""
    return {k: np.array(v) for k, v in vars(w).items() if isinstance(v, (int, float, np.ndarray, list, deque))}


class GameState(gym.Wrapper):
    """`game`: the env's state (emulator and RNGs, each wrapper's numbers and frames), to get and set; the vector envs
    reach it with `get_attr("game")` and `set_attr("game", games)`."""

    @property
    def game(self) -> list:
        ale = self.unwrapped.ale.cloneState(include_rng=True).serialize()
        return [ale, self.unwrapped.np_random.bit_generator.state, *map(_arrays, _wrappers(self))]

    @game.setter
    def game(self, saved: list) -> None:
        from ale_py import ALEState

        self.unwrapped.ale.restoreState(ALEState(saved[0]))
        self.unwrapped.np_random.bit_generator.state = saved[1]
        for layer, values in zip(_wrappers(self), saved[2:]):
            for key, value in values.items():  # each in its attribute's type (a deque keeps its length)
                maxlen = (now.maxlen,) if isinstance(now := getattr(layer, key), deque) else ()
                setattr(layer, key, value if isinstance(now, np.ndarray) else type(now)(value, *maxlen))


def rank_games(envs, next_obs: torch.Tensor, next_done: np.ndarray) -> dict:
    """This rank's games, `next_obs` and `next_done` for its checkpoint entry (None on a C++ pool)."""
    try:
        games = list(envs.get_attr("game")) if not isinstance(envs, NativeAtariVectorEnv) else None
    except AttributeError:  # envs made another way (a user's, a test's) without `GameState`: none to save
        games = None
    games = games and {"envs": games, "next_obs": next_obs.cpu().numpy(), "next_done": next_done}
    # what torch.load(weights_only=True) reads: tensors, and numbers (one tensor each would slow the write down)
    return {"games": tree_map_only(np.ndarray, lambda a: torch.tensor(a) if a.ndim else a.item(), games)}


def saved_games(ckpt, envs, rank: int = 0):
    """This rank's games in `ckpt` if `envs` can go on with them (Python wrappers, as many envs), else None."""
    ranks = [] if ckpt is None or isinstance(envs, NativeAtariVectorEnv) else ckpt["rng"]
    games = ranks[rank].get("games") if rank < len(ranks) else None
    return games if games and len(games["envs"]) == envs.num_envs else None


def games_line(ckpt: dict, envs) -> str:
    """The resume line's end: whether the games in progress go on (rank 0's say for all: one backend, one size)."""
    new = "new games (the checkpoint has none for these envs; --vector-env sync and async keep them)"
    return "; the games in progress go on" if saved_games(ckpt, envs) else f"; {new}"


def restore_games(envs, ckpt, rank: int, next_obs: torch.Tensor, next_done: np.ndarray):
    """`envs` back in this rank's games of `ckpt` and their `next_obs`, `next_done`; else those given (new games)."""
    if (games := saved_games(ckpt, envs, rank)) is None:
        return next_obs, next_done
    envs.set_attr("game", tree_map_only(torch.Tensor, torch.Tensor.numpy, games["envs"]))  # arrays: fast to workers
    return games["next_obs"].to(next_obs.device), games["next_done"].numpy()


def check_backend(backend: str, capture_video: bool = False) -> None:
    """One-line errors for backend options that can't work together (call before building anything)."""
    if backend not in BACKENDS:
        fail(f"unknown vector env backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "envpool" and not envpool_available():
        fail("--vector-env envpool needs EnvPool: pip install -e '.[envpool]'")
    if capture_video and backend not in ("sync", "async"):
        fail(f"--capture-video needs the Python wrappers: use --vector-env sync or async, not {backend}")
