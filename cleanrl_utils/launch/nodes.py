"""What one node of a (multi-node) torchrun job runs: one shell script for every provider, but its node variables."""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class NodeVars:
    """A node's place in a job as shell expressions, and setup lines defining THIS_ADDR and MAIN_ADDR."""

    num_nodes: str
    node_rank: str
    port: str
    rdzv_id: str
    setup: tuple[str, ...]


def aws_node_vars(port: int) -> NodeVars:
    """The variables AWS Batch (and the local provider) sets on every node of a multi-node job."""
    return NodeVars(
        num_nodes="$AWS_BATCH_JOB_NUM_NODES",
        node_rank="$AWS_BATCH_JOB_NODE_INDEX",
        port=str(port),
        rdzv_id="${AWS_BATCH_JOB_ID%%#*}",  # a node's job id is `<job id>#<node index>`
        setup=(
            'THIS_ADDR=$(hostname -i 2>/dev/null | cut -d" " -f1)',
            "THIS_ADDR=${THIS_ADDR:-127.0.0.1}",
            "# AWS Batch gives the main node address to the child nodes only: without it, this is the main node",
            "MAIN_ADDR=${AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS:-$THIS_ADDR}",
        ),
    )


def slurm_node_addr(node: str) -> str:
    """The shell command printing the address Slurm reaches a node by (its NodeAddr, not always its hostname)."""
    return f'scontrol show node "{node}" -o | grep -o "NodeAddr=[^ ]*" | cut -d= -f2'


def slurm_node_vars() -> NodeVars:
    """Slurm's node in an `srun` step: the rendezvous on the first node, on a port derived from the job id."""
    return NodeVars(
        num_nodes="$SLURM_NNODES",
        node_rank="$SLURM_NODEID",
        port="$((20000 + SLURM_JOB_ID % 20000))",
        rdzv_id="$SLURM_JOB_ID",
        setup=(
            'MAIN_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            f"MAIN_ADDR=$({slurm_node_addr('$MAIN_NODE')})",
            f"THIS_ADDR=$({slurm_node_addr('$SLURMD_NODENAME')})",
        ),
    )


def is_python(word: str) -> bool:
    """`python`, `python3`, `python3.11`, `/usr/bin/python3`, `.venv/bin/python`, ..."""
    return re.fullmatch(r"python(\d+(\.\d+)?)?", os.path.basename(word)) is not None


def torch_launcher(python: Optional[str]) -> str:
    """torchrun as the given python's module (the interpreter the nodes run), or the `torchrun` on PATH."""
    return "torchrun" if python is None else f"{shlex.quote(python)} -m torch.distributed.run"


def node_command(
    run: str, *, num_nodes: int, nproc: int, torchrun: bool, python: Optional[str], launcher: str, nv: NodeVars
) -> str:
    """The shell script one node runs: `run` (shell words) by `python`, or as a program itself for None."""
    if python is None:
        program, run = run, f"--no-python {run}"
    else:
        program = f"{shlex.quote(python)} {run}"
    if num_nodes == 1:
        if torchrun and nproc > 1:
            return f"exec {launcher} --standalone --nnodes=1 --nproc-per-node={nproc} {run}"
        return f"exec {program}"
    torchrun_line = (
        f'exec {launcher} --nnodes="{nv.num_nodes}" --node-rank="{nv.node_rank}" --nproc-per-node={nproc} '
        f'--rdzv-backend=c10d --rdzv-endpoint="$MAIN_ADDR:{nv.port}" --rdzv-id="{nv.rdzv_id}" '
        f'--local-addr="$THIS_ADDR" {run}'
    )
    return "\n".join(["set -eu", *nv.setup, torchrun_line])
