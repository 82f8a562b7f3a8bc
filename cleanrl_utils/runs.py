"""The run folder and the command line's counts, without gymnasium or torch (the runner, plots and submission import
this; `checks.py` adds the checks that need gymnasium).

`fail` raises `SystemExit` with an ``error: ...`` message, which Python prints to stderr without a traceback and
turns into exit status 1.
"""

from __future__ import annotations

import os
import time
from typing import Annotated, NoReturn, Optional

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


def make_dir(path: str, what: str) -> None:
    """Create an output folder or stop with a one-line error naming the flag it came from."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        reason = "a file is in the way" if isinstance(exc, FileExistsError) else exc.strerror
        fail(f"cannot create {what} {path!r} ({reason})")


def prepare_run_dir(path: str, resume: bool = False) -> str:
    """Create the run directory and prove it is writable, before any work is done; with `resume`, it must hold a
    checkpoint."""
    if resume and not os.path.exists(os.path.join(path, CHECKPOINT_FILE)):
        fail(f"no checkpoint to resume in {path}: check --run-name and --runs-dir, or start without --resume")
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
    env/exp/seed that has a checkpoint. A restarted torchrun group (``restarted``) must land in the folder of its
    first attempt, whose timestamped name it cannot recompute: each run folder records the TORCHELASTIC_RUN_ID it was
    started under (torchrun keeps that id over restarts), and a restart takes the newest folder with its id.
    """
    if args.run_name:
        return args.run_name
    prefix = f"{args.env_id}__{args.exp_name}__{args.seed}__".replace("/", "-")
    candidates = []
    if os.path.isdir(args.runs_dir):
        candidates = [os.path.join(args.runs_dir, d) for d in os.listdir(args.runs_dir) if d.startswith(prefix)]
    elastic_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if restarted and elastic_id:
        mine = [c for c in candidates if _read_text(os.path.join(c, ELASTIC_ID_FILE)) == elastic_id]
        if mine:
            return os.path.basename(max(mine, key=os.path.getmtime))
    if args.resume:
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
