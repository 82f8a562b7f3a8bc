"""Slurm job arrays from sbatch templates, for the runner, the tuner and `submit_exp.py --provider slurm`: `{{name}}`
placeholders filled from an `ArrayJob` (a line with an unset one left out); requeueable jobs (docs/cluster.md)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from cleanrl_utils.launch.nodes import node_command, slurm_node_vars, torch_launcher
from cleanrl_utils.launch.runs import make_dir
from cleanrl_utils.validation import fail

MULTINODE_TEMPLATE = Path(__file__).resolve().parents[2] / "benchmark" / "slurm_multinode.template"
PLACEHOLDER = re.compile(r"{{\s*(\w+)\s*}}")


@dataclass(frozen=True)
class ArrayJob:
    """One job array: a task per (env id, seed), env-major, or per seed when `env_ids` is empty (then in `run`)."""

    name: str
    run: str  # the script and its arguments as shell words, without --env-id and --seed
    python: Optional[str]  # the interpreter of `run`; None: `run` is a program itself
    torchrun: bool  # start `run` with torchrun (a torch.distributed script)
    seeds: range
    env_ids: tuple[str, ...] = ()
    nodes: Optional[int] = None  # per task; unset leaves the line out (one node)
    nproc_per_node: int = 1
    gpus_per_node: int = 0
    cpus_per_task: Optional[int] = None
    mem_mib: Optional[int] = None
    time_minutes: Optional[int] = None
    partition: Optional[str] = None
    log_dir: str = "."
    wandb_key_env: Optional[str] = None  # the submitting shell's variable holding the W&B key
    run_names: tuple[str, ...] = ()  # one per task, for a script that continues runs (`--resume auto`); else empty

    @property
    def num_tasks(self) -> int:
        return max(1, len(self.env_ids)) * len(self.seeds)

    @property
    def signal_seconds(self) -> Optional[int]:
        """When to warn a task (SIGUSR1) before its time limit: 5 minutes, or a third of a short limit."""
        return None if self.time_minutes is None else min(300, self.time_minutes * 20)


# on SIGUSR1 before the time limit: SIGTERM to the step (the run checkpoints and stops), then back to the queue
REQUEUE_TRAP = """requeue() {
    echo "time limit near: stopping the run at a checkpoint, then requeueing job $SLURM_JOB_ID"
    scancel --signal=TERM "$SLURM_JOB_ID"  # to the step's processes (srun itself would end the step at once)
    wait "$step" || true
    scontrol requeue "$SLURM_JOB_ID"
    exit 0
}
trap requeue USR1"""


def task_args(job: ArrayJob) -> str:
    """What follows the command in a task: $ENV_ID, $SEED and, for a script that continues runs, $RUN_NAME."""
    words = (' --env-id "$ENV_ID"' if job.env_ids else "") + ' --seed "$SEED"'
    return words + (' --run-name "$RUN_NAME" --resume auto' if job.run_names else "")


def node_script(job: ArrayJob) -> str:
    """What each node of an array task runs."""
    run = job.run + task_args(job)
    return node_command(
        run,
        num_nodes=job.nodes or 1,
        nproc=job.nproc_per_node,
        torchrun=job.torchrun,
        python=job.python,
        launcher=torch_launcher(job.python),
        nv=slurm_node_vars(),
    )


def template_values(job: ArrayJob) -> dict[str, Optional[str]]:
    """The value of each placeholder; None where the setting is unset (its line is left out)."""

    def text(value: Optional[int], unit: str = "") -> Optional[str]:
        return None if value is None else f"{value}{unit}"

    return {
        "job_name": job.name,
        "partition": job.partition,
        "array": f"0-{job.num_tasks - 1}",
        "nodes": text(job.nodes),
        "gpus_per_task": text(job.gpus_per_node or None),
        "cpus_per_task": text(job.cpus_per_task),
        "mem": text(job.mem_mib, "M"),
        "time": text(job.time_minutes),
        "log_dir": os.path.abspath(job.log_dir),
        "workdir": shlex.quote(os.getcwd()),
        "env_ids": " ".join(shlex.quote(e) for e in job.env_ids) or None,
        "seeds": " ".join(str(s) for s in job.seeds),
        "num_seeds": str(len(job.seeds)),
        "start_seed": str(job.seeds.start),
        "wandb_key_env": job.wandb_key_env,
        "node_script": shlex.quote(node_script(job)),
        "task_args": task_args(job),
        "run_names": " ".join(shlex.quote(n) for n in job.run_names) or None,
        "signal_seconds": text(job.signal_seconds),
        "requeue_trap": REQUEUE_TRAP,
    }


def multinode_template() -> str:
    """The shipped multi-node template (it lives in the repository's benchmark/, not in an installed package)."""
    try:
        return MULTINODE_TEMPLATE.read_text()
    except OSError as exc:
        fail(f"cannot read {MULTINODE_TEMPLATE} ({exc.strerror}); run from a checkout of the repository")


def render(template: str, values: dict[str, Optional[str]]) -> str:
    """Fill the `{{name}}` placeholders; drop a line with an unset one; an unknown placeholder is an error."""
    lines = []
    for line in template.splitlines():
        names = PLACEHOLDER.findall(line)
        unknown = [n for n in names if n not in values]
        if unknown:
            fail(f"Slurm template uses unknown placeholder {{{{{unknown[0]}}}}}; known: {', '.join(values)}")
        if any(values[n] is None for n in names):
            continue
        lines.append(PLACEHOLDER.sub(lambda m: values[m.group(1)], line))
    return "\n".join(lines) + "\n"


def write_script(path: str, script: str, log_dir: str) -> None:
    """Write the sbatch script and make its tasks' log folder, or stop with a one-line error."""
    make_dir(log_dir, "the log folder")
    make_dir(os.path.dirname(path) or ".", "the folder of the sbatch script")
    try:
        with open(path, "w") as f:
            f.write(script)
    except OSError as exc:
        fail(f"cannot write the sbatch script {path!r} ({exc.strerror}); pass another --slurm-script-path")


def sbatch_command(path: str, wait: bool) -> list[str]:
    """`sbatch --wait` blocks until every array task ends and exits with the highest task exit code."""
    return ["sbatch", *(["--wait"] if wait else []), path]


def submit(path: str, wait: bool, log_dir: str) -> int:
    """Submit the script with sbatch; returns sbatch's exit code (with --wait: the tasks')."""
    cmd = sbatch_command(path, wait)
    if shutil.which("sbatch") is None:
        fail(f"sbatch not found on PATH; run this on a Slurm login node or submit {path} there")
    print(f"$ {shlex.join(cmd)}", flush=True)
    returncode = subprocess.run(cmd).returncode
    if returncode != 0:
        print(f"error: sbatch exited with {returncode}; task logs are in {log_dir}/", file=sys.stderr)
    return returncode


def submit_array(template_path: str, values: dict, path: str, log_dir: str, what: str, send: bool, wait: bool) -> int:
    """Fill the template, write the sbatch script at `path`, say `what` it runs, and submit it (`send`) or say how."""
    with open(template_path) as f:
        script = render(f.read(), values)
    write_script(path, script, log_dir)
    print(f"wrote {path}: {what}")
    if not send:
        print(f"submit it with: {shlex.join(sbatch_command(path, wait))}")
        return 0
    return submit(path, wait, log_dir)
