"""A run: its command line (parsed once), its name and folder (made and locked by `open_run`: one run per folder,
docs/cluster.md), and on a resume its checkpoint's settings, of which it may change only MAY_CHANGE_ON_RESUME."""

import dataclasses
import errno
import fcntl
import glob
import os
import shlex
import shutil
import socket
import sys
import time
from typing import Annotated, Optional

import tyro

from cleanrl_utils.checkpoint import CHECKPOINT_FILE, check_checkpoint, read_checkpoint
from cleanrl_utils.validation import LOCK_FILE, check_name, computed_fields, fail, flag_words, run_name_stem

RESUME_MODES = ("no", "yes", "auto")
# What a resume may change (the scripts' --resume help lists it); every other flag keeps the run's stored value.
MAY_CHANGE_ON_RESUME = (
    "total_timesteps checkpoint_interval progress_bar track wandb_entity wandb_project_name capture_video save_model "
    "vector_env env_threads torch_threads compile bf16 cuda backend device_ids dist_timeout local_num_envs upload_model hf_entity"
).split()
RUN_IDENTITY = frozenset({"resume", "run_name", "runs_dir"})  # where the run is: never restored, never compared
DEAD_ATTEMPTS = "dead_attempts"  # a run's logs of attempts that died before their first checkpoint


def _resume_mode(words: list[str]) -> str:
    if words and words[0] not in RESUME_MODES:
        raise ValueError(f"--resume takes no value or one of {', '.join(RESUME_MODES)}, not {words[0]!r}")
    return words[0] if words else "yes"


RESUME_HELP = (
    "`--resume`: continue --run-name's run (default: this env/exp/seed's newest) with the settings in its checkpoint; "
    "`--resume auto`: the same, or start it if it has no checkpoint (cluster jobs); a resume may change only these "
    f"flags (of those the script has): --{', --'.join(f.replace('_', '-') for f in MAY_CHANGE_ON_RESUME)} (a larger "
    "--total-timesteps extends the run, the learning rate anneals to the new end; with --local-num-envs the world "
    "size may change, the envs of all ranks together may not)"
)
RESUME_SPEC = tyro.constructors.PrimitiveConstructorSpec(
    (0, 1), "[auto]", _resume_mode, RESUME_MODES.__contains__, str.split
)
ResumeMode = Annotated[str, RESUME_SPEC, tyro.conf.arg(help=RESUME_HELP)]


def resume_command(args, run_name: str) -> str:
    """The command that continues this run."""
    python = os.path.basename(sys.executable)  # `python` where that is this one, else the full path
    if os.path.realpath(shutil.which(python) or "") != os.path.realpath(sys.executable):
        python = sys.executable
    words = [sys.argv[0], "--resume", "--run-name", run_name]
    if args.runs_dir != "runs":
        words += ["--runs-dir", args.runs_dir]
    return f"{shlex.quote(python)} {shlex.join(words)}"


def run_folders(args) -> list[str]:
    """This env/exp/seed's run folders in --runs-dir: `run_name_stem` with a start time, or without (a sweep's)."""
    stem = run_name_stem(args.env_id, args.exp_name, args.seed)
    folders = os.listdir(args.runs_dir) if os.path.isdir(args.runs_dir) else []
    return [os.path.join(args.runs_dir, d) for d in folders if d.startswith(stem + "__") or d == stem]


def resolve_run_name(args) -> str:
    """`--run-name`, else for `--resume` the newest of `run_folders` with a checkpoint, else `{stem}__{unix time}`."""
    if args.run_name:
        return args.run_name
    if args.resume != "no":
        with_checkpoint = [p for c in run_folders(args) if os.path.exists(p := os.path.join(c, CHECKPOINT_FILE))]
        if with_checkpoint:
            return os.path.basename(os.path.dirname(max(with_checkpoint, key=os.path.getmtime)))
    return f"{run_name_stem(args.env_id, args.exp_name, args.seed)}__{int(time.time())}"


def sweep_hint(args, run_name: str, sep: str) -> str:
    """For a run of a cleanrl_utils.benchmark sweep (named `run_name_stem`): how to get new runs instead."""
    in_sweep = run_name == run_name_stem(args.env_id, args.exp_name, args.seed)
    return f" (in a cleanrl_utils.benchmark sweep{sep} another --exp-name)" if in_sweep else ""


def parse_command_line(args_type, argv: list[str]):
    """The command line's settings (tyro parses it here, once), its names checked."""
    args = tyro.cli(args_type, args=argv)
    check_name("--exp-name", args.exp_name)
    if not args.runs_dir.strip():
        fail("--runs-dir is empty: give the folder of the runs, e.g. --runs-dir runs")
    if args.run_name is not None:
        check_name("--run-name", args.run_name)
    return args


def start_run(args_type, script: str, argv: Optional[list[str]] = None, line=None):
    """Parse the command line (or take `line`, its parse) and find the run: (args, run name, checkpoint or None)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_command_line(args_type, argv) if line is None else line
    run_name = resolve_run_name(args)
    run_dir = os.path.join(args.runs_dir, run_name)
    command, path = resume_command(args, run_name), os.path.join(run_dir, CHECKPOINT_FILE)
    from cleanrl_utils.signals import report_full_disk  # (importing it makes Ctrl-C a quiet stop: scripts only)

    report_full_disk(command, path)
    if not os.path.exists(path):
        if args.resume == "yes" and args.run_name is None:
            stem = run_name_stem(args.env_id, args.exp_name, args.seed)
            fail(f"--resume found no run to continue: no folder {stem}[__TIME] with a checkpoint in {args.runs_dir}")
        if args.resume == "yes":
            fail(f"no checkpoint to resume in {run_dir}: check --run-name and --runs-dir, or use --resume auto")
        if args.resume == "auto":
            print(f"note: no checkpoint in {run_dir} yet: starting the run", flush=True)
        return args, run_name, None
    if args.resume == "no":
        fail(f"{run_dir} already has a checkpoint: pass --resume (`{command}`) or another --run-name")
    ckpt = read_checkpoint(path, script)
    args = resumed_args(args, argv, run_name, ckpt)
    iteration, batch_size, total = ckpt["iteration"], ckpt["batch_size"], args.total_timesteps
    if iteration >= total // batch_size:
        made_by = ckpt.get("script_path") or os.path.join(os.path.dirname(script), f"{ckpt.get('exp_name')}.py")
        if os.path.exists(made_by) and not os.path.samefile(made_by, script):
            fail(f"{path} is of a run of {os.path.basename(made_by)}, not this script: resume it with {made_by}")
        longer = "resume it with a larger --total-timesteps" + sweep_hint(args, run_name, ",")
        print(f"run {run_name} is complete: global step {ckpt['global_step']} of --total-timesteps {total}; {longer}")
        sys.exit(0)
    old_total = (ckpt.get("settings") or {}).get("total_timesteps", total)
    if args.anneal_lr and old_total != total:  # the learning rate now anneals to 0 at the new total
        old_lr, new_lr = ((1.0 - iteration / (t // batch_size)) * args.learning_rate for t in (old_total, total))
        end = total // batch_size * batch_size
        print(f"note: the learning rate now anneals to 0 at step {end} ({old_lr:.3g} -> {new_lr:.3g})", flush=True)
    return args, run_name, ckpt


def resumed_args(args, argv: list[str], run_name: str, ckpt: dict):
    """`args` with the run's stored settings in place of those `argv` does not give; a given one that differs is
    refused unless it is in MAY_CHANGE_ON_RESUME, and noted if it is."""
    fields = {f.name for f in dataclasses.fields(args)}
    words = [word[2:].split("=", 1)[0].replace("-", "_") for word in argv if word.startswith("--")]
    given = {word if word in fields else word.removeprefix("no_") for word in words}
    stored = ckpt.get("settings") or {}
    flags = stored.keys() - RUN_IDENTITY - computed_fields(type(args))  # computed settings: computed again
    kept = {f.name: stored[f.name] for f in dataclasses.fields(args) if f.name in flags}
    args = dataclasses.replace(args, **{name: old for name, old in kept.items() if name not in given})
    changed = [
        (name, f"{shlex.join(flag_words(name, getattr(args, name)))} (the run has {shlex.join(flag_words(name, old))})")
        for name, old in kept.items()
        if getattr(args, name) != old
    ]
    if refused := [text for name, text in changed if name not in MAY_CHANGE_ON_RESUME]:
        new_run = "start another --run-name" + sweep_hint(args, run_name, ":")
        fail(f"{', '.join(refused)}: a resume keeps the run's settings (--help: --resume); drop them, or {new_run}")
    for _, note in changed:  # each a flag that a resume may change
        print(f"note: resuming with {note}", flush=True)
    return args


def open_run(args, run_name: str, state: dict, script: str, ckpt: Optional[dict] = None, renamed: bool = False):
    """The run's folder, made and locked, and `ckpt` checked against `state`; a checkpoint written there since
    `start_run` is refused, or read if `renamed` (a job's run found after `start_run`)."""
    run_dir = os.path.join(args.runs_dir, run_name)
    try:  # made after every check that can fail (a refused start leaves no empty folder), proved writable by the lock
        os.makedirs(run_dir, exist_ok=True)
        hold_run_folder(run_dir)  # one run per folder, its holder written in it
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            fail(f"the disk of the run directory {run_dir!r} is full: free some space, or pass another --runs-dir")
        if exc.errno == errno.ENAMETOOLONG:
            shorter = "--run-name" if args.run_name is not None else "--exp-name (the run name is ENV__EXP__SEED__TIME)"
            size = len(os.fsencode(run_name))
            fail(f"the run name is {size} bytes, longer than a folder name may be: give a shorter {shorter}")
        fail(f"cannot write the run directory {run_dir!r} ({exc.strerror}); pass a writable --runs-dir")
    path = os.path.join(run_dir, CHECKPOINT_FILE)
    if ckpt is None and os.path.exists(path):  # written by a run that held the folder until now
        if not renamed:
            fail(f"{run_dir} got a checkpoint from another run while this one started: pass --resume to continue it")
        ckpt = read_checkpoint(path, script)
    set_aside_dead_attempt(run_dir)
    return run_dir, None if ckpt is None else check_checkpoint(ckpt, path, state, args)


def restarted() -> bool:
    return any(int(os.environ.get(name) or 0) > 0 for name in ("SLURM_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"))


def hold_run_folder(run_dir: str) -> None:
    """Lock `run_dir` for this process, or stop with one line naming the process that holds it."""
    fd = os.open(os.path.join(run_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    said, deadline = False, time.time() + (float(os.environ.get("CLEANRL_LOCK_WAIT", "120")) if restarted() else 0)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            holder = os.pread(fd, 300, 0).decode(errors="replace").strip() or "a process that has not said who it is"
            if time.time() >= deadline:
                os.close(fd)
                fail(f"{run_dir} is in use by another run ({holder}): let it finish, or pass another --run-name")
            if not said:
                print(f"note: waiting for the previous attempt ({holder}) to let go of {run_dir}", flush=True)
                said = True
            time.sleep(1)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"host {socket.gethostname()}, pid {os.getpid()}, since {time.strftime('%F %T')}\n".encode(), 0)


def set_aside_dead_attempt(run_dir: str) -> None:
    """Event files of an attempt that died before its first checkpoint go to `dead_attempts/` (unplotted)."""
    old = glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))
    if not old or os.path.exists(os.path.join(run_dir, CHECKPOINT_FILE)):
        return
    folder = os.path.join(run_dir, DEAD_ATTEMPTS, time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(folder, exist_ok=True)
    for path in old:
        os.replace(path, os.path.join(folder, os.path.basename(path)))
    print(f"note: {run_dir} held the logs of an attempt that stopped before its first checkpoint: moved to {folder}")
