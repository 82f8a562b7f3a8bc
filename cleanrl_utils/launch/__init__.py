"""What the sweep runner, the tuner and cluster submission share: run names, node commands, processes, Slurm."""
