"""Checks of user input: each failure is one `error: ...` line and exit status 1 (gymnasium is imported lazily)."""

import difflib
import functools
import importlib.util
from typing import Annotated, NoReturn

import tyro

QUIET_ERRORS = False  # set on the ranks of a distributed job whose errors another rank reports (distributed.py)


def fail(message: str) -> NoReturn:
    """Stop with a one-line error and exit status 1 (`SystemExit` prints no traceback); quietly if QUIET_ERRORS."""
    raise SystemExit(1 if QUIET_ERRORS else f"error: {message}")


def check_positive(**counts: float) -> None:
    for name, value in counts.items():
        if value is None or value <= 0:
            fail(f"--{name.replace('_', '-')} must be positive, got {value}")


# What each numeric flag of the training scripts must be; the words are those of the error.
RANGES = {
    **dict.fromkeys(["num_envs", "local_num_envs", "num_steps", "num_minibatches", "update_epochs", "total_timesteps",
                     "learning_rate", "clip_coef", "max_grad_norm", "target_kl", "dist_timeout"], "positive"),
    **dict.fromkeys(["seed", "checkpoint_interval", "env_threads", "torch_threads", "ent_coef", "vf_coef"], ">= 0"),
    **dict.fromkeys(["gamma", "gae_lambda"], "between 0 and 1")}
IN_RANGE = {"positive": lambda v: v > 0, ">= 0": lambda v: v >= 0, "between 0 and 1": lambda v: 0 <= v <= 1}
MAX_THREADS = 256  # far above any machine's cores: more is a typo (1000 threads take minutes to start)


def check_ranges(args) -> None:
    """Every numeric flag of `args` that RANGES knows is in its range; one line naming the first that is not."""
    for name, need in RANGES.items():
        value = getattr(args, name, None)
        if value is not None and not isinstance(value, bool) and not IN_RANGE[need](value):
            fail(f"--{name.replace('_', '-')} must be {need}, got {value}")
    for name in ("env_threads", "torch_threads"):
        if getattr(args, name, 0) > MAX_THREADS:
            fail(f"--{name.replace('_', '-')} {getattr(args, name)} is far more threads than any machine's cores "
                 f"(at most {MAX_THREADS}; 0 picks the cores this process may use)")


def thread_counts(env_threads: int, torch_threads: int, cores: int, num_envs: int,
                  notes: bool = True) -> tuple[int, int]:
    """The env and torch threads of a process that may use `cores` cores: 0 picks min(cores, num_envs) and `cores`;
    more is capped at `cores`, with a note if `notes` (not in `check_ranges`: another machine's job has other cores)."""
    for flag, asked in (("--env-threads", env_threads), ("--torch-threads", torch_threads)):
        if asked > cores and notes:
            print(f"note: {flag} {asked} is more than the {cores} core{'s' * (cores > 1)} this process may use: using "
                  f"{cores} (more threads than cores only wait for each other)", flush=True)
    return min(env_threads, cores) or min(cores, num_envs), min(torch_threads, cores) or cores


def check_name(flag: str, name: str, why: str = "a run is one folder inside --runs-dir") -> None:
    if not name or name in (".", "..") or "/" in name or "\\" in name or name != name.strip():
        fail(f"{flag} {name!r} is not a folder name: {why}, so give a name without '/', '\\' or surrounding "
             "spaces, and not '.' or '..'")


def check_extras(capture_video: bool = False, track: bool = False, upload_model: bool = False) -> None:
    for wanted, module, flag, extra in ((capture_video, "moviepy", "--capture-video", "video"),
                                        (track, "wandb", "--track", "track"),
                                        (upload_model, "huggingface_hub", "--upload-model", "hub")):
        if wanted and importlib.util.find_spec(module) is None:
            fail(f"{flag} needs {module}: pip install -e '.[{extra}]'")


def whole_number(text: str) -> int:
    try:
        value = float(text)  # also 10_000_000 and 1e7
    except ValueError:
        fail(f"{text!r} is not a number; give a whole number such as 10000000 or 1e7")
    if not value.is_integer():
        fail(f"{text!r} is not a whole number; give a count such as 10000000 or 1e7")
    return int(value)


# an int field of `Args` that also takes 1e7: tyro hands `whole_number` the text the user typed
Count = Annotated[int, tyro.constructors.PrimitiveConstructorSpec(
    nargs=1, metavar="INT", instance_from_str=lambda args: whole_number(args[0]),
    is_instance=lambda value: isinstance(value, int), str_from_instance=lambda value: [str(value)])]


def is_atari(env_id: str) -> bool:
    import gymnasium as gym
    entry_point = gym.registry[env_id].entry_point
    return isinstance(entry_point, str) and entry_point.startswith("ale_py")


def check_env_id(env_id: str, atari: bool | None = None) -> None:
    """The env id must be registered in gymnasium and, if `atari` is given, be an Atari game or not be one."""
    import ale_py  # registers the Atari ids
    import gymnasium as gym
    gym.register_envs(ale_py)
    if env_id not in gym.registry:
        matches = difflib.get_close_matches(env_id, list(gym.registry.keys()), n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(matches)}?" if matches else "see `gymnasium.pprint_registry()` for ids"
        fail(f"unknown environment id {env_id!r}; {hint}")
    if atari is True and not is_atari(env_id):
        fail(f"{env_id!r} is not an Atari game; use an ALE id such as BreakoutNoFrameskip-v4 (or cleanrl/ppo.py)")
    if atari is False and is_atari(env_id):
        fail(f"{env_id!r} is an Atari game; use cleanrl/ppo_atari.py (this script takes ids such as CartPole-v1)")


check_atari_env_id = functools.partial(check_env_id, atari=True)


def check_batch(num_envs: int, num_steps: int, num_minibatches: int, total_timesteps: int) -> None:
    batch_size = num_envs * num_steps
    if batch_size % num_minibatches != 0:
        fail(f"the batch num_envs*num_steps = {num_envs}*{num_steps} = {batch_size} is not divisible by "
             f"--num-minibatches {num_minibatches}; pick a divisor of {batch_size}")
    if total_timesteps < batch_size:
        fail(f"--total-timesteps {total_timesteps} is smaller than one batch (num_envs*num_steps = {batch_size}): "
             "no update would run; raise --total-timesteps or shrink the batch")
