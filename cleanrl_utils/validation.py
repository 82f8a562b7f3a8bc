"""Every check of user input, in one place: each failure is one line on stderr (`error: ...`) and exit status 1,
through `fail`, which raises `SystemExit` with the message (Python prints it without a traceback). gymnasium is
imported only by the checks that need it, so the runner and the plots load fast.
"""

from __future__ import annotations

import difflib
import os
from typing import TYPE_CHECKING, Annotated, NoReturn

import tyro

if TYPE_CHECKING:
    import gymnasium as gym

QUIET_ERRORS = False
"""set on the ranks of a distributed job that leave the errors every rank finds alike to another rank (distributed.py)"""


def fail(message: str) -> NoReturn:
    """Stop the program with a one-line error (no traceback, exit status 1); quietly where QUIET_ERRORS is set."""
    raise SystemExit(1 if QUIET_ERRORS else f"error: {message}")


def check_positive(**counts: float) -> None:
    """Every named count must be > 0, e.g. ``check_positive(num_envs=8, num_steps=128)``."""
    for name, value in counts.items():
        if value is None or value <= 0:
            fail(f"--{name.replace('_', '-')} must be positive, got {value}")


def check_non_negative(**counts: int) -> None:
    """Every named count must be >= 0 (0 means: chosen automatically, or never)."""
    for name, value in counts.items():
        if value < 0:
            fail(f"--{name.replace('_', '-')} must be >= 0, got {value}")


# The range of every numeric flag of the training scripts: (lowest, highest, whether the lowest itself is allowed).
RANGES: dict[str, tuple[float, float, bool]] = {
    **dict.fromkeys(["num_envs", "local_num_envs", "num_steps", "num_minibatches", "update_epochs",
                     "total_timesteps"], (0, float("inf"), False)),
    **dict.fromkeys(["learning_rate", "clip_coef", "max_grad_norm", "target_kl", "dist_timeout"], (0, float("inf"), False)),
    **dict.fromkeys(["seed", "checkpoint_interval", "env_threads", "torch_threads", "ent_coef", "vf_coef"],
                    (0, float("inf"), True)),
    **dict.fromkeys(["gamma", "gae_lambda"], (0, 1, True)),
}
MAX_THREADS = 256  # far above any machine's cores per process; beyond it a typo (1000 threads take minutes to start)


def check_ranges(args) -> None:
    """Every numeric flag of `args` that `RANGES` knows lies in its range; one line naming the first that does not."""
    for name, (low, high, low_ok) in RANGES.items():
        value = getattr(args, name, None)
        if value is None or isinstance(value, bool):
            continue
        flag = "--" + name.replace("_", "-")
        if high == float("inf") and not low_ok and value <= low:
            fail(f"{flag} must be positive, got {value}")
        if high == float("inf") and low_ok and value < low:
            fail(f"{flag} must be >= 0, got {value}")
        if high != float("inf") and not low <= value <= high:
            fail(f"{flag} must be between {low} and {high}, got {value}")
    for name in ("env_threads", "torch_threads"):
        if getattr(args, name, 0) > MAX_THREADS:
            fail(f"--{name.replace('_', '-')} {getattr(args, name)} is far more threads than any machine's cores "
                 f"(at most {MAX_THREADS}; 0 picks the cores this process may use)")


def check_name(flag: str, name: str) -> None:
    """A run's name (`--run-name`, `--exp-name`) is one folder name inside --runs-dir: no path separator, not `.` or
    `..`, not empty."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or name != name.strip():
        fail(f"{flag} {name!r} is not a folder name: a run is one folder inside --runs-dir, so give a name without "
             "'/', '\\' or surrounding spaces, and not '.' or '..'")


def check_extras(capture_video: bool = False, track: bool = False) -> None:
    """The optional packages the chosen options need (moviepy writes videos, wandb tracks) must be installed."""
    for wanted, module, flag, extra in (
        (capture_video, "moviepy", "--capture-video", "video"),
        (track, "wandb", "--track", "track"),
    ):
        if wanted:
            try:
                __import__(module)
            except ImportError:
                fail(f"{flag} needs {module}: pip install -e '.[{extra}]'")


def whole_number(text: str) -> int:
    """A count as users type it: ``10000000``, ``10_000_000`` or ``1e7`` (a whole number; ``1.5`` is an error)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        fail(f"{text!r} is not a number; give a whole number such as 10000000 or 1e7")
    if not value.is_integer():
        fail(f"{text!r} is not a whole number; give a count such as 10000000 or 1e7")
    return int(value)


# an int field of `Args` that also takes 1e7 (tyro calls `whole_number` with the text the user typed)
Count = Annotated[
    int,
    tyro.constructors.PrimitiveConstructorSpec(
        nargs=1,
        metavar="INT",
        instance_from_str=lambda args: whole_number(args[0]),
        is_instance=lambda value: isinstance(value, int),
        str_from_instance=lambda value: [str(value)],
    ),
]


def make_dir(path: str, what: str) -> None:
    """Create an output folder or stop with a one-line error naming the flag it came from."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        reason = "a file is in the way" if isinstance(exc, FileExistsError) else exc.strerror
        fail(f"cannot create {what} {path!r} ({reason})")


def check_env_id(env_id: str) -> None:
    """The env id must be registered in gymnasium; suggest close matches when it is not."""
    import ale_py  # registers the Atari ids, so that they are known (and suggested) everywhere
    import gymnasium as gym

    gym.register_envs(ale_py)
    if env_id in gym.registry:
        return
    matches = difflib.get_close_matches(env_id, list(gym.registry.keys()), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(matches)}?" if matches else "; see `gymnasium.pprint_registry()` for ids"
    fail(f"unknown environment id {env_id!r}{hint}")


def is_atari(env_id: str) -> bool:
    """Whether a registered env id is an ALE (Atari) game."""
    import gymnasium as gym

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


def check_discrete_actions(action_space: "gym.Space", env_id: str) -> None:
    """PPO here uses a categorical policy: the action space must be Discrete."""
    import gymnasium as gym

    if not isinstance(action_space, gym.spaces.Discrete):
        fail(
            f"{env_id!r} has a {type(action_space).__name__} action space; this script supports only Discrete "
            "actions (for continuous control use a Gaussian-policy PPO such as CleanRL's ppo_continuous_action.py)"
        )


def make_probe_env(env_id: str, **kwargs) -> "gym.Env":
    """One instance of the env, to check its spaces; a missing optional package is a one-line error."""
    import gymnasium as gym

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
    import gymnasium as gym

    env = make_probe_env(env_id, render_mode="rgb_array")
    try:
        env.reset(seed=0)
        env.render()
    except gym.error.DependencyNotInstalled as exc:
        reason = " ".join(str(exc).split())
        fail(f"--capture-video: {env_id!r} cannot draw frames ({reason}); pip install -e '.[video]'")
    finally:
        env.close()


def check_box_observations(observation_space: "gym.Space", env_id: str) -> None:
    """An MLP policy reads a flat vector: the observation space must be a Box."""
    import gymnasium as gym

    if not isinstance(observation_space, gym.spaces.Box):
        fail(
            f"{env_id!r} has a {type(observation_space).__name__} observation space; this script needs Box "
            "(vector) observations"
        )
