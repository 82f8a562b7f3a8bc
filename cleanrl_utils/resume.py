"""Runs that stop and continue: the run's folder, its checkpoint (the script's `state`, counters, every rank's RNG
states and games, every flag), its stored settings, and a stop on SIGTERM/Ctrl-C."""

import contextlib
import dataclasses
import errno
import io
import os
import random
import re
import shlex
import shutil
import signal
import sys
import threading
import time
from typing import Annotated, Any, Iterator, Optional

import numpy as np
import torch
import tyro

from cleanrl_utils.runlock import hold_run_folder
from cleanrl_utils.validation import check_name, computed_fields, fail, run_name_stem

CHECKPOINT_FILE = "checkpoint.pt"
CHECKPOINT_FORMAT = 2  # 2: the script's `state` dict; 1 (older versions): the agent and optimizer only
RESUME_MODES = ("no", "yes", "auto")
# What a resume may change (the scripts' --resume help lists it); every other flag keeps the run's stored value.
MAY_CHANGE_ON_RESUME = (
    "total_timesteps checkpoint_interval progress_bar track wandb_entity wandb_project_name capture_video save_model "
    "vector_env env_threads torch_threads compile bf16 cuda backend device_ids dist_timeout local_num_envs upload_model hf_entity"
).split()
RUN_IDENTITY = frozenset({"resume", "run_name", "runs_dir"})  # where the run is: never restored, never compared
RUN_DIR = ""  # this process's run folder (`start_run` sets it), for `full_disk_line`
STARTED: tuple = ()  # (run folder, had it a checkpoint) as `start_run` found them


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


def rng_state(device: torch.device) -> dict:
    """This process's RNG states (python, numpy, torch, cuda)."""
    name, keys, *rest = np.random.get_state()
    state = {"python": random.getstate(), "numpy": (name, torch.from_numpy(keys.astype(np.int64)), *rest)}
    state["torch"] = torch.get_rng_state()
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng(ckpt: dict, device: torch.device, rank: int = 0) -> None:
    """Rank `rank`'s RNG states from the checkpoint."""
    state = ckpt["rng"][rank]
    random.setstate((state["python"][0], tuple(state["python"][1]), state["python"][2]))
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def atomic_save(obj: dict, path: str, fix: str = "free some space, then resume with --resume", other: str = "") -> None:
    """`obj` to a temporary file renamed over `path`: a failed write keeps the old file; one error line."""
    data = io.BytesIO()
    torch.save(obj, data)
    tmp = f"{path}.tmp.{os.getpid()}"  # this writer's own
    try:
        with open(tmp, "wb") as f:
            f.write(data.getbuffer())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        folder = os.path.dirname(os.path.abspath(path))
        kept = "the last one there is kept; " if os.path.exists(path) else ""
        what = f"cannot write {os.path.basename(path)} in {folder}"
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):  # not a full disk: its cause, and `other`
            fail(f"{what}: {exc.strerror or exc} ({kept}{other or 'put that right, then resume with --resume'})")
        free = shutil.disk_usage(folder).free / 2**20
        fail(f"{what}: it needs about {data.tell() / 2**20:.0f} MiB and the disk has {free:.0f} MiB free ({kept}{fix})")


def save_checkpoint(path: str, state: dict, args, iteration: int, global_step: int, rngs: list, recent_returns: list):
    """`state`: name -> what to save (`state_dict()` or a tensor); `rngs`: the RNG states of every rank, each with its
    games (`vector_envs.rank_games`: a resume goes on with them)."""
    saved = {id(p) for value in state.values() if isinstance(value, torch.nn.Module) for p in value.parameters()}
    for name, value in state.items():
        stepped = value.param_groups if isinstance(value, torch.optim.Optimizer) else []
        if any(id(p) not in saved for group in stepped for p in group["params"]):
            fix = "add that network to the script's `state` dict, so that a resume gets it back"
            fail(f"the optimizer {name!r} in the checkpoint's state steps parameters of a network not in it: {fix}")
    ckpt = {"format": CHECKPOINT_FORMAT, "env_id": args.env_id, "exp_name": args.exp_name, "rng": rngs}
    ckpt.update(batch_size=args.batch_size, world_size=len(rngs), iteration=iteration, global_step=global_step)
    ckpt["state"] = {k: v if isinstance(v, torch.Tensor) else v.state_dict() for k, v in state.items()}
    ckpt["recent_returns"] = list(recent_returns)
    ckpt["settings"] = {k: list(v) if isinstance(v, tuple) else v for k, v in vars(args).items()}
    ckpt["computed"] = sorted(
        computed_fields(type(args))
    )  # settings that are not flags (a command rebuilt leaves them)
    ran = sys.argv[0]  # the script that ran (the eval tools build its Agent); none for `python -c`
    ckpt["script_path"] = os.path.abspath(ran) if os.path.isfile(ran) else None
    atomic_save(ckpt, path)


def save_model(path: str, agent: torch.nn.Module, args) -> None:
    """Weights, what rebuilds and checks the agent (cleanrl_utils/evals/ppo_eval.py) and the script as it ran (text)"""
    script, instead = sys.argv[0], f"use the run's {CHECKPOINT_FILE} there instead: it holds the same weights"
    with open(script if os.path.isfile(script) else os.devnull, encoding="utf-8") as source:
        atomic_save(
            {
                "model": agent.state_dict(),
                "env_id": args.env_id,
                "exp_name": args.exp_name,
                "script": os.path.basename(script),
                "script_path": os.path.abspath(script) if os.path.isfile(script) else None,
                "source": source.read(),
                "bf16": bool(getattr(args, "bf16", False)),  # it plays as it trained (ppo_eval)
            },
            path,
            f"{instead}, and cleanrl_utils/evals/ppo_eval.py reads it; free some space for the next --save-model",
            instead,
        )


def first_sentence(exc: BaseException, most: int = 300) -> str:
    """The first sentence of `exc`'s message (torch's later ones advise on other cases), or its type if none fits."""
    lines = str(exc).strip().splitlines()
    sentence = re.split(r"(?<=[.!?])\s", lines[0].strip(), maxsplit=1)[0].rstrip(".") if lines else ""
    return sentence if 0 < len(sentence) <= most else type(exc).__name__


def read_checkpoint(path: str, script: str) -> dict:
    """The checkpoint at `path` of a run of `script`; an unreadable or foreign file is a one-line error."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated zip, garbage, or pickled objects that weights_only refuses
        why, fix = "corrupt (cut short by a full disk?) or not from this script", "move it away to start the run anew"
        fail(f"cannot read the checkpoint {path} ({first_sentence(exc)}); it is {why}: remove it, or {fix}")
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT or "state" not in ckpt:
        fail(f"{path} is not a checkpoint of {os.path.basename(script)} (format {CHECKPOINT_FORMAT}); remove it")
    return ckpt


def check_checkpoint(ckpt: dict, path: str, state: dict[str, Any], args) -> dict:
    """`ckpt` (read from `path`) fits this run's env, networks and batch; else a one-line error."""
    it = f"the checkpoint {path}"
    if ckpt.get("env_id") != args.env_id:
        fail(f"{it} was made for {ckpt.get('env_id')}, not --env-id {args.env_id}")
    if ckpt.get("batch_size") != args.batch_size:
        fail(f"{it} has batch {ckpt.get('batch_size')}: resume with the same --num-envs and --num-steps")
    if missing := sorted(set(state) - set(ckpt["state"])):
        fail(f"{it} has no {', '.join(missing)}: the script's `state` changed; start another --run-name")
    for key, network in ((k, v) for k, v in state.items() if isinstance(v, torch.nn.Module)):
        own, theirs = network.state_dict(), ckpt["state"][key]
        for name in sorted(set(own) | set(theirs)):
            mine, other = (tuple(d[name].shape) if name in d else None for d in (own, theirs))
            if mine != other:
                fail(f"{it} holds another network architecture than this script's {key} ({name})")
    return ckpt


def load_state(state: dict[str, Any], ckpt: dict) -> tuple[int, int, list[float]]:
    """The script's `state` back from `ckpt` (networks first); returns the run's iteration, step and recent returns."""
    for key, value in sorted(state.items(), key=lambda kv: isinstance(kv[1], torch.optim.Optimizer)):
        if isinstance(value, torch.Tensor):
            value.copy_(ckpt["state"][key])
        else:
            value.load_state_dict(ckpt["state"][key])
    return ckpt["iteration"], ckpt["global_step"], ckpt["recent_returns"]


def flag_text(field: str, value) -> str:
    """A setting as the command line gives it, e.g. `--learning-rate 0.001`, `--no-anneal-lr`."""
    flag = field.replace("_", "-")
    if isinstance(value, bool):
        return f"--{flag}" if value else f"--no-{flag}"
    return " ".join([f"--{flag}", *map(str, value if isinstance(value, (list, tuple)) else [value])])


def resume_command(args, run_name: str) -> str:
    """The command that continues this run."""
    python = os.path.basename(sys.executable)  # `python` where that is this one, else the full path
    if os.path.realpath(shutil.which(python) or "") != os.path.realpath(sys.executable):
        python = sys.executable
    words = [sys.argv[0], "--resume", "--run-name", run_name]
    if args.runs_dir != "runs":
        words += ["--runs-dir", args.runs_dir]
    return f"{shlex.quote(python)} {shlex.join(words)}"


def full_disk(exc: Optional[BaseException]) -> Optional[OSError]:
    """The full disk's OSError that `exc` is or comes from (torch raises a RuntimeError of its own from it), or None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def full_disk_line(err: OSError, command: str) -> str:
    """The error line of a run that a full disk (`err`) stopped; `command` resumes it."""
    folder = os.path.abspath(os.path.dirname(err.filename) if isinstance(err.filename, str) else RUN_DIR)
    free = shutil.disk_usage(folder).free / 2**20
    fix = f"its last checkpoint is kept: free some space, then resume with: {command}"
    if not os.path.exists(os.path.join(RUN_DIR, CHECKPOINT_FILE)):
        fix = "it has no checkpoint yet: free some space, then start it again"
    return f"error: no space left on the disk of {folder} ({free:.0f} MiB free), so the run stopped; {fix}"


def report_full_disk(run_dir: str, command: str) -> None:
    """From here on a full disk ends this process with `full_disk_line` (a thread: silently; the writer re-raises)."""
    global RUN_DIR
    RUN_DIR = run_dir
    previous, previous_in_thread = sys.excepthook, threading.excepthook

    def on_exception(kind, exc, tb) -> None:
        if (err := full_disk(exc)) is None:
            return previous(kind, exc, tb)
        print(full_disk_line(err, command), file=sys.stderr, flush=True)

    def on_exception_in_thread(hook: threading.ExceptHookArgs) -> None:
        if full_disk(hook.exc_value) is None:
            previous_in_thread(hook)

    sys.excepthook, threading.excepthook = on_exception, on_exception_in_thread


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
    """How a run of a cleanrl_utils.benchmark sweep (named `run_name_stem`, without a time) gets new runs instead;
    nothing for another run (a plain run's name has its time, a tuner's its trial)."""
    in_sweep = run_name == run_name_stem(args.env_id, args.exp_name, args.seed)
    return f" (in a cleanrl_utils.benchmark sweep{sep} another --exp-name)" if in_sweep else ""


def start_run(args_type, script: str, argv: Optional[list[str]] = None):
    """Parse the command line and find the run: (args, run name, checkpoint or None); creates nothing."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = tyro.cli(args_type, args=argv)
    check_name("--exp-name", args.exp_name)
    if not args.runs_dir.strip():
        fail("--runs-dir is empty: give the folder of the runs, e.g. --runs-dir runs")
    if args.run_name is not None:
        check_name("--run-name", args.run_name)
    run_name = resolve_run_name(args)
    run_dir = os.path.join(args.runs_dir, run_name)
    command = resume_command(args, run_name)
    report_full_disk(run_dir, command)
    path = os.path.join(run_dir, CHECKPOINT_FILE)
    global STARTED
    STARTED = (run_dir, os.path.exists(path))
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
    # parsed again with the stored settings as defaults: a flag given another value is refused unless it may change
    stored = ckpt.get("settings") or {}
    flags = stored.keys() - RUN_IDENTITY - computed_fields(args_type)  # computed settings: computed again
    kept = {f.name: stored[f.name] for f in dataclasses.fields(args_type) if f.name in flags}
    args = tyro.cli(args_type, args=argv, default=args_type(**kept))
    changed = [
        (name, f"{flag_text(name, getattr(args, name))} (the run has {flag_text(name, old)})")
        for name, old in kept.items()
        if getattr(args, name) != old
    ]
    if refused := [text for name, text in changed if name not in MAY_CHANGE_ON_RESUME]:
        new_run = "start another --run-name" + sweep_hint(args, run_name, ":")
        fail(f"{', '.join(refused)}: a resume keeps the run's settings (--help: --resume); drop them, or {new_run}")
    for _, note in changed:  # each a flag that a resume may change
        print(f"note: resuming with {note}", flush=True)
    iteration, batch_size, total = ckpt["iteration"], ckpt["batch_size"], args.total_timesteps
    if iteration >= total // batch_size:
        made_by = ckpt.get("script_path") or os.path.join(os.path.dirname(script), f"{ckpt.get('exp_name')}.py")
        if os.path.exists(made_by) and not os.path.samefile(made_by, script):
            fail(f"{path} is of a run of {os.path.basename(made_by)}, not this script: resume it with {made_by}")
        longer = "resume it with a larger --total-timesteps" + sweep_hint(args, run_name, ",")
        print(f"run {run_name} is complete: global step {ckpt['global_step']} of --total-timesteps {total}; {longer}")
        sys.exit(0)
    old_total = stored.get("total_timesteps", total)
    if args.anneal_lr and old_total != total:  # the learning rate now anneals to 0 at the new total
        old_lr, new_lr = ((1.0 - iteration / (t // batch_size)) * args.learning_rate for t in (old_total, total))
        end = total // batch_size * batch_size
        print(f"note: the learning rate now anneals to 0 at step {end} ({old_lr:.3g} -> {new_lr:.3g})", flush=True)
    return args, run_name, ckpt


def open_run(args, run_name: str, state: dict, script: str, ckpt: Optional[dict] = None) -> tuple[str, Optional[dict]]:
    """The run's folder, created and writable, and `ckpt` (from `start_run`) checked against `state`."""
    run_dir = os.path.join(args.runs_dir, run_name)
    try:  # made after every check that can fail (a refused start leaves no empty folder), proved writable by the lock
        os.makedirs(run_dir, exist_ok=True)
        hold_run_folder(run_dir, CHECKPOINT_FILE)  # one run per folder, its holder written in it (runlock.py)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            fail(f"the disk of the run directory {run_dir!r} is full: free some space, or pass another --runs-dir")
        if exc.errno == errno.ENAMETOOLONG:
            shorter = "--run-name" if args.run_name is not None else "--exp-name (the run name is ENV__EXP__SEED__TIME)"
            fail(
                f"the run name is {len(os.fsencode(run_name))} bytes, longer than a folder name may be: give a shorter {shorter}"
            )
        fail(f"cannot write the run directory {run_dir!r} ({exc.strerror}); pass a writable --runs-dir")
    path = os.path.join(run_dir, CHECKPOINT_FILE)
    if STARTED == (run_dir, False) and os.path.exists(path):  # written by a run that held the folder until now
        fail(f"{run_dir} got a checkpoint from another run while this one started: pass --resume to continue it")
    return run_dir, None if ckpt is None else check_checkpoint(ckpt, path, state, args)


class StopSignals:
    """SIGTERM/Ctrl-C: `requested` (the signal), to checkpoint and exit after the iteration; a second Ctrl-C 2 s or
    more later (not torchrun's copy of the first) exits at once with status 130. Only `say` prints."""

    def __init__(self, say: bool = True) -> None:
        self.requested, self.at, self.say = 0, 0.0, say
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum, frame) -> None:
        if self.requested and signum == signal.SIGINT and time.time() - self.at > 2:
            if self.say:
                print("\ninterrupted; the last checkpoint is kept", file=sys.stderr)
            raise SystemExit(130)
        if not self.requested:
            self.requested, self.at = signum, time.time()
            if self.say:
                print("\nstopping at the end of this iteration (a checkpoint will be saved)", file=sys.stderr)


@contextlib.contextmanager
def interrupts_ignored() -> Iterator[None]:
    """Processes started inside (async env workers) never see the terminal's Ctrl-C: this process stops them. SIGINT
    is blocked, not ignored: children keep the block, and a Ctrl-C meanwhile reaches this process once it ends."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
