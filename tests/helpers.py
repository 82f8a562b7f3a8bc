"""Helpers shared by the test files: run a script as a user would, and read back what it logged."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Mapping, Sequence

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

REPO_ROOT = Path(__file__).resolve().parent.parent


def run_script(
    args: Sequence[str],
    cwd: str | os.PathLike[str],
    timeout: float,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``python ARGS...`` (this interpreter) in ``cwd``, capturing text stdout/stderr.

    Relative script paths in ``args`` (e.g. ``cleanrl/ppo.py``) are resolved against the repository root, so
    tests can run in a temporary directory. The repository root is put on PYTHONPATH, so ``cleanrl_utils`` imports
    even when the project is not pip-installed. ``env`` entries are added to (and override) the current environment.
    """
    resolved = [str(REPO_ROOT / a) if a.endswith(".py") and not os.path.isabs(a) else a for a in args]
    full_env = dict(os.environ)
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), full_env.get("PYTHONPATH")) if p)
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, *resolved],
        cwd=str(cwd),
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def find_run_dir(runs_dir: str | os.PathLike[str]) -> Path:
    """The single run directory under ``runs_dir`` (fails if there is none or more than one)."""
    runs = [p for p in Path(runs_dir).iterdir() if p.is_dir()]
    assert len(runs) == 1, f"expected exactly one run directory in {runs_dir}, found {[p.name for p in runs]}"
    return runs[0]


def read_scalars(run_dir: str | os.PathLike[str], tag: str) -> list[tuple[int, float]]:
    """All ``(step, value)`` pairs logged under ``tag`` in the TensorBoard event files of ``run_dir``."""
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    if tag not in acc.Tags()["scalars"]:
        return []
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def load_script(script: str, module_name: str) -> ModuleType:
    """Import a script such as ``cleanrl/ppo.py`` as a module (its ``__main__`` block does not run)."""
    spec = importlib.util.spec_from_file_location(module_name, REPO_ROOT / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_one_line_error(result: subprocess.CompletedProcess[str], fragment: str) -> None:
    """The run failed with exactly one stderr line, ``error: ...`` containing ``fragment``, and no traceback."""
    assert result.returncode != 0, result.stdout[-2000:]
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert fragment in lines[0], lines[0]
