"""Launching runs: the sweep runner (`python -m cleanrl_utils.launch.benchmark`), cluster submission
(`cleanrl_utils/launch/submit_exp.py`: Slurm, AWS Batch, local nodes) and what they share (run names, node commands,
process groups)."""
