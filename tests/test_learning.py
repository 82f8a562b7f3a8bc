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
    write_export(folder, "ale", 2, steps, sync1 + 0.6)
    write_export(folder, "envpool", 1, steps, sync1 * 0 + 0.5)  # never learns: far outside, but one seed only
    args = args_for(tmp_path)
    assert learning.report(args) == 0
    text = (tmp_path / "results.md").read_text()
    assert "| sync | 1 | 1.00 | 2.00 | 3.00 | 4.00 | 5.00 |" in text
    assert "| **sync, mean** | 2 seeds | 1.50 | 2.50 | 3.50 | 4.50 | 5.50 |" in text
    assert "| ale | 1 | 1.50 | 2.50 | 3.50 | 4.50 | 5.50 |" in text
    assert "2.03 | 3.60 | 7.81 | 11.13 | 12.44" in text  # CleanRL's anchor row
    verdicts = {line.split("**")[1]: line for line in text.splitlines() if line.startswith("- **")}
    # seeds are the unit: last-200k means sync 4.5, 5.5; ale 5.0, 5.1; envpool 0.5. Seed-to-seed std pooled over
    # sync and ale: sqrt((0.5 + 0.005) / 2) = 0.5025 (2 degrees of freedom)
    assert "within seed noise" in verdicts["ale"] and "NOT" not in verdicts["ale"]
    assert "difference of the means +0.05, tolerance 1.00 = 2 standard errors from the seed-to-seed std 0.50 (2 " \
           "degrees of freedom)" in verdicts["ale"]
    # one seed is judged against the pooled spread: 2 x 0.5025 x sqrt(1 + 1/2) = 1.23
    assert verdicts["envpool"].startswith("- **envpool**: NOT within seed noise of sync: last 200k steps, per seed "
                                          "0.50 vs sync 4.50, 5.50; difference of the means -4.50, tolerance 1.23")
    assert verdicts["sync"].endswith("the reference")
    assert "Not finished yet: envpool seed 2, multigpu_2ranks seed 1, sync_1env seed 1." in text
    assert (tmp_path / "results" / "quick_curves.png").stat().st_size > 10_000
    # a rebuild replaces the generated part and keeps what a person wrote around it
    (tmp_path / "results.md").write_text("intro by hand\n" + text + "\nnotes by hand\n")
    write_export(folder, "envpool", 2, steps, sync1 * 0 + 0.6)
    assert learning.report(args) == 0
    again = (tmp_path / "results.md").read_text()
    assert again.startswith("intro by hand\n") and again.endswith("\nnotes by hand\n")
    assert again.count(learning.GENERATED_START) == 1 and "Not finished yet: multigpu_2ranks seed 1, sync_1env seed 1." in again
    assert "- **envpool**: NOT within seed noise of sync" in again
    assert "seed-to-seed std 0.41 (3 degrees of freedom)" in again  # envpool's 2 seeds join the pooled spread


def test_verdicts_wait_for_a_spread_and_leave_the_baseline_out(tmp_path):
    pytest.importorskip("matplotlib")
    folder = tmp_path / "results" / "quick"
    steps = np.arange(1, 501) * 1000
    write_export(folder, "sync", 1, steps, np.full(500, 4.0))
    write_export(folder, "ale", 1, steps, np.full(500, 9.0))
    write_export(folder, "sync_1env", 1, steps, np.full(500, 1.0))
    write_export(folder, "sync_1env", 2, steps, np.full(500, 7.0))  # its spread is not the 8-env game's
    assert learning.report(args_for(tmp_path)) == 0
    text = (tmp_path / "results.md").read_text()
    verdicts = {line.split("**")[1]: line for line in text.splitlines() if line.startswith("- **")}
    assert "undecided until some configuration has 2 seeds" in verdicts["ale"]
    assert "per seed 9.00 vs sync 4.00" in verdicts["ale"]
    assert "not a backend" in verdicts["sync_1env"]


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


TINY_PROFILE = """
import sys
from cleanrl_utils import learning as L
flags = ("--vector-env", "sync", "--num-envs", "4", "--num-steps", "64", "--num-minibatches", "2", "--update-epochs", "1")
L.PROFILES["quick"] = {"env_ids": [L.ENV_ID], "total_timesteps": 2048,
                       "configs": [L.Config("sync", tuple(L.SINGLE), flags, (1,))]}
sys.exit(L.main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_a_stopped_benchmark_resumes_its_cut_run_and_exports_it(tmp_path):
    """The benchmark stopped (SIGTERM, as a scheduler does) mid-run keeps the run's checkpoint; started again it
    resumes that run, which ends with one continuous log, and exports it."""
    import signal
    import subprocess
    import sys
    import time

    from helpers import REPO_ROOT, read_scalars

    (tmp_path / "cleanrl").symlink_to(REPO_ROOT / "cleanrl")
    argv = [sys.executable, "-c", TINY_PROFILE, "run", "--runs-dir", "runs", "--results-dir", "results",
            "--checkpoint-interval", "1"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    first = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_dir = tmp_path / "runs" / f"{learning.ENV_ID}__sync__1__0"
    deadline = time.time() + 300
    while not (run_dir / "checkpoint.pt").exists() and time.time() < deadline and first.poll() is None:
        time.sleep(0.2)
    first.send_signal(signal.SIGTERM)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 130, err[-2000:]
    assert "starting" in out and "keeps its checkpoint" in err
    assert not (tmp_path / "results" / "quick" / "sync__1.json").exists()
    cut = [s for s, _ in read_scalars(run_dir, "losses/value_loss")]
    assert 0 < len(cut) < 8

    second = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resuming" in second.stdout and "--resume" in second.stdout
    assert [s for s, _ in read_scalars(run_dir, "losses/value_loss")] == list(range(256, 2049, 256))
    meta = json.loads((tmp_path / "results" / "quick" / "sync__1.json").read_text())
    assert meta["steps"] == 2048 and meta["episodes"] >= 1 and "--resume" not in meta["command"]
    # a third start finds it finished and runs nothing
    third = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert third.returncode == 0 and "finished" in third.stdout and "starting" not in third.stdout
