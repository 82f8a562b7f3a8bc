"""Submit a script's runs, one per seed, as (multi-node) jobs to AWS Batch, a Slurm cluster or this machine
(`--provider`; the providers are in cleanrl_utils/launch/); see the README and docs/cluster.md."""

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
    """The command line's `Args`, CleanRL's own flags too; a secret is never shown back."""
    argv = sys.argv[1:] if argv is None else list(argv)
    refuse_secrets(argv, "put the W&B key in an environment variable and pass its name: --wandb-key-env NAME")
    return tyro.cli(Args, args=translated(argv, SUBMIT))


if __name__ == "__main__":
    main(cli())
