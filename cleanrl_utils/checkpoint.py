"""Checkpoint and resume for the Atari scripts, and a stop on SIGTERM/Ctrl-C that ends at a checkpoint.

A checkpoint (`{runs_dir}/{run_name}/checkpoint.pt`) holds the model, the optimizer, the completed iterations, the
global step (= TensorBoard step), the recent returns and the RNG states of every rank, in types that
`torch.load(weights_only=True)` accepts. It is written to a temporary file and renamed over the old one, so a
crash or a full disk never leaves a half-written checkpoint. The games' emulator states are not in it: a resumed run
starts new games (the scripts seed them from the iteration, so a resume is deterministic).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sys
import time
from typing import Iterator, Optional

import numpy as np
import torch
import torch.nn as nn

from cleanrl_utils.runs import CHECKPOINT_FILE, fail, prepare_run_dir, record_elastic_id

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
        },
        path,
    )


def save_model(path: str, agent: nn.Module, args) -> None:
    """Weights plus what is needed to rebuild and check the agent (cleanrl_utils/evals/ppo_eval.py reads it)."""
    _atomic_save({"model": agent.state_dict(), "env_id": args.env_id, "exp_name": args.exp_name}, path)


def load_checkpoint(path: str, agent: nn.Module, args, script: str) -> dict:
    """Read and check the checkpoint of a run of `script` (its path or name); every problem is a one-line `fail`."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated zip, garbage, or pickled objects that weights_only refuses
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        fail(f"cannot read the checkpoint {path} ({reason}); it is corrupt or not from this script: remove it")
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT or "model" not in ckpt:
        fail(f"{path} is not a checkpoint of {os.path.basename(script)} (format {CHECKPOINT_FORMAT}); remove it")
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
    if (ckpt.get("batch_size"), ckpt.get("num_iterations")) != (args.batch_size, args.num_iterations):
        fail(
            f"the checkpoint {path} is of a run with batch {ckpt.get('batch_size')} x {ckpt.get('num_iterations')} "
            f"iterations, this one has {args.batch_size} x {args.num_iterations}: resume with the same --num-envs, "
            "--num-steps and --total-timesteps"
        )
    return ckpt


def find_checkpoint(run_dir: str, agent: nn.Module, args, script: str, restart: int = 0) -> Optional[dict]:
    """The checkpoint to continue from: that of `run_dir` with --resume (or after a torchrun restart), else None.

    A run folder that has a checkpoint is never overwritten without --resume; without a checkpoint the run starts
    over (ppo_atari.py has refused a --resume without one earlier, in `prepare_run_dir`).
    """
    path = os.path.join(run_dir, CHECKPOINT_FILE)
    if os.path.exists(path):
        if not (args.resume or restart):
            fail(f"{run_dir} already has a checkpoint: pass --resume to continue that run, or another --run-name")
        return load_checkpoint(path, agent, args, script)
    if args.resume or restart:
        print(f"note: no checkpoint in {run_dir}: starting from scratch", file=sys.stderr, flush=True)
    return None


def open_run(args, run_name: str, agent: nn.Module, script: str, restart: int = 0) -> tuple[str, Optional[dict]]:
    """The run directory (created) and the checkpoint to continue from, if any, of a (possibly restarted) torchrun
    job; the run directory records the job's id for `resolve_run_name` after a restart."""
    run_dir = prepare_run_dir(os.path.join(args.runs_dir, run_name))
    record_elastic_id(run_dir)
    return run_dir, find_checkpoint(run_dir, agent, args, script, restart)


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
