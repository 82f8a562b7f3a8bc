"""The run folder and the command line's counts, without gymnasium or torch (the runner, plots and submission import
this; `checks.py` adds the checks that need gymnasium).

`fail` raises `SystemExit` with an ``error: ...`` message, which Python prints to stderr without a traceback and
turns into exit status 1.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from typing import Annotated, Iterable, NoReturn, Optional, Sequence

import tyro

CHECKPOINT_FILE = "checkpoint.pt"
ELASTIC_ID_FILE = "elastic_run_id"


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


def _resume_mode(words: list[str]) -> str:
    if not words:
        return "yes"
    if words[0] not in RESUME_MODES:
        raise ValueError(f"--resume takes no value or one of {', '.join(RESUME_MODES)}, not {words[0]!r}")
    return words[0]


RESUME_MODES = ("no", "yes", "auto")
# the `resume` field of `Args`: `--resume` alone is "yes" (the run must have a checkpoint), `--resume auto` resumes
# when there is a checkpoint and starts the run otherwise (what cluster jobs, which may be requeued, run with)
ResumeMode = Annotated[
    str,
    tyro.constructors.PrimitiveConstructorSpec(
        nargs=(0, 1),
        metavar="[auto]",
        instance_from_str=_resume_mode,
        is_instance=lambda value: value in RESUME_MODES,
        str_from_instance=lambda value: [value],
    ),
]

# What a resume may change (listed in the scripts' --resume help); every other flag keeps the run's stored value.
MAY_CHANGE_ON_RESUME = frozenset({
    "total_timesteps", "checkpoint_interval", "progress_bar", "track", "wandb_project_name", "wandb_entity",
    "capture_video", "save_model", "vector_env", "env_threads", "torch_threads", "compile", "cuda",
    "backend", "device_ids", "dist_timeout", "local_num_envs",
})
# Not settings of the run but where it is and how this start treats it: never restored, never compared.
RUN_IDENTITY = frozenset({"resume", "run_name", "runs_dir"})


def given_flags(argv: Sequence[str], fields: Iterable[str]) -> set[str]:
    """The fields of `Args` whose flag is on the command line (tyro does not say which values were typed):
    `--env-id X`, `--env_id=X`, and `--no-track` / `--track` for booleans. Call it after tyro accepted `argv`, so
    every `--word` is a flag, or a value tyro consumed that happens to look like one of them."""
    names = {field.replace("_", "-"): field for field in fields}
    given = set()
    for word in argv:
        if not word.startswith("--"):
            continue
        flag = word[2:].split("=", 1)[0].replace("_", "-")
        if flag in names:
            given.add(names[flag])
        elif flag.startswith("no-") and flag[3:] in names:
            given.add(names[flag[3:]])
    return given


def flag_text(field: str, value) -> str:
    """A setting as the command line gives it, e.g. `--learning-rate 0.001`, `--no-anneal-lr`."""
    flag = "--" + field.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else "--no-" + field.replace("_", "-")
    if isinstance(value, (list, tuple)):
        return " ".join([flag, *map(str, value)])
    return f"{flag} {value}"


def resume_command(args, run_name: str, launched: bool = False) -> str:
    """The command that continues this run, as the user can type it (the run's settings come from its checkpoint);
    under torchrun, the script's part of the launch."""
    python = os.path.basename(sys.executable)
    if shutil.which(python) is None or os.path.realpath(shutil.which(python)) != os.path.realpath(sys.executable):
        python = sys.executable
    words = [sys.argv[0], "--resume", "--run-name", run_name]
    if args.runs_dir != "runs":
        words += ["--runs-dir", args.runs_dir]
    command = shlex.join(words)
    return f"the same torchrun launch of {command}" if launched else f"{shlex.quote(python)} {command}"


def sweep_run_name(env_id: Optional[str], exp_name: str, seed: int) -> str:
    """The run name the submission tools give a run: the same on every attempt (no time stamp), so that a retried,
    requeued or restarted job finds its run again."""
    return f"{env_id}__{exp_name}__{seed}".replace("/", "-") if env_id else f"{exp_name}__{seed}"


def sweep_run_of(tokens: Sequence[str], env_id: Optional[str], seed: int) -> Optional[str]:
    """The run name of one run of a submitted command (its words), or None when its script does not continue runs
    (it then runs as typed). `env_id` None: the command's own --env-id, if any."""
    script = next((t for t in tokens if t.endswith(".py")), None)
    if script is None or not supports_resume(script):
        return None
    value = lambda flag: next((tokens[i + 1] for i, t in enumerate(tokens[:-1]) if t == flag), None)  # noqa: E731
    exp_name = value("--exp-name") or os.path.splitext(os.path.basename(script))[0]
    return sweep_run_name(env_id or value("--env-id"), exp_name, seed)


def supports_resume(script: str) -> bool:
    """Whether a training script continues runs (`--run-name NAME --resume auto`): it starts through
    `cleanrl_utils.checkpoint.start_run`. A relative path is looked up here, then in this repository (a job's
    working folder may be another)."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for path in (script, os.path.join(repo, script)):
        try:
            with open(path) as f:
                return "start_run(" in f.read()
        except OSError:
            continue
    return False


def make_dir(path: str, what: str) -> None:
    """Create an output folder or stop with a one-line error naming the flag it came from."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        reason = "a file is in the way" if isinstance(exc, FileExistsError) else exc.strerror
        fail(f"cannot create {what} {path!r} ({reason})")


def prepare_run_dir(path: str) -> str:
    """Create the run directory and prove it is writable, before any work is done (and after every check that can
    fail, so that a refused start leaves no empty folder)."""
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, ".write_test")
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as exc:
        fail(f"cannot write the run directory {path!r} ({exc.strerror}); pass a writable --runs-dir")
    return path


def _read_text(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def resolve_run_name(args, restarted: bool = False) -> str:
    """The run's folder name under ``args.runs_dir`` (``args`` has run_name, runs_dir, env_id, exp_name, seed, resume).

    ``--run-name`` is never second-guessed (the safe choice for multi-node or requeued cluster jobs). Otherwise a new
    run gets ``{env_id}__{exp_name}__{seed}__{unix time}``, and ``--resume`` takes the newest folder of this
    env/exp/seed that has a checkpoint (also ``{env_id}__{exp_name}__{seed}``, the submission tools' name). A
    restarted torchrun group (``restarted``) must land in the folder of its first attempt, whose timestamped name it
    cannot recompute: each run folder records the TORCHELASTIC_RUN_ID it was started under (torchrun keeps that id
    over restarts), and a restart takes the newest folder with its id.
    """
    if args.run_name:
        return args.run_name
    prefix = f"{args.env_id}__{args.exp_name}__{args.seed}__".replace("/", "-")
    candidates = []
    if os.path.isdir(args.runs_dir):
        candidates = [os.path.join(args.runs_dir, d) for d in os.listdir(args.runs_dir)
                      if d.startswith(prefix) or d == prefix[:-2]]
    elastic_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if restarted and elastic_id:
        mine = [c for c in candidates if _read_text(os.path.join(c, ELASTIC_ID_FILE)) == elastic_id]
        if mine:
            return os.path.basename(max(mine, key=os.path.getmtime))
    if args.resume != "no":
        with_checkpoint = [os.path.join(c, CHECKPOINT_FILE) for c in candidates]
        with_checkpoint = [c for c in with_checkpoint if os.path.exists(c)]
        if with_checkpoint:
            return os.path.basename(os.path.dirname(max(with_checkpoint, key=os.path.getmtime)))
    return f"{prefix}{int(time.time())}"


def record_elastic_id(run_dir: str) -> None:
    """Note the torchrun job id in the run folder, for `resolve_run_name` after a restart."""
    elastic_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if elastic_id and elastic_id != "none":
        with open(os.path.join(run_dir, ELASTIC_ID_FILE), "w") as f:
            f.write(elastic_id)
