"""Runs that stop and continue: the run's folder, its checkpoint, its stored settings, and a stop on SIGTERM/Ctrl-C.

A checkpoint (`{runs_dir}/{run_name}/checkpoint.pt`) holds what the script puts in its `state` dict (the agent and
the optimizer; a copy of a script adds its own networks, optimizers or normalisers there: anything with
`state_dict()`/`load_state_dict()`, or a tensor), the completed iterations, the global step (= TensorBoard step), the
recent returns, every rank's RNG states and the run's settings (every flag), in types that
`torch.load(weights_only=True)` accepts. It is written to a temporary file and renamed over the old one, so a crash
never leaves a half-written checkpoint. The games' emulator states are not in it: a resumed run starts new games.

`start_run` continues a run with its stored settings, so `--resume --run-name NAME` is the whole command; a flag typed
again with another value is refused, except those in `MAY_CHANGE_ON_RESUME`, which take effect with a note.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import random
import shlex
import shutil
import signal
import sys
import time
from typing import Annotated, Any, Iterable, Iterator, Optional, Sequence

import numpy as np
import torch
import tyro

from cleanrl_utils.validation import check_name, fail

CHECKPOINT_FILE = "checkpoint.pt"
CHECKPOINT_FORMAT = 2  # 2: the script's `state` dict; 1 (older versions): the agent and optimizer only
ELASTIC_ID_FILE = "elastic_run_id"
RESUME_MODES = ("no", "yes", "auto")
# What a resume may change (listed in the scripts' --resume help); every other flag keeps the run's stored value.
MAY_CHANGE_ON_RESUME = frozenset({
    "total_timesteps", "checkpoint_interval", "progress_bar", "track", "wandb_project_name", "wandb_entity",
    "capture_video", "save_model", "vector_env", "env_threads", "torch_threads", "compile", "cuda",
    "backend", "device_ids", "dist_timeout", "local_num_envs",
})
# Not settings of the run but where it is and how this start treats it: never restored, never compared.
RUN_IDENTITY = frozenset({"resume", "run_name", "runs_dir"})


def _resume_mode(words: list[str]) -> str:
    if words and words[0] not in RESUME_MODES:
        raise ValueError(f"--resume takes no value or one of {', '.join(RESUME_MODES)}, not {words[0]!r}")
    return words[0] if words else "yes"


# `--resume` alone is "yes" (the run must have a checkpoint); `--resume auto` resumes when there is a checkpoint and
# starts the run otherwise (what cluster jobs, which may be requeued, run with)
ResumeMode = Annotated[str, tyro.constructors.PrimitiveConstructorSpec(
    nargs=(0, 1), metavar="[auto]", instance_from_str=_resume_mode, is_instance=lambda v: v in RESUME_MODES,
    str_from_instance=lambda v: [v])]


# ---------------------------------------------------------------- the checkpoint


def rng_state(device: torch.device) -> dict:
    """This process's RNG states (python, numpy, torch, cuda)."""
    name, keys, *rest = np.random.get_state()
    state = {"python": random.getstate(), "numpy": (name, torch.from_numpy(keys.astype(np.int64)), *rest),
             "torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng(ckpt: dict, rank: int, world_size: int, seed: int, device: torch.device) -> None:
    """This rank's RNG states from the checkpoint; with another world size, new deterministic streams."""
    if len(ckpt["rng"]) != world_size:
        for seeder in (random.seed, np.random.seed, torch.manual_seed):
            seeder(seed + rank + 1000 * ckpt["iteration"])
        return
    state = ckpt["rng"][rank]
    random.setstate((state["python"][0], tuple(state["python"][1]), state["python"][2]))
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def atomic_save(obj: dict, path: str) -> None:
    """`obj` to `path` through a temporary file renamed over it: the old file stays whole until the new one is. A
    failed write (a full disk) removes the temporary file, keeps the old one and is a one-line error."""
    tmp = path + ".tmp"
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as exc:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        chain, cause = [], exc
        while cause is not None:
            chain, cause = chain + [str(cause)], cause.__cause__ or cause.__context__
        if isinstance(exc, RuntimeError) and not any("writ" in text or "unexpected pos" in text for text in chain):
            raise  # not a failed write: a bug, with its traceback
        folder = os.path.dirname(os.path.abspath(path))
        needed = sum(t.numel() * t.element_size() for t in _tensors(obj))
        free = shutil.disk_usage(folder).free
        kept = "the last one there is kept; " if os.path.exists(path) else ""
        fail(f"cannot write {os.path.basename(path)} in {folder}: it needs about {needed / 2**20:.0f} MiB and the disk "
             f"has {free / 2**20:.0f} MiB free ({kept}free some space, then resume with --resume)")


def _tensors(obj) -> Iterator[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _tensors(value)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from _tensors(value)


def check_state(state: dict[str, Any]) -> None:
    """Every optimizer in `state` steps only parameters of networks in `state`: else a resume would restore its
    moments onto freshly initialised weights. A one-line error naming what to add."""
    saved = {id(p) for value in state.values() if isinstance(value, torch.nn.Module) for p in value.parameters()}
    for name, value in state.items():
        if isinstance(value, torch.optim.Optimizer):
            if any(id(p) not in saved for group in value.param_groups for p in group["params"]):
                fail(f"the optimizer {name!r} in the checkpoint's state steps parameters of a network that is not in "
                     "it: add that network to the script's `state` dict, so that a resume gets it back")


def save_checkpoint(path: str, state: dict[str, Any], args, iteration: int, global_step: int, rngs: list,
                    recent_returns: list) -> None:
    """`state`: name -> what to save (`state_dict()` or a tensor); `rngs`: the RNG state of every rank."""
    check_state(state)
    atomic_save({
        "format": CHECKPOINT_FORMAT, "env_id": args.env_id, "exp_name": args.exp_name,
        "batch_size": args.batch_size, "world_size": len(rngs), "iteration": iteration, "global_step": global_step,
        "state": {k: v if isinstance(v, torch.Tensor) else v.state_dict() for k, v in state.items()},
        "rng": rngs, "recent_returns": list(recent_returns),
        "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in vars(args).items()},
    }, path)


def save_model(path: str, agent: torch.nn.Module, args) -> None:
    """Weights plus what is needed to rebuild and check the agent (cleanrl_utils/evals/ppo_eval.py reads it)."""
    atomic_save({"model": agent.state_dict(), "env_id": args.env_id, "exp_name": args.exp_name}, path)


def read_checkpoint(path: str, script: str) -> dict:
    """The checkpoint at `path` of a run of `script`; an unreadable or foreign file is a one-line `fail`."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated zip, garbage, or pickled objects that weights_only refuses
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        reason = reason if len(reason) <= 200 else reason[:200].rsplit(" ", 1)[0] + " ..."
        fail(f"cannot read the checkpoint {path} ({reason}); it is corrupt (cut short by a full disk?) or not from "
             "this script: remove it, or move it away to start the run anew")
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT or "state" not in ckpt:
        fail(f"{path} is not a checkpoint of {os.path.basename(script)} (format {CHECKPOINT_FORMAT}); remove it")
    return ckpt


def check_checkpoint(ckpt: dict, path: str, state: dict[str, Any], args) -> dict:
    """`ckpt` (read from `path`) fits this run's env, networks and batch; every problem is a one-line `fail`."""
    if ckpt.get("env_id") != args.env_id:
        fail(f"the checkpoint {path} was made for {ckpt.get('env_id')}, not --env-id {args.env_id}")
    if ckpt.get("batch_size") != args.batch_size:
        fail(f"the checkpoint {path} is of a run with batch {ckpt.get('batch_size')}, this one has {args.batch_size}: "
             "resume with the same --num-envs and --num-steps")
    missing = sorted(set(state) - set(ckpt["state"]))
    if missing:
        fail(f"the checkpoint {path} has no {', '.join(missing)} (it holds {', '.join(ckpt['state'])}): the script's "
             "`state` dict changed since the run started; start a new run with another --run-name")
    for key, value in state.items():
        if not isinstance(value, torch.nn.Module):
            continue
        own, theirs = value.state_dict(), ckpt["state"][key]
        for name in sorted(set(own) | set(theirs)):
            mine = tuple(own[name].shape) if name in own else None
            other = tuple(theirs[name].shape) if name in theirs else None
            if mine != other:
                fail(f"the checkpoint {path} holds another network architecture than this script's {key} for "
                     f"{args.env_id} (parameter {name}: {other} in the checkpoint, {mine} here)")
    return ckpt


def load_state(state: dict[str, Any], ckpt: dict) -> None:
    """Every entry of the script's `state` back from the checkpoint (networks before optimizers)."""
    for key, value in sorted(state.items(), key=lambda kv: isinstance(kv[1], torch.optim.Optimizer)):
        if isinstance(value, torch.Tensor):
            value.copy_(ckpt["state"][key])
        else:
            value.load_state_dict(ckpt["state"][key])


# ---------------------------------------------------------------- the run's folder and settings


def given_flags(argv: Sequence[str], fields: Iterable[str]) -> set[str]:
    """The fields of `Args` whose flag is on the command line (tyro does not say which values were typed):
    `--env-id X`, `--env_id=X`, and `--no-track` / `--track` for booleans."""
    names = {field.replace("_", "-"): field for field in fields}
    given = set()
    for word in argv:
        flag = word[2:].split("=", 1)[0].replace("_", "-") if word.startswith("--") else ""
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
    """The command that continues this run, as the user can type it; under torchrun, a torchrun launch of as many
    ranks (on several nodes, the rendezvous endpoint is the user's own: HOST:PORT)."""
    python = os.path.basename(sys.executable)
    if shutil.which(python) is None or os.path.realpath(shutil.which(python)) != os.path.realpath(sys.executable):
        python = sys.executable
    words = [sys.argv[0], "--resume", "--run-name", run_name]
    if args.runs_dir != "runs":
        words += ["--runs-dir", args.runs_dir]
    command = shlex.join(words)
    if not launched:
        return f"{shlex.quote(python)} {command}"
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    nodes = max(1, int(os.environ.get("WORLD_SIZE", "1")) // per_node)
    if nodes == 1:
        return f"torchrun --standalone --nnodes=1 --nproc_per_node={per_node} {command}"
    return (f"torchrun --nnodes={nodes} --nproc_per_node={per_node} --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT "
            f"{command} (on every node)")


def _read_text(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def resolve_run_name(args, restarted: bool = False) -> str:
    """The run's folder name under `args.runs_dir`. `--run-name` is never second-guessed; otherwise a new run gets
    `{env_id}__{exp_name}__{seed}__{unix time}`, and `--resume` takes the newest folder of this env/exp/seed that has
    a checkpoint (also `{env_id}__{exp_name}__{seed}`, the submission tools' name). A restarted torchrun group
    (`restarted`) takes the newest folder that recorded its TORCHELASTIC_RUN_ID (torchrun keeps it over restarts)."""
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
        with_checkpoint = [p for c in candidates if os.path.exists(p := os.path.join(c, CHECKPOINT_FILE))]
        if with_checkpoint:
            return os.path.basename(os.path.dirname(max(with_checkpoint, key=os.path.getmtime)))
    return f"{prefix}{int(time.time())}"


def restore_settings(args, stored: Optional[dict], given: set[str], run_dir: str, loud: bool,
                     recomputed: tuple[str, ...] = ()) -> None:
    """Continue with the run's stored settings: a flag not given takes the stored value; a given one that differs
    is refused, unless a resume may change it (a note says what changes). `recomputed` fields are not restored (the
    script derives them again, e.g. the envs per rank from the world size)."""
    refused, notes = [], []
    for field in dataclasses.fields(args) if stored else []:
        name = field.name
        if name in RUN_IDENTITY or name not in stored:
            continue
        old, new = stored[name], getattr(args, name)
        if name not in given:
            setattr(args, name, field.default if name in recomputed else old)
        elif old != new and (list(old) if isinstance(old, tuple) else old) != new:
            (notes if name in MAY_CHANGE_ON_RESUME else refused).append(
                f"{flag_text(name, new)} (the run has {flag_text(name, old)})")
    if refused:
        fail(f"{', '.join(refused)}: a resume continues {run_dir} with its own settings; drop these flags, or start a "
             "new run with another --run-name (in a cleanrl_utils.benchmark sweep: another --exp-name; what may "
             "change on a resume is listed under --resume in --help)")
    for note in notes if loud else []:
        print(f"note: resuming with {note}", flush=True)


def lr_note(args, stored: dict, iteration: int, batch_size: int) -> Optional[str]:
    """What a new --total-timesteps does to the learning rate: the annealing now ends at the new total."""
    old_total = stored.get("total_timesteps", args.total_timesteps)
    if not args.anneal_lr or old_total == args.total_timesteps:
        return None
    old_lr, new_lr = ((1.0 - iteration / (total // batch_size)) * args.learning_rate
                      for total in (old_total, args.total_timesteps))
    return (f"note: the learning rate now anneals to 0 at step {args.total_timesteps // batch_size * batch_size}: it "
            f"continues as in a run started with --total-timesteps {args.total_timesteps} ({old_lr:.3g} -> {new_lr:.3g})")


def start_run(args_type, script: str, restarted: bool = False, decides: bool = True,
              recomputed: tuple[str, ...] = (), argv: Optional[list[str]] = None):
    """Parse the command line and find the run: returns (args, run name, checkpoint or None). Creates nothing.

    With a checkpoint in the run's folder, `--resume` / `--resume auto` (or a torchrun restart, `restarted`) continue
    the run with its stored settings; a run that has reached --total-timesteps says so and exits 0. Without one,
    `--resume` is an error and `--resume auto` starts the run. Only the deciding process (rank 0; `decides`) fails on
    a missing checkpoint or prints notes: the others may not see its folder.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    args = tyro.cli(args_type, args=argv)
    check_name("--exp-name", args.exp_name)
    if args.run_name is not None:
        check_name("--run-name", args.run_name)
    run_name = resolve_run_name(args, restarted)
    run_dir = os.path.join(args.runs_dir, run_name)
    path = os.path.join(run_dir, CHECKPOINT_FILE)
    if not os.path.exists(path):
        if decides and args.resume == "yes" and not restarted and args.run_name is None:
            fail(f"--resume found no run to continue: no folder {args.env_id}__{args.exp_name}__{args.seed}"
                 f"[__TIME] with a checkpoint in {args.runs_dir}; name the run with --run-name, or check --runs-dir")
        if decides and args.resume == "yes" and not restarted:
            fail(f"no checkpoint to resume in {run_dir}: check --run-name and --runs-dir, or use --resume auto "
                 "(resume if there is a checkpoint, else start)")
        if decides and (args.resume == "auto" or restarted):
            print(f"note: no checkpoint in {run_dir} yet: starting the run", flush=True)
        return args, run_name, None
    if args.resume == "no" and not restarted:
        fail(f"{run_dir} already has a checkpoint: pass --resume to continue it (`{resume_command(args, run_name)}`), "
             "or another --run-name")
    ckpt = read_checkpoint(path, script)
    given = given_flags(argv, [field.name for field in dataclasses.fields(args_type)])
    restore_settings(args, ckpt.get("settings"), given, run_dir, decides, recomputed)
    if ckpt["iteration"] >= args.total_timesteps // ckpt["batch_size"]:
        if decides:
            print(f"run {run_name} is complete: global step {ckpt['global_step']} of --total-timesteps "
                  f"{args.total_timesteps}; to train it longer, resume it with a larger --total-timesteps (a new run "
                  "needs another --run-name; in a cleanrl_utils.benchmark sweep, another --exp-name)", flush=True)
        sys.exit(0)
    note = lr_note(args, ckpt.get("settings") or {}, ckpt["iteration"], ckpt["batch_size"])
    if note and decides:
        print(note, flush=True)
    return args, run_name, ckpt


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
        if exc.errno == errno.ENOSPC:
            fail(f"the disk of the run directory {path!r} is full: free some space (a checkpoint of the Atari scripts "
                 "takes about 20 MiB), or pass another --runs-dir")
        fail(f"cannot write the run directory {path!r} ({exc.strerror}); pass a writable --runs-dir")
    return path


def open_run(args, run_name: str, state: dict[str, Any], script: str, restart: int = 0,
             ckpt: Optional[dict] = None) -> tuple[str, Optional[dict]]:
    """The run directory (created) and the checkpoint to continue from (`ckpt` from `start_run`, or after a
    torchrun restart the folder's own), checked against the script's `state`; the folder records the torchrun job's
    id for `resolve_run_name` after a restart."""
    run_dir = prepare_run_dir(os.path.join(args.runs_dir, run_name))
    elastic_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if elastic_id and elastic_id != "none":
        with open(os.path.join(run_dir, ELASTIC_ID_FILE), "w") as f:
            f.write(elastic_id)
    path = os.path.join(run_dir, CHECKPOINT_FILE)
    if ckpt is None and restart and os.path.exists(path):
        ckpt = read_checkpoint(path, script)
    return run_dir, None if ckpt is None else check_checkpoint(ckpt, path, state, args)


# ---------------------------------------------------------------- stopping


class StopSignals:
    """SIGTERM or Ctrl-C: finish the iteration, save a checkpoint and exit (`requested` is then the signal number).

    A second Ctrl-C, 2 s or more after the first, stops at once with status 130 (the last checkpoint is kept); the
    2 s are there because torchrun passes the terminal's Ctrl-C on to its workers, and that copy is not a second press.
    """

    def __init__(self) -> None:
        self.requested, self.at = 0, 0.0
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum, frame) -> None:
        if self.requested and signum == signal.SIGINT and time.time() - self.at > 2:
            print("\ninterrupted; the last checkpoint is kept", file=sys.stderr, flush=True)
            raise SystemExit(130)
        if not self.requested:
            self.requested, self.at = signum, time.time()
            print("\nstopping at the end of this iteration (a checkpoint will be saved)", file=sys.stderr, flush=True)


@contextlib.contextmanager
def interrupts_ignored() -> Iterator[None]:
    """Processes started inside (the async env workers) ignore Ctrl-C: a terminal sends it to the whole process
    group, and a worker that dies of it breaks the pipe to this process, which stops them itself when it closes the
    envs. (An ignored SIGINT is inherited over fork and exec, and Python then leaves it ignored.)"""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
