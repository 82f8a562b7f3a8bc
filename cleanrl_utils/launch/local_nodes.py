"""The local provider of `submit_exp.py`: a run's nodes as processes here, with AWS Batch's environment and retries."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import IO, Optional

from cleanrl_utils.launch.job import WANDB_ENV, Args, Job, check_retries, job_node_command, masked, retryable
from cleanrl_utils.launch.job import seeds, wandb_key
from cleanrl_utils.launch.nodes import aws_node_vars, torch_launcher
from cleanrl_utils.launch.processes import stop_process_groups
from cleanrl_utils.validation import fail


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def local_nodes(job: Job, seed: int, key: Optional[str]) -> list[tuple[list[str], dict[str, str]]]:
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


def run_nodes(nodes: list[tuple[list[str], dict[str, str]]], label: str) -> list[int]:
    """Start every node, wait for all; once one fails the others are stopped. Returns the exit codes."""
    procs, threads = [], []
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a terminated submit_exp.py stops its nodes too
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
    """Each seed's nodes in turn; a failed run is retried (`retryable`) with a new rendezvous, from its checkpoint."""
    check_retries(args)
    key = wandb_key(args)
    failed = []
    for seed in seeds(args):
        if args.dry_run:
            for index, (cmd, env) in enumerate(local_nodes(job, seed, key)):
                shown = " ".join(f"{k}={shlex.quote(str(masked(v, key)))}" for k, v in env.items())
                print(f"# seed {seed} node {index}\n{shown} {shlex.join(cmd)}")
            continue
        for attempt in range(1 + args.num_retries):
            codes = run_nodes(local_nodes(job, seed, key), f"seed {seed}")
            print(f"seed {seed}: node exit codes {codes}")
            if not any(codes) or not retryable(codes):
                break
            if attempt < args.num_retries:
                print(f"seed {seed}: retry {attempt + 1} of {args.num_retries}", flush=True)
        if any(codes):
            failed.append(f"seed {seed} (node exit codes {codes})")
    if failed:
        fail(f"{len(failed)} of {args.num_seeds} run(s) failed: {', '.join(failed)}")
