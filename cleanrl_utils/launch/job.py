"""What a submission runs, wherever it goes: its command line (`Args`), the runs (one per seed) and their command,
and the resources of a node."""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

from cleanrl_utils.launch.nodes import NodeVars, is_python, node_command
from cleanrl_utils.launch.runs import SWEEP_FLAGS, check_command, check_positive, check_script_flags, flag_value
from cleanrl_utils.launch.runs import sweep_run_of
from cleanrl_utils.script_shape import read_script
from cleanrl_utils.validation import fail

# the instance types multi-node jobs commonly use: vCPUs (from the size's name), memory (GiB per vCPU), GPUs
C5_SIZES = ["large", "xlarge", "2xlarge", "4xlarge", "9xlarge", "12xlarge", "18xlarge", "24xlarge"]
M5_SIZES = ["large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge"]
G5_SIZES = ["xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge"]
G5_GPUS = {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8}  # the others: 1


def vcpus_of(size: str) -> int:
    """`large`: 2, `xlarge`: 4, `Nxlarge`: 4N."""
    return 2 if size == "large" else 4 * int(size.removesuffix("xlarge") or 1)


INSTANCE_TYPES: dict[str, tuple[int, int, int]] = {
    **{f"c5.{size}": (vcpus_of(size), vcpus_of(size) * 2, 0) for size in C5_SIZES},
    **{f"m5.{size}": (vcpus_of(size), vcpus_of(size) * 4, 0) for size in M5_SIZES},
    **{f"g5.{size}": (vcpus_of(size), vcpus_of(size) * 4, G5_GPUS.get(size, 1)) for size in G5_SIZES},
    "p3.2xlarge": (8, 61, 1),
    "p3.8xlarge": (32, 244, 4),
    "p3.16xlarge": (64, 488, 8),
    "p3dn.24xlarge": (96, 768, 8),
    "p4d.24xlarge": (96, 1152, 8),
}
MEMORY_SHARE = 0.9  # of an instance's memory, for a job: the container agent and the OS keep the rest
WANDB_ENV = "WANDB_API_KEY"  # the W&B key's variable inside the job
MASK = "***"
NO_RETRY_EXIT_CODES = (1, 2)  # the scripts' own failures (`fail`, a usage error): a retry would fail the same way


@dataclass
class Args:
    command: str
    """the run: `python SCRIPT ARGS`, e.g. `python cleanrl/ppo_atari_multigpu.py --env-id PongNoFrameskip-v4`"""
    num_seeds: int = 1
    """the number of runs (jobs), one per seed"""
    start_seed: int = 1
    """the first seed; the seeds are start_seed, start_seed+1, ..."""
    num_nodes: int = 1
    """nodes per run; more than one makes a multi-node torchrun job"""
    instance_type: str = "c5.2xlarge"
    """the node type; sets the vCPUs, memory and GPUs per node (c5, m5, g5, p3, p4d sizes are known)"""
    vcpus: Optional[int] = None
    """vCPUs per node (unset: from --instance-type)"""
    memory: Optional[int] = None
    """memory per node in MiB (unset: 90% of the instance type's memory)"""
    gpus: Optional[int] = None
    """GPUs per node (unset: from --instance-type)"""
    nproc_per_node: Optional[int] = None
    """training processes per node (unset: the GPUs per node, 1 without GPUs)"""
    launcher: Literal["auto", "torchrun", "python"] = "auto"
    """how a node starts the script: torchrun, python, or auto (torchrun for a torch.distributed script, one that
    starts with `start_rank_run` as cleanrl/ppo_atari_multigpu.py and its copies do)"""
    provider: Literal["aws", "local", "slurm"] = "aws"
    """where the runs go: AWS Batch, N simulated nodes on this machine, or a Slurm cluster"""
    dry_run: bool = False
    """print what would be sent (AWS requests, local node commands, the sbatch script) and do nothing"""
    rdzv_port: int = 29500
    """the c10d rendezvous port on the main node (AWS); the local provider picks a free port, Slurm derives one"""
    wandb_key_env: Optional[str] = None
    """the name of your environment variable holding the W&B key; the job gets its value as WANDB_API_KEY"""
    job_definition: str = "cleanrl"
    """[aws] the job definition name (each submission registers a new revision)"""
    job_queue: str = "cleanrl"
    """[aws] the job queue"""
    docker_image: str = "cleanrl-throughput:latest"
    """[aws] the container image (build and push the repo's Dockerfile)"""
    num_retries: int = 3
    """how often a failed run is retried, resuming from its last checkpoint (AWS Batch: 0 to 9; local too): a lost
    host or node, a kill or a crash is retried, the script's own errors (exit codes 1 and 2: bad input) are not"""
    timeout_seconds: int = 16 * 3600
    """time limit of one run (AWS attempt duration; Slurm --time)"""
    region: Optional[str] = None
    """[aws] the region (unset: the AWS configuration's)"""
    wandb_secret_arn: Optional[str] = None
    """[aws] a Secrets Manager / SSM parameter ARN holding the W&B key, injected as WANDB_API_KEY by AWS Batch"""
    execution_role_arn: Optional[str] = None
    """[aws] the execution role that may read --wandb-secret-arn"""
    efs_file_system_id: Optional[str] = None
    """[aws] an EFS file system (fs-...) mounted at --efs-runs-dir in every job: the run folders (TensorBoard logs,
    checkpoints, models) outlive the container, so a retry resumes (without it they are lost when the job ends)"""
    efs_access_point_id: Optional[str] = None
    """[aws] an EFS access point (fsap-...) to mount through (its root directory and POSIX user apply; IAM
    authorization with the job role)"""
    efs_root_directory: str = "/"
    """[aws] the folder of the file system to mount (without an access point)"""
    efs_runs_dir: str = "/mnt/runs"
    """[aws] where the EFS volume is mounted in the container; the runs get `--runs-dir` this"""
    slurm_script_path: Optional[str] = None
    """[slurm] where the sbatch script goes (unset: slurm/<job name>.sbatch); logs go next to it"""
    submit: bool = False
    """[slurm] submit the script with sbatch"""
    wait: bool = False
    """[slurm] with --submit: wait for the jobs (sbatch -W) and exit with their exit code"""
    partition: Optional[str] = None
    """[slurm] the partition (unset: the cluster's)"""
    python: str = sys.executable
    """[slurm] the python (venv) the nodes run"""


@dataclass(frozen=True)
class Node:
    """Resources of one node and how many training processes it runs."""

    vcpus: int
    memory_mib: int
    gpus: int
    nproc: int


@dataclass(frozen=True)
class Job:
    """What one run executes, independent of where."""

    argv: list[str]  # the script and its arguments, without `python` and `--seed`
    name: str  # job name stem: script and env id
    num_nodes: int
    torchrun: bool
    node: Node


def node_resources(args: Args) -> Node:
    known = INSTANCE_TYPES.get(args.instance_type)
    if known is None and None in (args.vcpus, args.memory, args.gpus):
        fail(
            f"unknown --instance-type {args.instance_type!r}: pass --vcpus, --memory and --gpus, or use one of "
            + ", ".join(INSTANCE_TYPES)
        )
    vcpus, memory_gib, gpus = known or (0, 0, 0)
    gpus = args.gpus if args.gpus is not None else gpus
    node = Node(
        vcpus=args.vcpus if args.vcpus is not None else vcpus,
        memory_mib=args.memory if args.memory is not None else int(memory_gib * 1024 * MEMORY_SHARE),
        gpus=gpus,
        nproc=args.nproc_per_node if args.nproc_per_node is not None else max(1, gpus),
    )
    check_positive(vcpus=node.vcpus, memory=node.memory_mib, nproc_per_node=node.nproc)
    if node.gpus < 0:
        fail(f"--gpus must be >= 0, got {node.gpus}")
    return node


def parse_job(args: Args) -> Job:
    check_positive(num_seeds=args.num_seeds, num_nodes=args.num_nodes, timeout_seconds=args.timeout_seconds)
    if args.start_seed < 0:
        fail(f"--start-seed must be >= 0, got {args.start_seed}")
    try:
        tokens = shlex.split(args.command)
    except ValueError as exc:
        fail(f"cannot parse --command ({exc})")
    if len(tokens) < 2 or not is_python(tokens[0]) or tokens[1:] == ["-m"]:
        fail(
            f'--command must be `python SCRIPT [ARGS]`, e.g. "python cleanrl/ppo_atari_multigpu.py"; '
            f"got {args.command!r}"
        )
    check_command(tokens, SWEEP_FLAGS)
    argv = tokens[1:]
    script = argv[1] if argv[0] == "-m" and len(argv) > 1 else argv[0]
    module = argv[0] == "-m"  # `python -m cleanrl.ppo_atari`: the file cleanrl/ppo_atari.py
    path = script.replace(".", "/") + ".py" if module else script
    shape, checked = read_script(path), check_script_flags(path, argv[1 + module :])
    if not checked and args.provider != "local":  # run here, a local job says what is wrong with its flags at once
        print(
            f"note: {script} is not a training script of this project found here: its flags are checked only when "
            "the job runs it",
            file=sys.stderr,
            flush=True,
        )
    torchrun = args.launcher == "torchrun" or (args.launcher == "auto" and shape is not None and shape.torchrun)
    if args.num_nodes > 1 and not torchrun:
        fail(
            f"--num-nodes {args.num_nodes} needs a torch.distributed script started by torchrun (e.g. "
            "cleanrl/ppo_atari_multigpu.py); pass --launcher torchrun if yours is one"
        )
    env_id = flag_value(tokens, "--env-id")
    stem = Path(script).stem.replace(".", "-")
    name = re.sub(r"[^A-Za-z0-9_-]", "-", f"{stem}-{env_id}" if env_id else stem)
    if args.provider == "aws" and shape is not None and shape.resumes and args.efs_file_system_id:
        if flag_value(tokens, "--runs-dir") is not None:
            fail("--command must not set --runs-dir with --efs-file-system-id: the runs go to --efs-runs-dir")
        argv = [*argv, "--runs-dir", args.efs_runs_dir]
    return Job(argv=argv, name=name[:100], num_nodes=args.num_nodes, torchrun=torchrun, node=node_resources(args))


def wandb_key(args: Args) -> Optional[str]:
    """The W&B key from the caller's environment (never printed), or None."""
    if args.wandb_key_env is None:
        return None
    value = os.environ.get(args.wandb_key_env)
    if not value:
        fail(f"--wandb-key-env {args.wandb_key_env}: that environment variable is not set")
    return value


def run_words(job: Job, seed: int) -> list[str]:
    """A run's seed and, for a script that continues runs, its run name and `--resume auto`."""
    run_name = sweep_run_of(job.argv, None, seed)
    return ["--seed", str(seed), *(["--run-name", run_name, "--resume", "auto"] if run_name else [])]


def retryable(exit_codes: list[int]) -> bool:
    """Whether a failed run is retried: not on its own errors (exit codes 1, 2), else (a kill, a crash) yes."""
    return any(code not in (0, *NO_RETRY_EXIT_CODES) for code in exit_codes)


def job_node_command(job: Job, seed: int, python: str, launcher: str, nv: NodeVars) -> str:
    """The shell script one node of `job` runs for one seed (AWS Batch and the local simulated nodes)."""
    run = shlex.join([*job.argv, *run_words(job, seed)])
    return node_command(
        run,
        num_nodes=job.num_nodes,
        nproc=job.node.nproc,
        torchrun=job.torchrun,
        python=python,
        launcher=launcher,
        nv=nv,
    )


def seeds(args: Args) -> range:
    return range(args.start_seed, args.start_seed + args.num_seeds)


def check_retries(args: Args) -> None:
    if not 0 <= args.num_retries <= 9:
        fail(f"--num-retries must be between 0 and 9 (AWS Batch allows 10 attempts), got {args.num_retries}")


def masked(value, key: Optional[str]):
    """A copy of a request with the secret replaced, for printing."""
    if isinstance(value, dict):
        return {k: masked(v, key) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v, key) for v in value]
    return MASK if key is not None and value == key else value
