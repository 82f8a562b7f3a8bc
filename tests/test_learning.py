"""The learning benchmark's bookkeeping (cleanrl_utils/learning.py): what is finished, what resumes, the report."""

from __future__ import annotations

import csv
import json
import os

import numpy as np
import pytest

from cleanrl_utils import learning


def write_export(folder, config: str, seed: int, steps, returns, wall_seconds: float = 1000.0) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{config}__{seed}.csv"), "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["step", "wall_seconds", "return", "length"])
        for i, (s, r) in enumerate(zip(steps, returns)):
            out.writerow([s, i, r, 4 * s // 100])
    with open(os.path.join(folder, f"{config}__{seed}.json"), "w") as f:
        json.dump({"config": config, "seed": seed, "env_id": learning.ENV_ID, "command": f"python x --{config}",
                   "machine": "test cpu, 2 cores", "finished": "2026-12-03T00:00:00+00:00", "steps": 500_000,
                   "wall_seconds": wall_seconds, "sps": 500_000 / wall_seconds, "episodes": len(steps)}, f)


def args_for(tmp_path, *extra: str) -> learning.Args:
    import tyro

    return tyro.cli(learning.Args, args=["report", "--results-dir", str(tmp_path / "results"),
                                          "--report-path", str(tmp_path / "results.md"), *extra])


def test_report_table_verdicts_and_what_is_missing(tmp_path):
    pytest.importorskip("matplotlib")
    folder = tmp_path / "results" / "quick"
    steps = np.arange(1, 501) * 1000  # one game ending every 1k steps
    # sync: return = window index + 1 (1 in 0-100k, ..., 5 in 400-500k); seed 2 is 1 higher everywhere
    sync1 = (steps - 1) // 100_000 + 1
    write_export(folder, "sync", 1, steps, sync1)
    write_export(folder, "sync", 2, steps, sync1 + 1)
    write_export(folder, "ale", 1, steps, sync1 + 0.5)  # between the two sync seeds: within noise
    write_export(folder, "envpool", 1, steps, sync1 * 0 + 0.5)  # never learns: far outside
    args = args_for(tmp_path)
    assert learning.report(args) == 0
    text = (tmp_path / "results.md").read_text()
    assert "| sync | 1 | 1.00 | 2.00 | 3.00 | 4.00 | 5.00 |" in text
    assert "| **sync, mean** | 2 seeds | 1.50 | 2.50 | 3.50 | 4.50 | 5.50 |" in text
    assert "| ale | 1 | 1.50 | 2.50 | 3.50 | 4.50 | 5.50 |" in text
    assert "2.03 | 3.60 | 7.81 | 11.13 | 12.44" in text  # CleanRL's anchor row
    verdicts = {line.split("**")[1]: line for line in text.splitlines() if line.startswith("- **")}
    assert "within seed noise" in verdicts["ale"] and "NOT" not in verdicts["ale"]
    assert "NOT within seed noise" in verdicts["envpool"]
    assert verdicts["sync"].endswith("the reference")
    assert "Not finished yet: envpool seed 2, multigpu_2ranks seed 1." in text
    assert (tmp_path / "results" / "quick_curves.png").stat().st_size > 10_000
    # a rebuild replaces the generated part and keeps what a person wrote around it
    (tmp_path / "results.md").write_text("intro by hand\n" + text + "\nnotes by hand\n")
    write_export(folder, "envpool", 2, steps, sync1)
    assert learning.report(args) == 0
    again = (tmp_path / "results.md").read_text()
    assert again.startswith("intro by hand\n") and again.endswith("\nnotes by hand\n")
    assert again.count(learning.GENERATED_START) == 1 and "Not finished yet: multigpu_2ranks seed 1." in again


def test_plan_and_commands_resume_a_cut_run(tmp_path):
    import tyro

    args = tyro.cli(learning.Args, args=["run", "--runs-dir", str(tmp_path / "runs"), "--only", "sync"])
    planned = learning.plan(args)
    assert [(p.config.name, p.seed) for p in planned] == [("sync", 1), ("sync", 2)]
    cmd = planned[0].command(args, resume=False)
    assert cmd[:2] == ["python", "cleanrl/ppo_atari.py"] and "--resume" not in cmd
    for flag, value in (("--total-timesteps", "500000"), ("--seed", "1"), ("--vector-env", "sync"),
                        ("--run-name", planned[0].run_name), ("--runs-dir", str(tmp_path / "runs"))):
        assert cmd[cmd.index(flag) + 1] == value
    assert planned[0].command(args, resume=True)[-1] == "--resume"
    two = [p for p in learning.plan(learning.Args("run")) if p.config.name == "multigpu_2ranks"][0]
    cmd = two.command(args, resume=False)
    assert cmd[:4] == ["torchrun", "--standalone", "--nnodes=1", "--nproc_per_node=2"]
    assert cmd[cmd.index("--num-envs") + 1] == "8"  # the same global batch as the single-process runs


def test_unknown_config_is_a_one_line_error(tmp_path):
    from helpers import assert_one_line_error, run_script

    result = run_script(["-m", "cleanrl_utils.learning", "run", "--only", "syncc"], cwd=tmp_path, timeout=60)
    assert_one_line_error(result, "unknown config(s) syncc")
