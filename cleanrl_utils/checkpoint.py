"""Checkpoint and resume for the Atari scripts, and a stop on SIGTERM/Ctrl-C that ends at a checkpoint.

A checkpoint (`{runs_dir}/{run_name}/checkpoint.pt`) holds the model, the optimizer, the completed iterations, the
global step (= TensorBoard step), the recent returns and the RNG states of every rank, in types that
`torch.load(weights_only=True)` accepts. It is written to a temporary file and renamed over the old one, so a
crash or a full disk never leaves a half-written checkpoint. The games' emulator states are not in it: a resumed run
starts new games (the scripts seed them from the iteration, so a resume is deterministic).

The checkpoint also stores the run's settings (every flag): `start_run` continues a run with them, so that
`--resume --run-name NAME` is the whole command; a flag typed again with another value is refused, except those in
`MAY_CHANGE_ON_RESUME` (`--total-timesteps` extends a run; logging, thread and device flags), which take effect
with a note.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import signal
import sys
import time
from typing import Iterator, Optional

import numpy as np
import torch
import torch.nn as nn
import tyro

from cleanrl_utils.runs import CHECKPOINT_FILE, MAY_CHANGE_ON_RESUME, RUN_IDENTITY, fail, flag_text, given_flags
from cleanrl_utils.runs import prepare_run_dir, record_elastic_id, resolve_run_name, resume_command

CHECKPOINT_FORMAT = 1


def rng_state(device: torch.device) -> dict:
    """This process's RNG states (python, numpy, torch, cuda)."""
    np_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]),
        "torch": torch.get_rng_state(),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    random.setstate((state["python"][0], tuple(state["python"][1]), state["python"][2]))
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def _atomic_save(obj: dict, path: str) -> None:
    tmp = path + ".tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def save_checkpoint(path: str, agent, optimizer, args, iteration: int, global_step: int, rngs, recent_returns):
    """`rngs`: the RNG state of every rank (one for a single process)."""
    _atomic_save(
        {
            "format": CHECKPOINT_FORMAT,
            "env_id": args.env_id,
            "exp_name": args.exp_name,
            "batch_size": args.batch_size,
            "num_iterations": args.num_iterations,
            "world_size": len(rngs),
            "iteration": iteration,
            "global_step": global_step,
            "log_step": global_step,
            "model": agent.state_dict(),
            "optimizer": optimizer.state_dict(),
            "rng": rngs,
            "recent_returns": list(recent_returns),
            "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in vars(args).items()},
        },
        path,
    )


def save_model(path: str, agent: nn.Module, args) -> None:
    """Weights plus what is needed to rebuild and check the agent (cleanrl_utils/evals/ppo_eval.py reads it)."""
    _atomic_save({"model": agent.state_dict(), "env_id": args.env_id, "exp_name": args.exp_name}, path)


def read_checkpoint(path: str, script: str) -> dict:
    """The checkpoint at `path` of a run of `script`; an unreadable or foreign file is a one-line `fail`."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated zip, garbage, or pickled objects that weights_only refuses
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        fail(f"cannot read the checkpoint {path} ({reason}); it is corrupt or not from this script: remove it")
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT or "model" not in ckpt:
        fail(f"{path} is not a checkpoint of {os.path.basename(script)} (format {CHECKPOINT_FORMAT}); remove it")
    return ckpt


def check_checkpoint(ckpt: dict, path: str, agent: nn.Module, args) -> dict:
    """`ckpt` (read from `path`) fits this run's env, network and batch; every problem is a one-line `fail`."""
    if ckpt.get("env_id") != args.env_id:
        fail(f"the checkpoint {path} was made for {ckpt.get('env_id')}, not --env-id {args.env_id}")
    own, theirs = agent.state_dict(), ckpt["model"]
    if not isinstance(theirs, dict):
        fail(f"the checkpoint {path} has no model state dict; remove it")
    for name in sorted(set(own) | set(theirs)):
        mine = tuple(own[name].shape) if name in own else None
        other = tuple(theirs[name].shape) if name in theirs and isinstance(theirs[name], torch.Tensor) else None
        if mine != other:
            fail(
                f"the checkpoint {path} holds another network architecture than this script's Agent for "
                f"{args.env_id} (parameter {name}: {other} in the checkpoint, {mine} here)"
            )
    if ckpt.get("batch_size") != args.batch_size:
        fail(
            f"the checkpoint {path} is of a run with batch {ckpt.get('batch_size')}, this one has {args.batch_size}: "
            "resume with the same --num-envs and --num-steps"
        )
    return ckpt


def load_checkpoint(path: str, agent: nn.Module, args, script: str) -> dict:
    """Read and check the checkpoint of a run of `script` (its path or name); every problem is a one-line `fail`."""
    return check_checkpoint(read_checkpoint(path, script), path, agent, args)


def restore_settings(args, stored: Optional[dict], given: set[str], run_dir: str, loud: bool,
                     recomputed: tuple[str, ...] = ()) -> None:
    """Continue with the run's stored settings: a flag not given takes the stored value; a given one that differs
    is refused, unless a resume may change it (`MAY_CHANGE_ON_RESUME`: a note says what changes). `recomputed`
    fields are not restored (the script derives them again, e.g. the envs per rank from the world size)."""
    if not stored:  # a checkpoint without settings: the flags as given (the batch is checked later)
        return
    refused, notes = [], []
    for field in dataclasses.fields(args):
        name = field.name
        if name in RUN_IDENTITY or name not in stored:
            continue
        old, new = stored[name], getattr(args, name)
        if name not in given:
            setattr(args, name, field.default if name in recomputed else old)
        elif old != new and (list(old) if isinstance(old, tuple) else old) != new:
            (notes if name in MAY_CHANGE_ON_RESUME else refused).append(
                f"{flag_text(name, new)} (the run has {flag_text(name, old)})"
            )
    if refused:
        fail(
            f"{', '.join(refused)}: a resume continues {run_dir} with its own settings; drop these flags, or start a "
            "new run with another --run-name (in a cleanrl_utils.benchmark sweep: another --exp-name; what may "
            "change on a resume is listed under --resume in --help)"
        )
    if loud:
        for note in notes:
            print(f"note: resuming with {note}", flush=True)


def lr_note(args, stored: dict, iteration: int, batch_size: int) -> Optional[str]:
    """What a new --total-timesteps does to the learning rate: the annealing now ends at the new total, so the rate
    continues as in a run started with it (a step at the resume)."""
    old_total = stored.get("total_timesteps", args.total_timesteps)
    if not args.anneal_lr or old_total == args.total_timesteps:
        return None
    old_lr, new_lr = (
        (1.0 - iteration / (total // batch_size)) * args.learning_rate for total in (old_total, args.total_timesteps)
    )
    return (
        f"note: the learning rate now anneals to 0 at step {args.total_timesteps // batch_size * batch_size}: it "
        f"continues as in a run started with --total-timesteps {args.total_timesteps} ({old_lr:.3g} -> {new_lr:.3g})"
    )


def start_run(args_type, script: str, restarted: bool = False, decides: bool = True,
              recomputed: tuple[str, ...] = (), argv: Optional[list[str]] = None):
    """Parse the command line and find the run: returns (args, run name, checkpoint or None). Creates nothing.

    With a checkpoint in the run's folder, `--resume` / `--resume auto` (or a torchrun restart, `restarted`)
    continue the run with its stored settings (`restore_settings`); a run that has reached --total-timesteps
    says so and exits 0. Without one, `--resume` is an error and `--resume auto` starts the run. Only the deciding
    process (rank 0; `decides`) fails on a missing checkpoint or prints notes: the others may not see its folder.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    args = tyro.cli(args_type, args=argv)
    given = given_flags(argv, [field.name for field in dataclasses.fields(args_type)])
    run_name = resolve_run_name(args, restarted)
    run_dir = os.path.join(args.runs_dir, run_name)
    path = os.path.join(run_dir, CHECKPOINT_FILE)
    if not os.path.exists(path):
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
    restore_settings(args, ckpt.get("settings"), given, run_dir, decides, recomputed)
    iterations = args.total_timesteps // ckpt["batch_size"]
    if ckpt["iteration"] >= iterations:
        if decides:
            print(f"run {run_name} is complete: global step {ckpt['global_step']} of --total-timesteps "
                  f"{args.total_timesteps}; to train it longer, resume it with a larger --total-timesteps (a new run "
                  "needs another --run-name; in a cleanrl_utils.benchmark sweep, another --exp-name)", flush=True)
        sys.exit(0)
    note = lr_note(args, ckpt.get("settings") or {}, ckpt["iteration"], ckpt["batch_size"])
    if note and decides:
        print(note, flush=True)
    return args, run_name, ckpt


def open_run(args, run_name: str, agent: nn.Module, script: str, restart: int = 0,
             ckpt: Optional[dict] = None) -> tuple[str, Optional[dict]]:
    """The run directory (created) and the checkpoint to continue from (`ckpt` from `start_run`, or after a
    torchrun restart the folder's own), checked against the agent; the run directory records the job's id for
    `resolve_run_name` after a restart."""
    run_dir = prepare_run_dir(os.path.join(args.runs_dir, run_name))
    record_elastic_id(run_dir)
    path = os.path.join(run_dir, CHECKPOINT_FILE)
    if ckpt is None and restart and os.path.exists(path):
        ckpt = read_checkpoint(path, script)
    return run_dir, None if ckpt is None else check_checkpoint(ckpt, path, agent, args)


def restore_rng(ckpt: dict, rank: int, world_size: int, seed: int, device: torch.device) -> None:
    """This rank's RNG states from the checkpoint; with another world size, new deterministic streams."""
    if len(ckpt["rng"]) == world_size:
        set_rng_state(ckpt["rng"][rank], device)
    else:
        random.seed(seed + rank + 1000 * ckpt["iteration"])
        np.random.seed(seed + rank + 1000 * ckpt["iteration"])
        torch.manual_seed(seed + rank + 1000 * ckpt["iteration"])


class StopSignals:
    """SIGTERM or Ctrl-C: finish the iteration, save a checkpoint and exit (`requested` is then the signal number).

    A second Ctrl-C, 2 s or more after the first, stops at once (KeyboardInterrupt); the 2 s are there because
    torchrun passes the terminal's Ctrl-C on to its workers, and that copy is not a second press.
    """

    def __init__(self) -> None:
        self.requested, self.at = 0, 0.0
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum, frame) -> None:
        if self.requested and signum == signal.SIGINT and time.time() - self.at > 2:
            raise KeyboardInterrupt
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
