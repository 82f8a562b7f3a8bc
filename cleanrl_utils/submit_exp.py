"""Submit a script's runs, one per seed, as (multi-node) jobs: AWS Batch, a Slurm cluster, or this machine.

    # 3 seeds, each a 2-node AWS Batch multi-node parallel job of g5.12xlarge instances (4 GPUs, 48 vCPUs):
    # one rank per GPU, 12 envs per rank, so 48 per node
    python cleanrl_utils/submit_exp.py --docker-image IMAGE --job-queue QUEUE --efs-file-system-id fs-... \
        --command "python cleanrl/ppo_atari_multigpu.py --env-id BeamRiderNoFrameskip-v4 --local-num-envs 12" \
        --num-seeds 3 --num-nodes 2 --instance-type g5.12xlarge
    # the same, but only print the exact AWS Batch requests (nothing is sent, no credentials needed)
    ... --dry-run
    # try the exact multi-node job on this machine first: 2 simulated nodes on loopback
    ... --provider local --num-nodes 2
    # the same job on a Slurm cluster: write the sbatch script, submit it and wait for its exit code
    ... --provider slurm --num-nodes 2 --vcpus 8 --memory 16000 --gpus 1 --submit --wait

Every run is `{command} --seed {seed}`, and for a script that continues runs (cleanrl/ppo*.py) also
`--run-name {env_id}__{exp_name}__{seed} --resume auto`: every attempt of a run (an AWS Batch retry, a Slurm requeue,
a local retry, the same submission again) finds its run folder and continues from its last checkpoint, or skips it
when it is complete. Where the run folders go and what happens at a preemption, a retry or a time limit:
docs/cluster.md. With `--num-nodes` > 1 the command must be a torch.distributed script
(e.g. cleanrl/ppo_atari_multigpu.py): each node runs one torchrun launcher (`python` in the command becomes the
launcher) with a c10d rendezvous on the main node, and as many processes as the node has GPUs (1 without GPUs).
Node resources (vCPUs, memory, GPUs) come from `--instance-type` and can be overridden with `--vcpus/--memory/--gpus`.

A W&B key is never written into a command line, a script or the output: name the environment variable holding
it with `--wandb-key-env` (its value goes into the job's environment) or, on AWS, pass `--wandb-secret-arn`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal, Optional

if (
    not __package__
):  # run as a file (`python cleanrl_utils/submit_exp.py`): the repo root, not cleanrl_utils/, on the path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import tyro

from cleanrl_utils.launch import slurm
from cleanrl_utils.launch.cleanrl_flags import SUBMIT, refuse_secrets, translated
from cleanrl_utils.launch.nodes import NodeVars, aws_node_vars, is_python, node_command, torch_launcher
from cleanrl_utils.launch.processes import stop_process_groups
from cleanrl_utils.launch.runs import check_positive
from cleanrl_utils.validation import fail
from cleanrl_utils.launch.runs import SWEEP_FLAGS, check_command, check_script_flags, sweep_run_of
from cleanrl_utils.script_shape import read_script

# vCPUs, memory (GiB), GPUs of the instance types multi-node jobs commonly use
INSTANCE_TYPES: dict[str, tuple[int, int, int]] = {
    **{
        f"c5.{size}": (vcpus, vcpus * 2, 0)
        for size, vcpus in [
            ("large", 2),
            ("xlarge", 4),
            ("2xlarge", 8),
            ("4xlarge", 16),
            ("9xlarge", 36),
            ("12xlarge", 48),
            ("18xlarge", 72),
            ("24xlarge", 96),
        ]
    },
    **{
        f"m5.{size}": (vcpus, vcpus * 4, 0)
        for size, vcpus in [
            ("large", 2),
            ("xlarge", 4),
            ("2xlarge", 8),
            ("4xlarge", 16),
            ("8xlarge", 32),
            ("12xlarge", 48),
            ("16xlarge", 64),
            ("24xlarge", 96),
        ]
    },
    **{
        f"g5.{size}": (vcpus, vcpus * 4, gpus)
        for size, vcpus, gpus in [
            ("xlarge", 4, 1),
            ("2xlarge", 8, 1),
            ("4xlarge", 16, 1),
            ("8xlarge", 32, 1),
            ("12xlarge", 48, 4),
            ("16xlarge", 64, 1),
            ("24xlarge", 96, 4),
            ("48xlarge", 192, 8),
        ]
    },
    "p3.2xlarge": (8, 61, 1),
    "p3.8xlarge": (32, 244, 4),
    "p3.16xlarge": (64, 488, 8),
    "p3dn.24xlarge": (96, 768, 8),
    "p4d.24xlarge": (96, 1152, 8),
}
# share of an instance's memory a job asks for: the container agent and the OS keep the rest
MEMORY_SHARE = 0.9
# the environment variable the W&B key gets inside the job
WANDB_ENV = "WANDB_API_KEY"
MASK = "***"
# the scripts' own failures (`fail`: 1, a usage error: 2): a retry would fail the same way
NO_RETRY_EXIT_CODES = (1, 2)
EFS_VOLUME = "runs"


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

    # AWS Batch
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

    # Slurm
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
    resumable: bool  # the script continues runs: each run gets a fixed --run-name and --resume auto
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
    env_id = next((tokens[i + 1] for i, t in enumerate(tokens[:-1]) if t == "--env-id"), None)
    env_id = env_id or next((t.split("=", 1)[1] for t in tokens if t.startswith("--env-id=")), None)
    stem = Path(script).stem.replace(".", "-")
    name = re.sub(r"[^A-Za-z0-9_-]", "-", f"{stem}-{env_id}" if env_id else stem)
    resumable = shape is not None and shape.resumes
    if args.provider == "aws" and resumable and args.efs_file_system_id:
        if any(t == "--runs-dir" or t.startswith("--runs-dir=") for t in tokens):
            fail("--command must not set --runs-dir with --efs-file-system-id: the runs go to --efs-runs-dir")
        argv = [*argv, "--runs-dir", args.efs_runs_dir]
    return Job(
        argv=argv,
        name=name[:100],
        resumable=resumable,
        num_nodes=args.num_nodes,
        torchrun=torchrun,
        node=node_resources(args),
    )


def wandb_key(args: Args) -> Optional[str]:
    """The W&B key from the caller's environment (never printed), or None."""
    if args.wandb_key_env is None:
        return None
    value = os.environ.get(args.wandb_key_env)
    if not value:
        fail(f"--wandb-key-env {args.wandb_key_env}: that environment variable is not set")
    return value


def run_words(job: Job, seed: int) -> list[str]:
    """What follows the script's arguments in one run: its seed and, for a script that continues runs, the run name
    every attempt computes the same way and `--resume auto`."""
    run_name = sweep_run_of(job.argv, None, seed)
    return ["--seed", str(seed), *(["--run-name", run_name, "--resume", "auto"] if run_name else [])]


def retryable(exit_codes: list[int]) -> bool:
    """A failed run is retried unless it failed on its own (exit code 1, or 2 for a usage error: bad input that
    fails again); a signal (a kill, a lost node), a crash of the interpreter or a stop is retried."""
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


# ---------------------------------------------------------------------------------------------------------------
# AWS Batch


def efs_volume(args: Args) -> dict:
    """The EFS volume of the run folders: encrypted in transit (which an access point and IAM authorization need),
    mounted through the access point if one is given (it sets the root directory), else at --efs-root-directory."""
    config: dict = {"fileSystemId": args.efs_file_system_id, "transitEncryption": "ENABLED"}
    if args.efs_access_point_id:
        config["authorizationConfig"] = {"accessPointId": args.efs_access_point_id, "iam": "ENABLED"}
    else:
        config["rootDirectory"] = args.efs_root_directory
    return config


def retry_strategy(num_retries: int) -> dict:
    """Retry what the infrastructure did (a reclaimed spot instance or a lost host: status reason `Host EC2 ...`,
    whatever the exit code), exit at once on the script's own errors, retry anything else (a kill, a crash)."""
    if num_retries == 0:
        return {"attempts": 1}
    rules = [{"onStatusReason": "Host EC2*", "action": "RETRY"}]
    rules += [{"onExitCode": str(code), "action": "EXIT"} for code in NO_RETRY_EXIT_CODES]
    rules.append({"onReason": "*", "action": "RETRY"})
    return {"attempts": 1 + num_retries, "evaluateOnExit": rules}


def aws_requests(args: Args, job: Job, key: Optional[str]) -> list[tuple[str, dict]]:
    """The RegisterJobDefinition request and one SubmitJob request per seed, as botocore operation name + params."""
    resources = [{"type": "VCPU", "value": str(job.node.vcpus)}, {"type": "MEMORY", "value": str(job.node.memory_mib)}]
    if job.node.gpus:
        resources.append({"type": "GPU", "value": str(job.node.gpus)})
    container: dict = {"image": args.docker_image, "resourceRequirements": resources}
    if args.wandb_secret_arn:
        container["secrets"] = [{"name": WANDB_ENV, "valueFrom": args.wandb_secret_arn}]
        container["executionRoleArn"] = args.execution_role_arn
    if args.efs_file_system_id:
        container["volumes"] = [{"name": EFS_VOLUME, "efsVolumeConfiguration": efs_volume(args)}]
        container["mountPoints"] = [{"sourceVolume": EFS_VOLUME, "containerPath": args.efs_runs_dir, "readOnly": False}]
    definition: dict = {
        "jobDefinitionName": args.job_definition,
        "retryStrategy": retry_strategy(args.num_retries),
        "timeout": {"attemptDurationSeconds": args.timeout_seconds},
        "platformCapabilities": ["EC2"],
    }
    if job.num_nodes > 1:
        container["instanceType"] = args.instance_type
        definition["type"] = "multinode"
        definition["nodeProperties"] = {
            "numNodes": job.num_nodes,
            "mainNode": 0,
            "nodeRangeProperties": [{"targetNodes": "0:", "container": container}],
        }
    else:
        definition["type"] = "container"
        definition["containerProperties"] = container
    requests = [("RegisterJobDefinition", definition)]
    for seed in seeds(args):
        overrides: dict = {
            "command": ["bash", "-c", job_node_command(job, seed, "python", "torchrun", aws_node_vars(args.rdzv_port))]
        }
        if key is not None:
            overrides["environment"] = [{"name": WANDB_ENV, "value": key}]
        submit: dict = {
            "jobName": f"{job.name}-seed{seed}",
            "jobQueue": args.job_queue,
            "jobDefinition": args.job_definition,
        }
        if job.num_nodes > 1:
            submit["nodeOverrides"] = {
                "nodePropertyOverrides": [{"targetNodes": "0:", "containerOverrides": overrides}]
            }
        else:
            submit["containerOverrides"] = overrides
        requests.append(("SubmitJob", submit))
    return requests


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


def envs_per_node(job: Job) -> int:
    """The game envs one node steps: its ranks' `--local-num-envs` (or their share of `--num-envs`; the scripts'
    default 8 per process otherwise)."""

    def value(flag):
        return next((int(float(job.argv[i + 1])) for i, t in enumerate(job.argv[:-1]) if t == flag), None)

    ranks = job.node.nproc if job.torchrun else 1
    local, total = value("--local-num-envs"), value("--num-envs")
    if local is None and total is not None:
        return total // max(1, job.num_nodes) if job.torchrun else total
    return (local or 8) * ranks


def aws_notes(args: Args, job: Job) -> list[str]:
    """What the user may not have meant: cores left idle, run folders that will be lost, what must exist already."""
    notes = [
        f"the job queue {args.job_queue!r} and the image {args.docker_image!r} must exist in the account "
        "(this tool registers a job definition and submits jobs, nothing more)"
    ]
    envs = envs_per_node(job)
    if envs * 4 <= job.node.vcpus:
        notes.append(
            f"each node steps {envs} envs on {job.node.vcpus} vCPUs: most of its cores will idle; give "
            f"--local-num-envs about {max(1, job.node.vcpus // job.node.nproc)} (per rank) or a smaller "
            "--instance-type"
        )
    if not args.efs_file_system_id:
        notes.append(
            "without --efs-file-system-id the run folders (logs, checkpoints) are lost when a job's "
            "container ends, and a retry starts its run over (docs/cluster.md)"
        )
    return notes


def submit_aws(args: Args, job: Job) -> None:
    if args.wandb_secret_arn and not args.execution_role_arn:
        fail("--wandb-secret-arn needs --execution-role-arn (the role AWS Batch uses to read the secret)")
    check_retries(args)
    if args.timeout_seconds < 60:
        fail(f"--timeout-seconds must be at least 60 on AWS Batch, got {args.timeout_seconds}")
    if args.efs_access_point_id and not args.efs_file_system_id:
        fail("--efs-access-point-id needs --efs-file-system-id (the file system the access point belongs to)")
    key = wandb_key(args)
    requests = aws_requests(args, job, key)
    if args.dry_run:
        for note in aws_notes(args, job):  # on stderr: a dry run's stdout is the requests' JSON
            print(f"note: {note}", file=sys.stderr, flush=True)
        print(json.dumps([{"operation": op, "params": masked(p, key)} for op, p in requests], indent=2))
        return
    try:
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:
        fail("--provider aws needs boto3: pip install boto3 (or the project's `cloud` extra)")
    try:
        session = boto3.session.Session(region_name=args.region)
        missing = []
        if session.get_credentials() is None:
            missing.append(
                "AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or run `aws configure`)"
            )
        if not session.region_name:
            missing.append("an AWS region (pass --region or set AWS_DEFAULT_REGION)")
        if missing:
            fail(f"nothing was submitted: missing {' and '.join(missing)}")
        client = session.client("batch")
        (_, definition), submits = requests[0], requests[1:]
        registered = client.register_job_definition(**definition)
        print(f"registered job definition {registered['jobDefinitionArn']}")
        for _, submit in submits:
            submit["jobDefinition"] = registered["jobDefinitionArn"]
            response = client.submit_job(**submit)
            print(f"submitted {response['jobName']}: job id {response['jobId']}")
        for note in aws_notes(args, job)[1:]:  # the queue and image existed
            print(f"note: {note}", flush=True)
    except (BotoCoreError, ClientError) as exc:
        fail(f"AWS Batch: {exc}")


# ---------------------------------------------------------------------------------------------------------------
# Local: N simulated nodes on loopback


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def local_nodes(args: Args, job: Job, seed: int, key: Optional[str]) -> list[tuple[list[str], dict[str, str]]]:
    """The command and the AWS Batch environment of each simulated node of one run."""
    nv = aws_node_vars(free_port())
    script = job_node_command(job, seed, sys.executable, torch_launcher(sys.executable), nv)
    job_id = f"local-{os.getpid()}-seed{seed}"
    nodes = []
    for index in range(job.num_nodes):
        env = {
            "AWS_BATCH_JOB_ID": f"{job_id}#{index}",
            "AWS_BATCH_JOB_NUM_NODES": str(job.num_nodes),
            "AWS_BATCH_JOB_NODE_INDEX": str(index),
            "AWS_BATCH_JOB_MAIN_NODE_INDEX": "0",
        }
        if index > 0:
            env["AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"] = "127.0.0.1"
        if key is not None:
            env[WANDB_ENV] = key
        nodes.append((["bash", "-c", script], env))
    return nodes


def _forward(stream: IO[str], prefix: str) -> None:
    for line in stream:
        sys.stdout.write(prefix + line)
        sys.stdout.flush()


def _die_with_parent() -> None:
    """In a node's process (before exec): get SIGTERM when submit_exp.py dies, even by SIGKILL (Linux only)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def run_nodes(nodes: list[tuple[list[str], dict[str, str]]], label: str) -> list[int]:
    """Start every node, wait for all; once one fails the others are stopped. Returns the exit codes."""
    procs, threads = [], []
    signal.signal(signal.SIGTERM, _interrupt)  # a terminated submit_exp.py stops its nodes too
    try:
        for index, (cmd, env) in enumerate(nodes):
            proc = subprocess.Popen(
                cmd,
                env={**os.environ, **env},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
            procs.append(proc)
            thread = threading.Thread(target=_forward, args=(proc.stdout, f"[{label} node {index}] "), daemon=True)
            thread.start()
            threads.append(thread)
        while True:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes) or any(c not in (None, 0) for c in codes):
                break
            time.sleep(0.2)
    finally:
        stop_process_groups(procs)
        for thread in threads:
            thread.join(timeout=5)
    return [p.returncode for p in procs]


def run_local(args: Args, job: Job) -> None:
    """Each seed's nodes in turn; a failed run is retried as on AWS Batch (`retryable`), up to --num-retries times,
    with a new rendezvous: it resumes from its last checkpoint."""
    check_retries(args)
    key = wandb_key(args)
    failed = []
    for seed in seeds(args):
        if args.dry_run:
            for index, (cmd, env) in enumerate(local_nodes(args, job, seed, key)):
                shown = " ".join(f"{k}={shlex.quote(str(masked(v, key)))}" for k, v in env.items())
                print(f"# seed {seed} node {index}\n{shown} {shlex.join(cmd)}")
            continue
        for attempt in range(1 + args.num_retries):
            codes = run_nodes(local_nodes(args, job, seed, key), f"seed {seed}")
            print(f"seed {seed}: node exit codes {codes}")
            if not any(codes) or not retryable(codes):
                break
            if attempt < args.num_retries:
                print(f"seed {seed}: retry {attempt + 1} of {args.num_retries}", flush=True)
        if any(codes):
            failed.append(f"seed {seed} (node exit codes {codes})")
    if failed:
        fail(f"{len(failed)} of {args.num_seeds} run(s) failed: {', '.join(failed)}")


# ---------------------------------------------------------------------------------------------------------------
# Slurm


def slurm_job(args: Args, job: Job, log_dir: Path) -> slurm.ArrayJob:
    """The runs as a Slurm job array, one task per seed (the env id, if any, is in the command)."""
    return slurm.ArrayJob(
        name=job.name,
        run=shlex.join(job.argv),
        python=args.python,
        torchrun=job.torchrun,
        seeds=seeds(args),
        nodes=job.num_nodes,
        nproc_per_node=job.node.nproc,
        gpus_per_node=job.node.gpus,
        cpus_per_task=job.node.vcpus,
        mem_mib=job.node.memory_mib,
        time_minutes=max(1, args.timeout_seconds // 60),
        partition=args.partition,
        log_dir=str(log_dir),
        wandb_key_env=args.wandb_key_env,
        run_names=tuple(n for n in (sweep_run_of(job.argv, None, seed) for seed in seeds(args)) if n),
        signal_seconds=slurm.time_limit_signal(max(1, args.timeout_seconds // 60)),
    )


def submit_slurm(args: Args, job: Job) -> None:
    if args.wandb_key_env:
        wandb_key(args)  # fail now rather than in the job
    path = Path(args.slurm_script_path or f"slurm/{job.name}.sbatch").resolve()
    log_dir = path.parent / "logs"
    script = slurm.render(slurm.multinode_template(), slurm.template_values(slurm_job(args, job, log_dir)))
    if args.dry_run:
        print(script, end="")
        return
    slurm.write_script(str(path), script, str(log_dir))
    print(f"wrote {path} (logs: {log_dir})")
    if args.submit:
        code = slurm.submit(str(path), args.wait, str(log_dir))
        if code != 0:
            raise SystemExit(code)


def main(args: Args) -> None:
    job = parse_job(args)
    {"aws": submit_aws, "local": run_local, "slurm": submit_slurm}[args.provider](args, job)


def cli(argv: Optional[list[str]] = None) -> Args:
    """The command line's `Args`; CleanRL's own flags taken or answered in one line, a secret never shown back."""
    argv = sys.argv[1:] if argv is None else list(argv)
    refuse_secrets(argv, "put the W&B key in an environment variable and pass its name: --wandb-key-env NAME")
    return tyro.cli(Args, args=translated(argv, SUBMIT))


if __name__ == "__main__":
    main(cli())
