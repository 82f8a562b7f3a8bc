"""A data-parallel run over ranks and torchrun restarts (resume.py's steps for a job), and how a rank ends: closing,
leaving the group, exiting."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import io
import os
import pathlib
import random
import shlex
import sys
import traceback
from typing import Any, Callable, NoReturn, Optional

import numpy as np
import torch
import torch.distributed as dist

from cleanrl_utils import resume
from cleanrl_utils.checkpoint import CHECKPOINT_FILE, restore_rng
from cleanrl_utils.distributed import DistInfo, hush_until_grouped, restart_count
from cleanrl_utils.signals import full_disk, full_disk_line

ELASTIC_ID_FILE = "elastic_run_id"  # in the run's folder: the torchrun job running it (the same over restarts)


def start_rank_run(args_type, script: str, info: DistInfo):
    """`resume.start_run` on one rank of a job, rank 0 deciding (and alone printing; a node's later ranks say nothing
    until the group forms); after a torchrun restart every rank resumes as `--resume auto --run-name RUN` would."""
    hush_until_grouped(info)
    argv = sys.argv[1:]
    line = resume.parse_command_line(args_type, argv)  # the command line's own settings
    restarted, run = restart_count() > 0, line
    if restarted or (info.rank != 0 and line.resume == "yes"):
        run = dataclasses.replace(line, resume="auto", run_name=restarted_run_name(line, restarted))
    with contextlib.redirect_stdout(sys.stdout if info.rank == 0 else io.StringIO()):
        args, run_name, ckpt = resume.start_run(args_type, script, argv, line=run)
    # the launch's own --run-name and --resume (not those set above), and its envs per rank (None: derived)
    args.run_name, args.resume, args.local_num_envs = line.run_name, line.resume, line.local_num_envs
    return args, run_name, ckpt


def restarted_run_name(args, restarted: bool) -> str:
    """`resume.resolve_run_name`, but after a torchrun restart first the newest run folder that recorded this job's
    TORCHELASTIC_RUN_ID (a default name's start time cannot be recomputed)."""
    elastic_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if restarted and elastic_id and not args.run_name:
        marked = [c for c in resume.run_folders(args) if os.path.exists(os.path.join(c, ELASTIC_ID_FILE))]
        mine = [c for c in marked if pathlib.Path(c, ELASTIC_ID_FILE).read_text().strip() == elastic_id]
        if mine:
            return os.path.basename(max(mine, key=os.path.getmtime))
    return resume.resolve_run_name(args)


def open_job_run(args, run_name: str, state: dict, script: str, restart: int, ckpt: Optional[dict]):
    """`resume.open_run` on rank 0, recording the torchrun job's id in the folder; after a restart that another node
    counted, the checkpoint is the folder's own."""
    run_dir, ckpt = resume.open_run(args, run_name, state, script, ckpt, renamed=restart > restart_count())
    elastic_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if elastic_id and elastic_id != "none":  # "none": torchrun's default rendezvous id, the same for every job
        pathlib.Path(run_dir, ELASTIC_ID_FILE).write_text(elastic_id)
    return run_dir, ckpt


def job_resume_command(args, run_name: str, info: DistInfo) -> str:
    """`resume.resume_command`, as a torchrun launch of as many ranks for a launched job (several nodes: HOST:PORT)."""
    command = resume.resume_command(args, run_name)
    if not info.launched:
        return command
    command = shlex.join(shlex.split(command)[1:])  # without the interpreter
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    nodes = max(1, int(os.environ.get("WORLD_SIZE", "1")) // per_node)
    if nodes == 1:
        return f"torchrun --standalone --nnodes=1 --nproc_per_node={per_node} {command}"
    return (
        f"torchrun --nnodes={nodes} --nproc_per_node={per_node} --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT "
        f"{command} (on every node)"
    )


def restore_rank_rng(ckpt: dict, info: DistInfo, seed: int, device: torch.device) -> None:
    """`resume.restore_rng` for this rank; with another world size than the run's, new deterministic streams."""
    if len(ckpt["rng"]) == info.world_size:
        restore_rng(ckpt, device, info.rank)
    else:
        for seeder in (random.seed, np.random.seed, torch.manual_seed):
            seeder(seed + info.rank + 1000 * ckpt["iteration"])


def rank_lifetime(info: DistInfo, close: list[Callable[[], Any]], args, run_name: str) -> list[Callable[[], Any]]:
    """Returns `close` (the script adds envs, writer): however the rank ends they are closed, last first, and the group
    left; an exception ends it at once, a lost peer or a full disk as one line naming the command that resumes."""
    hint, checkpoint = job_resume_command(args, run_name, info), os.path.join(args.runs_dir, run_name, CHECKPOINT_FILE)

    def clean_up(failing: bool = False) -> None:
        while close:
            try:
                close.pop()()
            except OSError as exc:  # on a full disk TensorBoard's writer raises its thread's error again at close
                if not failing or full_disk(exc) is None:
                    raise
        if dist.is_initialized():
            dist.destroy_process_group()

    def on_exception(kind, exc, tb) -> None:
        if isinstance(exc, KeyboardInterrupt):  # before the script's own Ctrl-C handling is in place
            exc = SystemExit(f"\nrank {info.rank}: interrupted; the last checkpoint is kept")
        elif isinstance(exc, dist.DistError) or (isinstance(exc, RuntimeError) and "gloo" in str(exc).lower()):
            exc = SystemExit(
                f"error: rank {info.rank}: lost contact with the other ranks "
                f"({str(exc).strip().splitlines()[0][:300]}); a rank died or --dist-timeout passed; "
                f"resume with: {hint}"
            )
        elif (full := full_disk(exc)) is not None:
            exc = SystemExit(full_disk_line(full, hint, checkpoint))
        clean_up(failing=True)
        leave(130 if "interrupted" in str(getattr(exc, "code", "")) else 1, exc)

    sys.excepthook = on_exception  # init_distributed puts it back after torch's own
    atexit.register(clean_up)
    return close


def leave(exit_code: int, exc: Optional[BaseException]) -> NoReturn:
    """Exit at once (`os._exit`), `exc` reported as Python would: in the interpreter's teardown a gloo thread still
    finishing a broken collective aborts the process with SIGABRT instead of its exit code (docs/multigpu.md)."""
    if isinstance(exc, SystemExit):
        if exc.code is None or isinstance(exc.code, int):
            exit_code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
    elif exc is not None:
        traceback.print_exception(exc)
        exit_code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)


def end_rank(exit_code: int) -> NoReturn:
    """A rank's normal end: in a group, the exit handlers now, then `leave` (a teardown can abort here too)."""
    if not dist.is_initialized():
        sys.exit(exit_code)
    atexit._run_exitfuncs()
    leave(exit_code, None)
