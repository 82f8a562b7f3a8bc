"""Shared pytest fixtures and markers."""

from slurm_cluster import slurm_cluster  # noqa: F401  (two-node Slurm cluster fixture, see tests/slurm_cluster.py)
