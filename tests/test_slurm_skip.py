"""The real-cluster tests skip with a reason where Slurm (or root) is missing, and CI turns that skip into a
failure (CLEANRL_REQUIRE_SLURM=1, set by .ci/run)."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers import REPO_ROOT

CONFTEST = """
import slurm_cluster
slurm_cluster.missing_requirements = lambda: "Slurm/munge not installed (sbatch missing); see .ci/install_slurm.sh"
from slurm_cluster import slurm_cluster  # noqa: F401
"""


def run_session(tmp_path, require: str | None) -> subprocess.CompletedProcess[str]:
    """A pytest session on a machine without Slurm (as the fixture's requirement check reports it)."""
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_cluster.py").write_text("def test_on_the_cluster(slurm_cluster):\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k != "CLEANRL_REQUIRE_SLURM"}
    env["PYTHONPATH"] = str(REPO_ROOT / "tests")
    if require is not None:
        env["CLEANRL_REQUIRE_SLURM"] = require
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cluster_tests_skip_with_the_reason_without_slurm(tmp_path):
    res = run_session(tmp_path, None)
    assert res.returncode == 0, res.stdout[-2000:]
    assert "1 skipped" in res.stdout
    assert "Slurm/munge not installed (sbatch missing); see .ci/install_slurm.sh" in res.stdout


def test_ci_fails_when_they_would_skip(tmp_path):
    res = run_session(tmp_path, "1")
    assert res.returncode != 0, res.stdout[-2000:]
    assert "1 error" in res.stdout and "skipped" not in res.stdout
    assert "CLEANRL_REQUIRE_SLURM=1 but Slurm/munge not installed" in res.stdout
