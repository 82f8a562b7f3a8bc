"""A run's checkpoint (the script's `state`, counters, every rank's RNG states and games, settings), written
atomically and checked against the run on a resume; the `--save-model` file; the stop of a diverged run."""

import contextlib
import errno
import io
import math
import os
import random
import shutil
import sys
from typing import Any

import numpy as np
import torch

from cleanrl_utils.validation import computed_fields, fail, first_sentence

CHECKPOINT_FILE = "checkpoint.pt"
CHECKPOINT_FORMAT = 2  # 2: the script's `state` dict; 1 (older versions): the agent and optimizer only


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
    """`state`: name -> a module, optimizer or tensor; `rngs`: every rank's RNG states and games (`rank_games`)."""
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
    ckpt["computed"] = sorted(computed_fields(type(args)))  # settings that are not flags: computed again
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
        own, theirs = ({n: t.shape for n, t in d.items()} for d in (network.state_dict(), ckpt["state"][key]))
        if differ := sorted(n for n in own.keys() | theirs.keys() if own.get(n) != theirs.get(n)):
            fail(f"{it} holds another network architecture than this script's {key} ({differ[0]})")
    return ckpt


def load_state(state: dict[str, Any], ckpt: dict) -> tuple[int, int, list[float]]:
    """The script's `state` back from `ckpt` (networks first); returns the run's iteration, step and recent returns."""
    for key, value in sorted(state.items(), key=lambda kv: isinstance(kv[1], torch.optim.Optimizer)):
        if isinstance(value, torch.Tensor):
            value.copy_(ckpt["state"][key])
        else:
            value.load_state_dict(ckpt["state"][key])
    return ckpt["iteration"], ckpt["global_step"], ckpt["recent_returns"]


def stop_if_diverged(numbers: dict, iteration: int, run_dir: str) -> None:
    """Stop, saving nothing, if the update's losses or gradient norm (`numbers`) are NaN or inf."""
    bad = [name for name, value in numbers.items() if not math.isfinite(value)]
    if not bad:
        return
    if os.environ.get("RANK", "0") != "0":  # every rank of a job stops here; rank 0 says why
        raise SystemExit(1)
    path = os.path.join(run_dir, CHECKPOINT_FILE)
    kept = "the run has no checkpoint yet"
    if os.path.exists(path):
        kept = f"its last checkpoint (global step {torch.load(path, weights_only=True)['global_step']}) is kept"
    fail(
        f"the run diverged at iteration {iteration}: {', '.join(bad)} became non-finite, so it stopped and saved "
        f"nothing from it; {kept}; start a new run with a smaller --learning-rate or --max-grad-norm"
    )
