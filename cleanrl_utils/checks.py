"""Checks of user input that need gymnasium (env ids, spaces, video): each failure is one line on stderr and a
non-zero exit, through `fail` (cleanrl_utils/runs.py, which holds the checks without gymnasium).
"""

from __future__ import annotations

import difflib

import gymnasium as gym

from cleanrl_utils.runs import check_positive, fail, prepare_run_dir  # noqa: F401 (also imported from here)


def check_env_id(env_id: str) -> None:
    """The env id must be registered in gymnasium; suggest close matches when it is not."""
    import ale_py  # registers the Atari ids, so that they are known (and suggested) everywhere

    gym.register_envs(ale_py)
    if env_id in gym.registry:
        return
    matches = difflib.get_close_matches(env_id, list(gym.registry.keys()), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(matches)}?" if matches else "; see `gymnasium.pprint_registry()` for ids"
    fail(f"unknown environment id {env_id!r}{hint}")


def is_atari(env_id: str) -> bool:
    """Whether a registered env id is an ALE (Atari) game."""
    entry_point = gym.registry[env_id].entry_point
    return isinstance(entry_point, str) and entry_point.startswith("ale_py")


def check_atari_env_id(env_id: str) -> None:
    """The env id must name an ALE (Atari) game, e.g. ``BreakoutNoFrameskip-v4`` or ``ALE/Breakout-v5``."""
    check_env_id(env_id)
    if not is_atari(env_id):
        fail(f"{env_id!r} is not an Atari game; use an ALE id such as BreakoutNoFrameskip-v4 (or cleanrl/ppo.py)")


def check_not_atari_env_id(env_id: str) -> None:
    """The env id must be registered and not an Atari game (whose pixels the classic-control MLP cannot read)."""
    check_env_id(env_id)
    if is_atari(env_id):
        fail(f"{env_id!r} is an Atari game; use cleanrl/ppo_atari.py (this script takes ids such as CartPole-v1)")


def check_batch(num_envs: int, num_steps: int, num_minibatches: int, total_timesteps: int) -> None:
    """The rollout batch must split into equal minibatches and fit at least once into the run."""
    batch_size = num_envs * num_steps
    if batch_size % num_minibatches != 0:
        fail(
            f"the batch num_envs*num_steps = {num_envs}*{num_steps} = {batch_size} is not divisible by "
            f"--num-minibatches {num_minibatches}; pick a divisor of {batch_size}"
        )
    if total_timesteps < batch_size:
        fail(
            f"--total-timesteps {total_timesteps} is smaller than one batch (num_envs*num_steps = {batch_size}): "
            "no update would run; raise --total-timesteps or shrink the batch"
        )


def check_discrete_actions(action_space: gym.Space, env_id: str) -> None:
    """PPO here uses a categorical policy: the action space must be Discrete."""
    if not isinstance(action_space, gym.spaces.Discrete):
        fail(
            f"{env_id!r} has a {type(action_space).__name__} action space; this script supports only Discrete "
            "actions (for continuous control use a Gaussian-policy PPO such as CleanRL's ppo_continuous_action.py)"
        )


def make_probe_env(env_id: str, **kwargs) -> gym.Env:
    """One instance of the env, to check its spaces; a missing optional package is a one-line error."""
    try:
        return gym.make(env_id, **kwargs)
    except gym.error.DependencyNotInstalled as exc:
        fail(f"{env_id!r} needs a package that is not installed: {' '.join(str(exc).split())}")


def check_can_record_video(env_id: str) -> None:
    """For --capture-video: moviepy writes the files and the env must draw rgb frames (classic control draws them
    with pygame); either one missing is a one-line error naming the extra to install."""
    try:
        import moviepy  # noqa: F401
    except ImportError:
        fail("--capture-video needs moviepy: pip install -e '.[video]'")
    env = make_probe_env(env_id, render_mode="rgb_array")
    try:
        env.reset(seed=0)
        env.render()
    except gym.error.DependencyNotInstalled as exc:
        reason = " ".join(str(exc).split())
        fail(f"--capture-video: {env_id!r} cannot draw frames ({reason}); pip install -e '.[video]'")
    finally:
        env.close()


def check_box_observations(observation_space: gym.Space, env_id: str) -> None:
    """An MLP policy reads a flat vector: the observation space must be a Box."""
    if not isinstance(observation_space, gym.spaces.Box):
        fail(
            f"{env_id!r} has a {type(observation_space).__name__} observation space; this script needs Box "
            "(vector) observations"
        )
