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

Every run is `{command} --seed {seed}`, and for a script that continues runs also `--run-name
{env_id}__{exp_name}__{seed} --resume auto`, so every attempt of a run continues from its last checkpoint
(docs/cluster.md). With `--num-nodes` > 1 the command must be a torch.distributed script: each node runs one torchrun
launcher, one process per GPU. A W&B key is never written into a command line, a script or the output: pass the name
of the environment variable holding it (`--wandb-key-env`) or, on AWS, `--wandb-secret-arn`.
The providers are in cleanrl_utils/launch/: `aws_batch.py`, `local_nodes.py`, `slurm_job.py`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

if not __package__:  # run as a file (`python cleanrl_utils/submit_exp.py`): the repo root on the path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import tyro

from cleanrl_utils.launch.aws_batch import submit_aws
from cleanrl_utils.launch.cleanrl_flags import SUBMIT, refuse_secrets, translated
from cleanrl_utils.launch.job import Args, parse_job
from cleanrl_utils.launch.local_nodes import run_local
from cleanrl_utils.launch.slurm_job import submit_slurm


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
