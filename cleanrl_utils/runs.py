"""The names of the runs a sweep or a cluster job starts, and whether a script can continue them (for the runner and
the submission tools).
"""

from __future__ import annotations

import os
from typing import Optional, Sequence


def sweep_run_name(env_id: Optional[str], exp_name: str, seed: int) -> str:
    """The run name the submission tools give a run: the same on every attempt (no time stamp), so that a retried,
    requeued or restarted job finds its run again."""
    return f"{env_id}__{exp_name}__{seed}".replace("/", "-") if env_id else f"{exp_name}__{seed}"


def sweep_run_of(tokens: Sequence[str], env_id: Optional[str], seed: int) -> Optional[str]:
    """The run name of one run of a submitted command (its words), or None when its script does not continue runs
    (it then runs as typed). `env_id` None: the command's own --env-id, if any."""
    script = next((t for t in tokens if t.endswith(".py")), None)
    if script is None or not supports_resume(script):
        return None
    value = lambda flag: next((tokens[i + 1] for i, t in enumerate(tokens[:-1]) if t == flag), None)  # noqa: E731
    exp_name = value("--exp-name") or os.path.splitext(os.path.basename(script))[0]
    return sweep_run_name(env_id or value("--env-id"), exp_name, seed)


def supports_resume(script: str) -> bool:
    """Whether a training script continues runs (`--run-name NAME --resume auto`): it starts through
    `cleanrl_utils.resume.start_run`. A relative path is looked up here, then in this repository (a job's
    working folder may be another)."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for path in (script, os.path.join(repo, script)):
        try:
            with open(path) as f:
                return "start_run(" in f.read()
        except OSError:
            continue
    return False
