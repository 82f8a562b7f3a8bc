"""The runs as the tools see them: sweep run names, who holds a run folder, the tools' counts and output folders."""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import re
import socket
from typing import Optional, Sequence

import tyro

from cleanrl_utils.script_shape import read_script
from cleanrl_utils.validation import LOCK_FILE, check_env_id, check_name, check_ranges, fail, run_name_stem


def check_positive(**counts: float) -> None:
    """The tools' own counts (`--num-seeds`, `--vcpus`...) are positive (a script's flags: `check_ranges`)."""
    for name, value in counts.items():
        if value is None or value <= 0:
            fail(f"--{name.replace('_', '-')} must be positive, got {value}")


def holder(run_dir: str) -> Optional[str]:
    """Who holds `run_dir` now ("host H, pid P, since T"), or None; the lock is only tried, read-only."""
    try:
        fd = os.open(os.path.join(run_dir, LOCK_FILE), os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        return os.pread(fd, 300, 0).decode(errors="replace").strip() or "a process that has not said who it is"
    finally:
        os.close(fd)  # (closing lets go of the shared lock, if taken)


def holder_pid(held: str) -> Optional[int]:
    """The pid in `holder`'s text of a holder on this host, else None."""
    found = re.match(r"host (\S+), pid (\d+),", held)
    return int(found[2]) if found and found[1] == socket.gethostname() else None


def make_dir(path: str, what: str) -> None:
    """The folder `path` of the tool's output, made if missing; else a one-line error naming `what`."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        reason = "a file is in the way" if isinstance(exc, FileExistsError) else exc.strerror
        fail(f"cannot create {what} {path!r} ({reason})")


def flag_value(tokens: Sequence[str], flag: str) -> Optional[str]:
    """The (last) value the words of a command give `flag` (`--flag value` or `--flag=value`), or None."""
    found = None
    for i, token in enumerate(tokens):
        if token == flag and i + 1 < len(tokens):
            found = tokens[i + 1]
        elif token.startswith(flag + "="):
            found = token.split("=", 1)[1]
    return found


# what the tools add to every run of a command that continues runs, and why the command must not set it
SWEEP_FLAGS = {
    "--seed": "the seeds come from --start-seed and --num-seeds",
    "--run-name": "each run is named {env_id}__{exp_name}__{seed}; name a sweep with --exp-name",
    "--resume": "every run is started with --resume auto",
}


def check_command(tokens: Sequence[str], set_by_tool: dict[str, str]) -> None:
    """A command a tool starts sets no flag the tool adds (`set_by_tool`: flag -> why), and folder names only."""
    for flag, why in set_by_tool.items():
        if any(t == flag or t.startswith(flag + "=") for t in tokens):
            fail(f"--command must not set {flag}: {why}")
    for flag in ("--exp-name", "--run-name"):
        name = flag_value(tokens, flag)
        if name is not None:
            check_name(flag, name)


def sweep_run_of(tokens: Sequence[str], env_id: Optional[str], seed: int) -> Optional[str]:
    """A run's name, or None when its script does not continue runs. `env_id` None: the command's or the default."""
    script = read_script(next((t for t in tokens if t.endswith(".py")), None) or "")
    if script is None or not script.resumes:
        return None
    exp_name = flag_value(tokens, "--exp-name") or script.default("exp_name")
    return run_name_stem(env_id or flag_value(tokens, "--env-id") or script.default("env_id"), exp_name, seed)


def check_script_flags(script: str, flags: Sequence[str]) -> bool:
    """The flags of `python SCRIPT FLAGS` checked as the script checks them, before anything is submitted; False for
    a script not of this project's shape here (nothing checked)."""
    shape = read_script(script)
    if shape is None:
        return False  # not a script of this project's shape: loading it here could run it
    out = io.StringIO()
    try:
        with contextlib.redirect_stderr(out), contextlib.redirect_stdout(out):
            args = tyro.cli(shape.args_type, args=list(flags))
    except SystemExit as exc:
        if isinstance(exc.code, str):  # the script's own one-line error (a count such as `--num-envs abc`)
            said = exc.code.removeprefix("error: ")
        else:  # tyro's box: its text without the frame, the title (first) and the pointer to this tool's --help
            lines = [line.strip(" │╭╮╰╯─") for line in out.getvalue().splitlines()]
            lines = [line for line in lines if line.strip("-") and not line.startswith(("usage:", "For full help"))]
            said = " ".join(dict.fromkeys(lines[1:] or lines))
        fail(
            f"the command's flags do not parse for {os.path.basename(script)}: {said.rstrip('.')}; see "
            f"`python {script} --help`"
        )
    check_ranges(args)
    for flag, name in (
        ("--exp-name", getattr(args, "exp_name", None)),
        ("--run-name", getattr(args, "run_name", None)),
    ):
        if name is not None:
            check_name(flag, name)
    env_id = getattr(args, "env_id", None)
    if env_id is not None:
        try:
            check_env_id(env_id, atari=shape.atari)  # as the script checks it
        except SystemExit as exc:
            fail(f"{os.path.basename(script)}: {str(exc.code).removeprefix('error: ')}")
    return True


def print_table(header, rows) -> None:
    """A Markdown table of strings, its columns padded to their widest cell."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for i, row in enumerate([header, *rows]):
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
