"""Shared pytest fixtures and markers."""

import pytest
from slurm_cluster import slurm_cluster  # noqa: F401  (two-node Slurm cluster fixture, see tests/slurm_cluster.py)

# Slow tests of tests/test_vector_envs.py, marked here rather than by decorators while that file is being rewritten
# (each starts a training run or several processes: 5-26 s on the loaded 2-core machine).
SLOW_BY_NAME = {
    "test_vector_envs.py": {
        "test_envpool_matches_within_tolerance_at_the_start",
        "test_episode_return_counts_unclipped_points",
        "test_overlapped_ale_run_logs_the_time_split",
        "test_bad_backend_options_are_one_line_errors",
    },
}


def pytest_collection_modifyitems(items):
    for item in items:
        if item.originalname in SLOW_BY_NAME.get(item.path.name, ()):
            item.add_marker(pytest.mark.slow)
