"""Helpers shared by the test files: run a script as a user would, and read back what it logged."""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import pty
import re
import select
import shlex
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Mapping, Sequence

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

REPO_ROOT = Path(__file__).resolve().parent.parent
# the environment of a tiny run: a 64-unit MLP or a tiny batch gains nothing from more threads, and on 2 busy cores
# it loses a lot
FAST = {"OMP_NUM_THREADS": "1"}
BREAKOUT = "BreakoutNoFrameskip-v4"
# a tiny run of an Atari script: a batch of 2 envs x 32 steps, 2 minibatches, 1 epoch, one torch thread (with
# `--total-timesteps 64`: one iteration)
TINY_ATARI = ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1"]
TINY_ATARI += ["--torch-threads", "1", "--no-progress-bar"]

# the TensorBoard scalars every training script logs, x-axis = global_step
CHART_TAGS = ["charts/episodic_return", "charts/episodic_length", "charts/SPS", "charts/learning_rate"]
LOSS_TAGS = [
    "losses/value_loss",
    "losses/policy_loss",
    "losses/entropy",
    "losses/old_approx_kl",
    "losses/approx_kl",
    "losses/clipfrac",
    "losses/explained_variance",
]


def _command(args: Sequence[str], env: Mapping[str, str] | None) -> tuple[list[str], dict[str, str]]:
    """``python ARGS...`` with the repository's scripts given relatively made absolute (any other argument as it is),
    and the environment to run it in."""
    resolved = [str(REPO_ROOT / a) if a.endswith(".py") and (REPO_ROOT / a).is_file() else a for a in args]
    full_env = dict(os.environ)
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), full_env.get("PYTHONPATH")) if p)
    if env:
        full_env.update(env)
    return [sys.executable, *resolved], full_env


def run_script(
    args: Sequence[str], cwd: str | os.PathLike[str], timeout: float, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python ARGS...`` (this interpreter) in ``cwd``, capturing text stdout/stderr.

    Relative script paths in ``args`` (e.g. ``cleanrl/ppo.py``) are resolved against the repository root, so
    tests can run in a temporary directory. The repository root is put on PYTHONPATH, so ``cleanrl_utils`` imports
    even when the project is not pip-installed. ``env`` entries are added to (and override) the current environment.
    """
    command, full_env = _command(args, env)
    return subprocess.run(command, cwd=str(cwd), env=full_env, capture_output=True, text=True, timeout=timeout)


def start_script(
    args: Sequence[str],
    cwd: str | os.PathLike[str],
    output: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    new_session: bool = False,
) -> subprocess.Popen[bytes]:
    """Start ``python ARGS...`` in the background, stdout and stderr appended to the file ``output`` (no pipe to
    fill up while the test waits). Arguments, PYTHONPATH and ``env`` are handled as in `run_script`. With
    ``new_session`` it leads a process group of its own (signal it and its children with ``os.killpg(pid, ...)``).
    """
    command, full_env = _command(args, env)
    with open(output, "ab") as out:
        return subprocess.Popen(
            command, cwd=str(cwd), env=full_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=new_session
        )


def run_on_terminal_until(
    args: Sequence[str],
    cwd: str | os.PathLike[str],
    until: str,
    timeout: float,
    env: Mapping[str, str] | None = None,
    stop_signal: int = signal.SIGTERM,
) -> tuple[int, str]:
    """Run ``python ARGS...`` with stdout and stderr on a 120-column pseudo-terminal (as in a user's shell); as
    soon as ``until`` appears in its output (or after ``timeout`` seconds), send it ``stop_signal``. Returns its exit
    status and everything it printed. Arguments, PYTHONPATH and ``env`` are handled as in `run_script`.
    """
    command, full_env = _command(args, env)
    leader, follower = pty.openpty()
    # give the terminal a size: on a bare pty (0 columns) tqdm draws an empty bar
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    proc = subprocess.Popen(command, cwd=str(cwd), stdout=follower, stderr=follower, env=full_env)
    os.close(follower)
    output = b""
    deadline = time.monotonic() + timeout
    try:
        while until.encode() not in output and proc.poll() is None and time.monotonic() < deadline:
            chunk = _read_terminal(leader, wait=1.0)
            if chunk is None:
                break
            output += chunk
        proc.send_signal(stop_signal)
        returncode = proc.wait(timeout=120)
        while chunk := _read_terminal(leader, wait=1.0):
            output += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    return returncode, output.decode(errors="replace")


def _read_terminal(fd: int, wait: float) -> bytes | None:
    """What the terminal has to read within ``wait`` seconds (b"" if nothing yet), None once it is closed."""
    if not select.select([fd], [], [], wait)[0]:
        return b""
    try:
        return os.read(fd, 4096) or None
    except OSError:  # EIO: the child has exited and closed the terminal
        return None


def wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float) -> str:
    """Wait until the file `path` (a started script's output) contains `text`; return the output so far."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        output = path.read_text(errors="replace") if path.exists() else ""
        if text in output:
            return output
        assert proc.poll() is None, f"the run ended before printing {text!r}:\n{output[-3000:]}"
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not printed within {timeout} s")


def stop_after(
    args: Sequence[str],
    cwd: str | os.PathLike[str],
    log: Path,
    text: str,
    env: Mapping[str, str] | None = None,
    signum: int = signal.SIGTERM,
) -> tuple[int, str]:
    """Start ``python ARGS...``, send it `signum` once its output shows `text`, and return (exit code, output)."""
    proc = start_script(args, cwd, log, env=env)
    try:
        wait_for(log, text, proc, timeout=300)
        proc.send_signal(signum)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return code, log.read_text()


def find_run_dir(runs_dir: str | os.PathLike[str]) -> Path:
    """The single run directory under ``runs_dir`` (fails if there is none or more than one)."""
    runs = [p for p in Path(runs_dir).iterdir() if p.is_dir()]
    assert len(runs) == 1, f"expected exactly one run directory in {runs_dir}, found {[p.name for p in runs]}"
    return runs[0]


def read_scalars(run_dir: str | os.PathLike[str], tag: str) -> list[tuple[int, float]]:
    """All ``(step, value)`` pairs logged under ``tag`` in the TensorBoard event files of ``run_dir``."""
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    if tag not in acc.Tags()["scalars"]:
        return []
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def load_script(script: str, module_name: str) -> ModuleType:
    """Import a script such as ``cleanrl/ppo.py`` as a module (its ``__main__`` block does not run)."""
    spec = importlib.util.spec_from_file_location(module_name, REPO_ROOT / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_one_line_error(result: subprocess.CompletedProcess[str], fragment: str) -> None:
    """The run failed with exactly one stderr line, ``error: ...`` containing ``fragment``, and no traceback."""
    assert result.returncode != 0, result.stdout[-2000:]
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert fragment in lines[0], lines[0]


def processes_working_in(folder: str | os.PathLike[str]) -> list[str]:
    """The command lines of the processes, other than this one, whose working directory is `folder` or below it: the
    runs a test started there and left behind. (A name such as a run's folder name is not enough: tests running
    beside this one start runs of the same name in folders of their own.)"""
    root = Path(folder).resolve()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cwd = (proc / "cwd").resolve(strict=True)
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if command and (cwd == root or root in cwd.parents):
            found.append(f"{proc.name}: {command}")
    return found


# The driver of `run_each`: it loads what every script loads first (2 s of CPU that a process per case would pay again),
# then forks one child per case, one after the other. A child runs its case as `python ARGS...` would: in its own
# folder, with its own argv, stdout and stderr, the script as __main__ (or `-m module`, or `-c code`), ending through
# the interpreter's own exit (a SystemExit's message, a traceback, exit handlers, the exit status).
DRIVER = r"""
import gc, json, os, runpy, sys
import ale_py, gymnasium, numpy, torch, tyro  # noqa: F401
if sys.argv[2] == "train":  # what a run that trains loads (torch.optim's first step, the TensorBoard writer)
    import torch._dynamo, torch.utils.tensorboard  # noqa: F401
gc.freeze()  # the children share these objects unchanged: no page copied for the collector
codes = []
for args, cwd, out in json.loads(sys.argv[1]):
    pid = os.fork()
    if pid == 0:
        break
    codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
else:
    print(json.dumps(codes))
    sys.exit(0)
numpy.random.seed()  # fresh entropy, as a new process draws (the forked state would be the same in every child)
os.chdir(cwd)
for fd, name in ((1, "stdout"), (2, "stderr")):
    os.dup2(os.open(f"{out}.{name}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
if args[0] == "-m":
    sys.argv = args[1:]
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)
elif args[0] == "-c":
    sys.argv = ["-c", *args[2:]]
    exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})
else:
    sys.argv, sys.path[0] = list(args), os.path.dirname(args[0])
    runpy.run_path(args[0], run_name="__main__")
"""


def run_each(
    cases: Sequence[tuple[Sequence[str], Path]],
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
    train: bool = False,
) -> list[subprocess.CompletedProcess[str]]:
    """Run each `(args, cwd)` as `python ARGS...` in `cwd` (see `run_script`), in order, one forked child of
    one process each; `train` also preloads what a training run loads. Returns their results, as `run_script`. (The
    children share the driver's hash seed: two runs that must agree bit for bit are better two processes.)"""
    cases = [([str(REPO_ROOT / a) if a.endswith(".py") and not os.path.isabs(a) else a for a in args], cwd)
             for args, cwd in cases]  # fmt: skip
    with tempfile.TemporaryDirectory() as outs:  # the children's stdout and stderr, outside the folders checked
        spec = [(args, str(cwd), f"{outs}/{i}") for i, (args, cwd) in enumerate(cases)]
        env = {
            "OMP_WAIT_POLICY": "PASSIVE",
            **(env or {}),
        }  # what the scripts set before torch loads, here loaded first
        driver = run_script(["-c", DRIVER, json.dumps(spec), "train" if train else "start"], outs, timeout, env)
        assert driver.returncode == 0 and not driver.stderr, driver.stderr[-3000:]
        codes = json.loads(driver.stdout)  # the driver prints nothing else: what it preloads is silent
        return [
            subprocess.CompletedProcess(
                args, code, Path(f"{out}.stdout").read_text(), Path(f"{out}.stderr").read_text()
            )
            for (args, _, out), code in zip(spec, codes)
        ]


# `python -c FIRST_ON_PATH FOLDER SCRIPT ARGS...`: the script with FOLDER first on the module path (for modules that
# stand in for an optional package, e.g. one that cannot be imported)
FIRST_ON_PATH = (
    "import runpy, sys; sys.path.insert(0, sys.argv[1]); sys.argv = sys.argv[2:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


# ---------------------------------------------------------------- what several test files use


@dataclass
class Command:
    where: str  # file:line
    tokens: list[str]

    def __str__(self) -> str:
        return f"{self.where}: {shlex.join(self.tokens)}"


def extract_commands(path: Path) -> list[Command]:
    """The commands of the ```bash blocks of a markdown file; `$VAR` of `VAR=value` lines earlier in the same
    block is substituted."""
    commands: list[Command] = []
    lines = path.read_text().splitlines()
    in_block, pending, start, variables = False, "", 0, {}
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            in_block, pending, variables = line.strip() == "```bash", "", {}
            continue
        if not in_block:
            continue
        if not pending:
            start = number
        pending += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if line.endswith("\\"):
            continue
        tokens, pending = shlex.split(pending, comments=True), ""
        while tokens:
            part, tokens = (
                (tokens[: tokens.index("&&")], tokens[tokens.index("&&") + 1 :]) if "&&" in tokens else (tokens, [])
            )
            part = [re.sub(r"\$(\w+)", lambda m, known=variables: known.get(m.group(1), m.group(0)), t) for t in part]
            if len(part) == 1 and re.fullmatch(r"[A-Z_]+=\S+", part[0]):
                name, value = part[0].split("=", 1)
                variables[name] = value
            commands.append(Command(f"{path.relative_to(REPO_ROOT)}:{start}", part))
    return commands


def run_submit(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 120):
    """Run submit_exp.py as users do (a file path, not -m) with exactly the environment `env` (default: ours)."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = str(REPO_ROOT)  # the training scripts import cleanrl_utils
    cmd = [sys.executable, str(REPO_ROOT / "cleanrl_utils" / "submit_exp.py"), *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def fill_hub_cache(hf_home: Path, repo_id: str, files: dict[str, Path]) -> None:
    """`files` as huggingface_hub stores a download of `repo_id` at main: blobs named by their hash, the commit in
    refs/main, and snapshots/<commit>/<name> linking to the blob."""
    from huggingface_hub import scan_cache_dir  # (an optional package: imported by the tests that use it)

    repo = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    for folder in ("blobs", "refs", f"snapshots/{commit}"):
        (repo / folder).mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    for name, source in files.items():
        data = source.read_bytes()
        blob = hashlib.sha256(data).hexdigest()
        (repo / "blobs" / blob).write_bytes(data)
        (repo / "snapshots" / commit / name).symlink_to(f"../../blobs/{blob}")
    cached = {r.repo_id: r for r in scan_cache_dir(hf_home / "hub").repos}  # the library reads it back as a download
    assert {f.file_name for rev in cached[repo_id].revisions for f in rev.files} >= set(files)
    assert "main" in cached[repo_id].refs


def write_part(run_dir, start: float, iterations, purge_step: int | None = None) -> None:
    """One part of a run as ppo_atari.py logs it, started at `start`: an event file of its own (named by and opening
    at that time), an iteration every 2 s (SPS) and a game ending every iteration."""
    from unittest import mock

    from torch.utils.tensorboard import SummaryWriter

    with mock.patch("time.time", return_value=start):
        writer = SummaryWriter(str(run_dir), purge_step=purge_step)
    with writer:
        writer.add_text("hyperparameters", "|param|value|\n|-|-|\n|batch_size|1024|", walltime=start)
        for k, i in enumerate(iterations, 1):
            when = start + 2 * k
            writer.add_scalar("charts/episodic_return", float(i), i * 1024, walltime=when)
            writer.add_scalar("charts/episodic_length", 400.0, i * 1024, walltime=when)
            writer.add_scalar("charts/SPS", 512.0, i * 1024, walltime=when)


def fill_up(disk: Path, blocks_left: int = 0) -> None:
    """Fill the disk to the last block, then free `blocks_left` blocks: room for a few small writes and no more."""
    block = os.statvfs(disk).f_bsize
    with open(disk / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * block)
        except OSError:
            pass
        f.truncate(f.tell() - blocks_left * block)
