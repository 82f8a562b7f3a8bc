"""Checks of user input, each failure one `error: ...` line and exit status 1; run names and the lock file (torch-free)."""

import difflib
import re
import typing
from typing import Annotated, NoReturn

import tyro

LOCK_FILE = "run.lock"  # in a run's folder: held by the process that runs it (resume.hold_run_folder)


def fail(message: str) -> NoReturn:
    """Stop with a one-line error and exit status 1 (`SystemExit` prints no traceback)."""
    raise SystemExit(f"error: {message}")


def first_sentence(exc: BaseException, most: int = 300) -> str:
    """The first sentence of `exc`'s message (torch's later ones advise on other cases), or its type if none fits."""
    lines = str(exc).strip().splitlines()
    sentence = re.split(r"(?<=[.!?])\s", lines[0].strip(), maxsplit=1)[0].rstrip(".") if lines else ""
    return sentence if 0 < len(sentence) <= most else type(exc).__name__


def computed_fields(args_type: type) -> frozenset[str]:
    """The fields of a script's `Args` that it computes at runtime (`tyro.conf.Suppress`): never command-line flags."""
    hints = typing.get_type_hints(args_type, include_extras=True)
    return frozenset(name for name, hint in hints.items() if tyro.conf._markers.Suppress in typing.get_args(hint)[1:])


def counted(n: int, word: str, plural: str = "") -> str:
    """`1 core`, `2 cores` (`plural`: the word's plural when it is not `word` + s)."""
    return f"{n} {word if n == 1 else plural or word + 's'}"


# What each numeric flag of the training scripts must be; the words are those of the error.
POSITIVE = "num_envs local_num_envs num_steps num_minibatches update_epochs total_timesteps learning_rate clip_coef"
RANGES = {
    **dict.fromkeys([*POSITIVE.split(), "max_grad_norm", "target_kl", "dist_timeout"], "positive"),
    **dict.fromkeys("seed checkpoint_interval env_threads torch_threads ent_coef vf_coef".split(), ">= 0"),
    **dict.fromkeys(["gamma", "gae_lambda"], "between 0 and 1"),
}
IN_RANGE = {"positive": lambda v: v > 0, ">= 0": lambda v: v >= 0, "between 0 and 1": lambda v: 0 <= v <= 1}
MAX_THREADS = 256  # far above any machine's cores: more is a typo (1000 threads take minutes to start)


def check_ranges(args) -> None:
    """Every numeric flag of `args` that RANGES knows is in its range; one line naming the first that is not."""
    for name, need in RANGES.items():
        value = getattr(args, name, None)
        if value is not None and not isinstance(value, bool) and not IN_RANGE[need](value):
            fail(f"--{name.replace('_', '-')} must be {need}, got {value}")
    for name in ("env_threads", "torch_threads"):
        if (value := getattr(args, name, 0)) > MAX_THREADS:
            fail(f"--{name.replace('_', '-')} {value} is far more threads than any machine's cores (max {MAX_THREADS})")


def run_name_stem(env_id: str | None, exp_name: str, seed: int) -> str:
    """`{env_id}__{exp_name}__{seed}` ('/' as '-'): a run's name before its start time; a sweep's run's whole name."""
    return "__".join(str(part) for part in (env_id, exp_name, seed) if part is not None).replace("/", "-")


def check_name(flag: str, name: str, why: str = "a run is one folder inside --runs-dir") -> None:
    if not name or name in (".", "..") or "/" in name or "\\" in name or name != name.strip():
        fail(f"{flag} {name!r} is not a folder name: {why} (no '/', '\\', surrounding spaces, '.' or '..')")


def check_extras(capture_video: bool = False, track: bool = False, upload_model: bool = False) -> None:
    wanted = [("moviepy", "--capture-video", "video")] * capture_video + [("wandb", "--track", "track")] * track
    for module, flag, extra in wanted + [("huggingface_hub", "--upload-model", "hub")] * upload_model:
        check_extra(module, flag, extra)


def check_extra(module: str, what: str, extra: str) -> None:
    """`what` (a flag, a command) needs `module`, which the project's `extra` installs: there, or one line."""
    try:
        __import__(module)  # a real import: moviepy also needs its own dependencies
    except ImportError:
        fail(f"{what} needs {module}: pip install -e '.[{extra}]'")


def whole_number(text: str) -> int:
    try:
        value = float(text)  # also 10_000_000 and 1e7
    except ValueError:
        fail(f"{text!r} is not a number; give a whole number such as 10000000 or 1e7")
    if not value.is_integer():
        fail(f"{text!r} is not a whole number; give a count such as 10000000 or 1e7")
    return int(value)


# an int field of `Args` that also takes 1e7: tyro hands `whole_number` the text the user typed
COUNT = {"is_instance": lambda value: isinstance(value, int), "str_from_instance": lambda value: [str(value)]}
Count = Annotated[int, tyro.constructors.PrimitiveConstructorSpec(1, "INT", lambda a: whole_number(a[0]), **COUNT)]


def is_atari(env_id: str) -> bool:
    import gymnasium as gym

    entry_point = gym.registry[env_id].entry_point
    return isinstance(entry_point, str) and entry_point.startswith("ale_py")


def check_env_id(env_id: str, atari: bool | None = None) -> None:
    """The env id must be registered in gymnasium and, if `atari` is given, be an Atari game or not be one."""
    import ale_py  # registers the Atari ids
    import gymnasium as gym

    gym.register_envs(ale_py)
    if env_id not in gym.registry and f"ALE/{env_id}" in gym.registry:  # EnvPool names the games so: Breakout-v5
        same = env_id.rsplit("-", 1)[0] + "NoFrameskip-v4"
        ids = f"{same} (CleanRL's benchmark) or " * (same in gym.registry) + f"ALE/{env_id} (sticky actions)"
        fail(
            f"{env_id!r} is EnvPool's name of the game; the scripts take gymnasium's ids, with --vector-env envpool too: {ids}"
        )
    if env_id not in gym.registry:
        matches = difflib.get_close_matches(env_id, list(gym.registry.keys()), n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(matches)}?" if matches else "see `gymnasium.pprint_registry()` for ids"
        fail(f"unknown environment id {env_id!r}; {hint}")
    if atari is True and not is_atari(env_id):
        fail(f"{env_id!r} is not an Atari game; use an ALE id such as BreakoutNoFrameskip-v4 (or cleanrl/ppo.py)")
    if atari and gym.registry[env_id].kwargs.get("repeat_action_probability", 0) > 0:
        same = re.sub(r"^ALE/|-v\d+$", "", env_id) + "NoFrameskip-v4"
        print(
            f"note: {env_id} repeats the agent's previous action with probability "
            f"{gym.registry[env_id].kwargs['repeat_action_probability']} (sticky actions); CleanRL's benchmark and "
            f"this project's comparisons use {same if same in gym.registry else '*NoFrameskip-v4'}, which has none"
        )
    if atari is False and is_atari(env_id):
        fail(f"{env_id!r} is an Atari game; use cleanrl/ppo_atari.py (this script takes ids such as CartPole-v1)")


def check_batch(num_envs: int, num_steps: int, num_minibatches: int, total_timesteps: int, ranks: int = 1) -> None:
    """The batch of each rank splits into minibatches of 2+ samples of all ranks (a std), and fits the total."""
    batch = num_envs * num_steps
    if batch % num_minibatches != 0:
        of = " of each rank" if ranks > 1 else ""
        fail(f"the batch{of} {num_envs}*{num_steps} = {batch} is not divisible by --num-minibatches {num_minibatches}")
    if (size := batch * ranks // num_minibatches) < 2:
        how = f"num_envs*num_steps/num_minibatches{' of all ranks' * (ranks > 1)} = {batch * ranks}/{num_minibatches}"
        fail(f"a minibatch of {size} sample ({how}) has no std to normalise its advantages: make it larger")
    if total_timesteps < batch * ranks:
        fail(f"--total-timesteps {total_timesteps} is smaller than one batch ({batch * ranks}): no update would run")


def flag_words(field: str, value) -> list[str]:
    """A setting as command-line words, e.g. `["--learning-rate", "0.001"]`, `["--no-anneal-lr"]`."""
    flag = field.replace("_", "-")
    if isinstance(value, bool):
        return [f"--{flag}" if value else f"--no-{flag}"]
    return [f"--{flag}", *map(str, value if isinstance(value, (list, tuple)) else [value])]
