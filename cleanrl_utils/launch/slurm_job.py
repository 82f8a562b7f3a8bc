"""The Slurm provider of `submit_exp.py`: the runs as a job array (a task per seed), written and sent (`--submit`)."""

from __future__ import annotations

import shlex
from pathlib import Path

from cleanrl_utils.launch import slurm
from cleanrl_utils.launch.job import Args, Job, seeds, wandb_key
from cleanrl_utils.launch.runs import sweep_run_of


def slurm_job(args: Args, job: Job, log_dir: Path) -> slurm.ArrayJob:
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
    )


def submit_slurm(args: Args, job: Job) -> None:
    wandb_key(args)  # an unset variable fails now rather than in the job
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
