"""The data-parallel core of cleanrl/ppo_atari_multigpu.py: where a process sits in the job, its sizes and device,
joining the process group, and the collectives (rank 0's decisions, gathers, means); restarts and exits: elastic.py."""

from __future__ import annotations

import functools
import io
import os
import sys
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from cleanrl_utils.validation import check_batch, counted, fail

DEFAULT_LOCAL_NUM_ENVS = 8


@dataclass
class DistInfo:
    """Where this process sits in the job, read from the launcher's environment (torchrun, or mpirun)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    launched: bool = False  # started by torchrun or mpirun (a process group is formed, even of size 1)
    launcher: str = ""  # "torchrun" or "mpirun" (also MPICH's / Intel MPI's launchers); "" when not launched


def read_dist_env() -> DistInfo:
    """Where this process sits in the job, as torchrun, Open MPI and MPICH / Intel MPI name it."""
    env = os.environ
    for launcher, (rank, size, local_rank, local_size) in (
        ("torchrun", ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")),
        ("mpirun", ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                    "OMPI_COMM_WORLD_LOCAL_SIZE")),
        ("mpirun", ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")),  # MPICH / Intel MPI
    ):  # fmt: skip
        if size in env:
            return DistInfo(
                rank=int(env.get(rank, "0")),
                world_size=int(env[size]),
                local_rank=int(env.get(local_rank, "0")),
                local_world_size=int(env.get(local_size, env[size])),
                launched=True,
                launcher=launcher,
            )
    return DistInfo()


HUSHED = io.StringIO()  # what a rank after its node's first prints before its group forms (`hush_until_grouped`)


def hush_until_grouped(info: DistInfo) -> None:
    """A rank after its node's first prints nothing until its group forms (`init_distributed`): the node's first rank
    finds the same errors (the same arguments on the same machine) and prints them, one line per node, not per rank."""
    if info.local_rank != 0:
        sys.stdout = sys.stderr = HUSHED
        sys.excepthook = functools.partial(traceback.print_exception, file=sys.__stderr__)  # a crash still shows


def resolve_sizes(args, world_size: int) -> None:
    """The env counts, batch sizes and iterations of a data-parallel run: each rank steps `local_num_envs` envs, its
    batch is `local_batch_size`, all ranks' `batch_size`."""
    if args.local_num_envs is None:
        if args.num_envs is None:
            args.local_num_envs = DEFAULT_LOCAL_NUM_ENVS
        elif args.num_envs % world_size != 0:
            fail(
                f"--num-envs {args.num_envs} is not divisible by the world size {world_size}: give a multiple of "
                f"{world_size}, or the per-rank count with --local-num-envs"
            )
        else:
            args.local_num_envs = args.num_envs // world_size
    elif args.num_envs is not None and args.num_envs != args.local_num_envs * world_size:
        fail(
            f"--num-envs {args.num_envs} and --local-num-envs {args.local_num_envs} disagree: with world size "
            f"{world_size}, --num-envs must be {args.local_num_envs * world_size} (or give only one of them)"
        )
    check_batch(args.local_num_envs, args.num_steps, args.num_minibatches, args.total_timesteps, world_size)
    args.world_size = world_size
    args.num_envs = args.local_num_envs * world_size
    args.local_batch_size = args.local_num_envs * args.num_steps
    args.batch_size = args.local_batch_size * world_size
    args.local_minibatch_size = args.local_batch_size // args.num_minibatches
    args.minibatch_size = args.local_minibatch_size * world_size
    args.num_iterations = args.total_timesteps // args.batch_size


def resolve_device(args, info: DistInfo) -> tuple[torch.device, str]:
    """This rank's device and the backend, or one error line on an impossible choice; makes no device current. Local
    ranks that share a GPU (nccl refuses that) get gloo; every node should have as many GPUs and ranks."""
    has_cuda = args.cuda and torch.cuda.is_available()
    backend = args.backend or ("nccl" if has_cuda else "gloo")
    if backend == "nccl" and not has_cuda:
        why = "--no-cuda was given" if not args.cuda else "torch sees no CUDA device on this machine"
        fail(f"--backend nccl needs a CUDA device on every rank ({why}); use --backend gloo")
    if backend == "mpi" and not dist.is_mpi_available():
        fail("--backend mpi needs a PyTorch built with MPI (this one is not); use --backend gloo or nccl")
    if args.device_ids is not None:
        if len(args.device_ids) != info.local_world_size:
            fail(
                f"--device-ids has {counted(len(args.device_ids), 'entry', 'entries')} but this node runs "
                f"{counted(info.local_world_size, 'rank')}: "
                "give one CUDA device id per local rank (e.g. `--device-ids 0 0 1 1` for 4 ranks on 2 GPUs)"
            )
        if not has_cuda:
            fail("--device-ids places ranks on CUDA devices, but CUDA is off or there is no CUDA device here")
        if bad := [d for d in args.device_ids if not 0 <= d < torch.cuda.device_count()]:
            fail(
                f"--device-ids {bad} do not exist: this machine has {counted(torch.cuda.device_count(), 'CUDA device')}"
            )
    check_rendezvous(backend, info)
    if not has_cuda:
        return torch.device("cpu"), backend
    count = torch.cuda.device_count()
    ids = args.device_ids or [local_rank % count for local_rank in range(info.local_world_size)]
    shared = sorted({index for index in ids if ids.count(index) > 1})
    if shared and backend == "nccl":
        ranks = [local_rank for local_rank, index in enumerate(ids) if index == shared[0]]
        where = f"local ranks {', '.join(map(str, ranks))} share cuda:{shared[0]}"
        if args.backend == "nccl":
            fail(
                f"--backend nccl cannot place two ranks on one GPU, and {where} ({counted(count, 'CUDA device')} here): give "
                "each rank its own GPU (fewer ranks per node, or other --device-ids), or leave out --backend to use "
                "gloo"
            )
        backend = "gloo"
        if info.local_rank == 0:
            print(f"note: {where}, which nccl does not allow: using gloo (all-reduce through host memory)", flush=True)
    return torch.device("cuda", ids[info.local_rank]), backend


def check_rendezvous(backend: str, info: DistInfo) -> None:
    """Under mpirun, gloo and nccl meet at MASTER_ADDR:MASTER_PORT, which torchrun sets and mpirun does not."""
    if info.launcher != "mpirun" or backend == "mpi":
        return
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
    if missing:
        fail(
            f"under mpirun the {backend} backend meets at MASTER_ADDR:MASTER_PORT, and {' and '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not set: e.g. `mpirun -x MASTER_ADDR=<first host> -x "
            "MASTER_PORT=29500 ...`, or --backend mpi"
        )


def restart_count() -> int:
    """torchrun's restart attempt as this node's agent counts it (a node whose own workers were healthy says 0)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def init_distributed(backend: str, info: DistInfo, timeout: timedelta, device: torch.device) -> None:
    """Make `device` current (after the env workers started: they hold no CUDA context) and, on a launched rank,
    join the process group (one error line if it does not form); failed nccl collectives raise in Python as gloo's do.
    Each torchrun restart attempt gets keys of its own in the agent's store, which keeps a dead attempt's."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not info.launched:  # a single process: no group
        return
    if sys.stderr is HUSHED:  # it speaks again: from here on an error is its own (a lost peer, a failed save)
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    # whole lines from every rank on their shared stdout/stderr (unbuffered output writes a print's newline apart)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(line_buffering=True, write_through=False)
    if backend == "nccl" and not any(name in os.environ for name in NCCL_ERROR_VARIABLES):
        os.environ["TORCH_NCCL_BLOCKING_WAIT"] = "1"
    hook = sys.excepthook  # init_process_group installs an exception hook of its own: this one is put back
    try:
        if backend == "mpi":  # MPI knows the ranks
            dist.init_process_group(backend, timeout=timeout)
            return
        where = {"rank": info.rank, "world_size": info.world_size, "timeout": timeout}
        if backend == "nccl":
            where["device_id"] = device
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":  # mpirun, or torchrun with its own store
            dist.init_process_group(backend, **where)
            return
        addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        store = dist.TCPStore(addr, port, is_master=False, timeout=timeout)
        store = dist.PrefixStore(f"ppo_atari_multigpu/attempt{restart_count()}/", store)
        dist.init_process_group(backend, store=store, **where)
    except Exception as exc:  # every rank's own error
        why = str(exc).strip().splitlines()[0][:300]
        raise SystemExit(f"error: rank {info.rank}: the process group did not form ({why})") from None
    finally:
        sys.excepthook = hook


# how ProcessGroupNCCL handles a failed collective: set by the user, they are left as they are
NCCL_ERROR_VARIABLES = tuple(
    "TORCH_NCCL_BLOCKING_WAIT NCCL_BLOCKING_WAIT TORCH_NCCL_ASYNC_ERROR_HANDLING NCCL_ASYNC_ERROR_HANDLING".split()
)


def print_launch_notes(info: DistInfo) -> None:
    """Rank 0's hints: a multi-node job that may restart through torchrun's shared store, or a single process."""
    multi_node = info.world_size != info.local_world_size
    restarts = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")) > 0
    if multi_node and restarts and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        print("note: for restarts across nodes, launch torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1", flush=True)
    if not info.launched:
        print(
            "note: single process; to train data-parallel on N processes (GPUs), launch with "
            "`torchrun --standalone --nnodes=1 --nproc_per_node=N cleanrl/ppo_atari_multigpu.py ...`",
            flush=True,
        )


def gather_to_all(obj, world_size: int) -> list:
    """Every rank's `obj`, on every rank."""
    if world_size == 1:
        return [obj]
    out = [None] * world_size
    dist.all_gather_object(out, obj)
    return out


def decided_on_rank0(decide: Callable[[], Any], info: DistInfo) -> Any:
    """Run `decide` on rank 0 and give its result to every rank; if it `fail`s, every rank stops (rank 0 alone
    printing the error) instead of some ranks waiting for the others forever."""
    outcome = None
    if info.rank == 0:
        try:
            outcome = {"ok": True, "value": decide()}
        except SystemExit as exc:
            outcome = {"ok": False, "error": str(exc.code)}
    if info.world_size > 1:
        box = [outcome]
        dist.broadcast_object_list(box, src=0)
        outcome = box[0]
    if not outcome["ok"]:
        raise SystemExit(outcome["error"] if info.rank == 0 else 1)
    return outcome["value"]


def mean_over_ranks(x: torch.Tensor, world_size: int) -> torch.Tensor:
    """The mean of `x` over the ranks (an all-reduce)."""
    if world_size == 1:
        return x
    total = x.detach().clone()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total / world_size
