"""The shell scripts of benchmark/: `--help` prints the usage and runs or writes nothing; multigpu_sps.sh reports
the figures the training script really logs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT, read_scalars

SCRIPTS = sorted(p for p in (REPO_ROOT / "benchmark").glob("*.sh") if p.name != "usage.sh")  # usage.sh is sourced


def scratch_repo(tmp_path: Path) -> Path:
    """A copy of benchmark/ next to links to the code: whatever a script writes lands in tmp_path."""
    shutil.copytree(REPO_ROOT / "benchmark", tmp_path / "benchmark")
    for name in ("cleanrl", "cleanrl_utils"):
        (tmp_path / name).symlink_to(REPO_ROOT / name)
    return tmp_path


def run(argv: list[str], cwd: Path, timeout: float, **env: str) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])  # this venv's python
    full_env = dict(os.environ, PATH=path, PYTHONPATH=str(REPO_ROOT), OMP_NUM_THREADS="1", **env)
    return subprocess.run(argv, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if "__pycache__" not in p.parts and not p.is_symlink()}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_help_prints_the_usage_and_runs_nothing(tmp_path, script):
    root = scratch_repo(tmp_path)
    before = files_under(root)
    for flag in ("--help", "-h"):
        result = run(["bash", f"benchmark/{script.name}", flag], root, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        header = script.read_text().splitlines()[1].removeprefix("# ")
        assert result.stdout.startswith(header + "\n"), result.stdout[:500]  # the script's own usage comes first
        assert "#!" not in result.stdout and "set -euo" not in result.stdout
    assert files_under(root) == before  # no docs/*.md, no runs/, no logs


@pytest.mark.slow
@pytest.mark.torchrun
def test_multigpu_sps_reports_the_sps_the_script_logs(tmp_path):
    root = scratch_repo(tmp_path)
    result = run(
        ["bash", "benchmark/multigpu_sps.sh"],
        root,
        timeout=400,
        RANKS="1",
        NUM_ENVS="8",
        NUM_STEPS="8",
        ITERATIONS="2",
        OUT=str(tmp_path / "out"),
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    row = next(line for line in result.stdout.splitlines() if line.startswith("| 1 |"))
    ranks, envs, threads, sps, steady_sps, busy = [cell.strip() for cell in row.strip("|").split("|")]
    logged = read_scalars(tmp_path / "out" / "runs_ranks1" / "ranks1", "charts/SPS")  # rank 0's log
    assert [step for step, _ in logged] == [64, 128] and sps == f"{logged[-1][1]:.0f}", (row, logged)
    assert float(sps) > 0 and float(steady_sps) > 0
    assert envs == "8" and re.fullmatch(r"\d+( / \d+)?|\d+ slices x 1 / \d+", threads), row  # the first line's
    cores = len(os.sched_getaffinity(0))
    assert 0 < float(busy) <= cores + 0.5, row  # one rank's CPU time over the run's wall time, from outside
