"""What the sweep runner (`python -m cleanrl_utils.benchmark`) and cluster submission (`cleanrl_utils/submit_exp.py`:
Slurm, AWS Batch, local nodes) share: run names, node commands, process groups, Slurm scripts."""
