"""The shell scripts of benchmark/: `--help` prints the usage and runs or writes nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT

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
