"""A full disk, on a real small filesystem (a tmpfs mounted for the test; skipped where mounting is not allowed):
whatever write fails (a checkpoint, TensorBoard's log, the saved model, the learning benchmark's exports and report),
the command ends with one error line naming the folder and the space, leaves no partial or temporary file behind,
keeps the last good checkpoint, and the run resumes from it once there is space again."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import torch
from helpers import BREAKOUT, FAST, REPO_ROOT, assert_one_line_error, fill_up, run_each, run_script, write_part

from benchmark.lab import learning
from cleanrl_utils import checkpoint

TINY = [
    "--num-envs",
    "1",
    "--num-steps",
    "16",
    "--num-minibatches",
    "1",
    "--update-epochs",
    "1",
    "--no-progress-bar",
    "--run-name",
    "full",
]
RUN = ["cleanrl/ppo_atari.py", *TINY, "--total-timesteps", "64", "--torch-threads", "1", "--checkpoint-interval", "1"]


@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=30m", "tmpfs", str(disk)], capture_output=True, text=True
    )
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root and mount rights): {mount.stderr.strip()[:200]}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


# Between the runs of a test, one forked child each (see `run_each`): `python -c CODE ARGS...`
FILL_UP = "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); from helpers import fill_up; "
FILL_UP += "fill_up(Path(sys.argv[2]), int(sys.argv[3]))"  # TESTS DISK BLOCKS_LEFT
SNAPSHOT = "import shutil, sys; shutil.copytree(*sys.argv[1:])"  # FROM TO: the run's folder as the run left it
REMOUNT = "import subprocess, sys; subprocess.run(['mount', '-o', 'remount,size=80m', sys.argv[1]], check=True)"


@pytest.mark.slow
def test_a_full_disk_keeps_the_last_checkpoint_and_the_run_resumes_once_there_is_space(tmp_path, small_disk: Path):
    """A checkpoint (model and Adam moments) is about 20 MiB: the first fits in 30 MiB, the second's temporary file
    not. Then the disk is made 80 MiB (space freed) and the run resumes."""
    run_dir = small_disk / "full"
    result, snapshot, remount, resumed = run_each(
        [
            ([*RUN, "--runs-dir", str(small_disk)], tmp_path),
            (["-c", SNAPSHOT, str(run_dir), str(tmp_path / "left")], tmp_path),
            (["-c", REMOUNT, str(small_disk)], tmp_path),
            ([*RUN, "--runs-dir", str(small_disk), "--resume"], tmp_path),
        ],
        env=FAST,
        train=True,
    )
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert len(errors) == 1 and f"cannot write checkpoint.pt in {run_dir}" in errors[0], result.stderr
    assert "MiB free" in errors[0] and "the last one there is kept" in errors[0]
    assert snapshot.returncode == 0 and remount.returncode == 0, snapshot.stderr + remount.stderr
    assert not list((tmp_path / "left").glob("*.tmp*"))  # the failed write took its temporary file with it
    assert torch.load(tmp_path / "left" / "checkpoint.pt", weights_only=True)["iteration"] == 1

    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from iteration 1" in resumed.stdout
    assert torch.load(run_dir / "checkpoint.pt", weights_only=True)["iteration"] == 4
    assert os.path.getsize(run_dir / "checkpoint.pt") > 10 * 2**20


@pytest.mark.slow
def test_a_full_disk_before_the_run_starts_says_so(tmp_path, small_disk: Path):
    fill_up(small_disk)
    result = run_script([*RUN, "--runs-dir", str(small_disk)], cwd=tmp_path, timeout=300, env=FAST)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.returncode == 1 and len(errors) == 1 and "is full: free some space" in errors[0], result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("script", ["cleanrl/ppo_atari.py", "cleanrl/ppo_atari_multigpu.py", "cleanrl/ppo.py"])
def test_a_disk_that_fills_under_the_tensorboard_log_ends_the_run_with_one_line(tmp_path, small_disk: Path, script):
    """TensorBoard's writer writes from a thread of its own and raises the failed write again in the main thread, at
    a later add_scalar or flush: the run ends there with one line, its last checkpoint kept."""
    run = [script, *TINY, "--runs-dir", str(small_disk), *(["--torch-threads", "1"] if "atari" in script else [])]
    # a run, the disk filled up but for a block (the resume starts: its folder is proved writable; the log fills the
    # block), the resume; one forked child each (see `run_each`)
    first, filled, result = run_each(
        [
            ([*run, "--total-timesteps", "16", "--checkpoint-interval", "1"], tmp_path),
            (["-c", FILL_UP, str(Path(__file__).parent), str(small_disk), "1"], tmp_path),
            ([*run, "--resume", "--total-timesteps", "3200", "--checkpoint-interval", "1000"], tmp_path),
        ],
        env=FAST,
        train=True,
    )
    assert first.returncode == 0, first.stderr[-3000:]
    assert filled.returncode == 0, filled.stderr[-3000:]
    assert_one_line_error(
        result,
        f"no space left on the disk of {small_disk / 'full'} (0 MiB free), so the run "
        "stopped; its last checkpoint is kept: free some space, then resume with: ",
    )
    assert result.returncode == 1 and "Exception in thread" not in result.stderr
    assert result.stderr.rstrip().endswith(f"{script} --resume --run-name full --runs-dir {small_disk}")
    run_dir = small_disk / "full"
    assert not list(run_dir.glob("*.tmp*"))
    assert torch.load(run_dir / "checkpoint.pt", weights_only=True)["iteration"] == 1


@pytest.mark.slow
def test_a_model_that_does_not_fit_is_one_line_and_the_checkpoint_stays(tmp_path, small_disk: Path):
    # 24 of the 30 MiB free: the final checkpoint (about 20 MiB) fits, the model (about 6.5 MiB) after it not
    (small_disk / "filler").write_bytes(b"\0" * 6 * 2**20)
    run = ["cleanrl/ppo_atari.py", *TINY, "--torch-threads", "1", "--total-timesteps", "16", "--save-model"]
    result = run_script([*run, "--runs-dir", str(small_disk)], cwd=tmp_path, timeout=300, env=FAST)
    run_dir = small_disk / "full"
    assert_one_line_error(result, f"cannot write ppo_atari.cleanrl_model in {run_dir}: it needs about ")
    assert "MiB free (use the run's checkpoint.pt there instead: it holds the same weights" in result.stderr
    assert not (run_dir / "ppo_atari.cleanrl_model").exists() and not list(run_dir.glob("*.tmp*"))
    assert torch.load(run_dir / "checkpoint.pt", weights_only=True)["iteration"] == 1


def test_the_learning_benchmarks_exports_and_report_are_written_whole_or_not_at_all(tmp_path, small_disk: Path):
    run_dir = tmp_path / "runs" / f"{BREAKOUT}__envpool__1__0"
    run_dir.mkdir(parents=True)
    write_part(run_dir, time.time() - 1000, range(1, 401))  # 400 games: a CSV of 8.5 kB
    results = small_disk / "results"
    export = [
        "export",
        "--profile",
        "full-cpu",
        "--runs-dir",
        str(tmp_path / "runs"),
        "--results-dir",
        str(results),
        "--checkout",
        str(REPO_ROOT),
    ]
    assert learning.main(export) == 0
    folder = results / "full-cpu"
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    assert sorted(before) == ["envpool__1.partial.csv", "envpool__1.partial.json"]

    fill_up(small_disk, blocks_left=1)
    write_part(run_dir, time.time() - 100, [9765])  # the run's last iteration: the plain files would supersede these
    with pytest.raises(
        SystemExit,
        match=rf"^error: cannot write envpool__1\.csv in {re.escape(str(folder))}: the disk "
        r"is full \(0 MiB free\); free some space, then run this command again",
    ):
        learning.main(export)
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == before  # the partial export as it was

    report = [
        "report",
        "--profile",
        "full-cpu",
        "--results-dir",
        str(results),
        "--report-path",
        str(small_disk / "results_10m.md"),
    ]
    with pytest.raises(SystemExit, match=rf"^error: cannot write full-cpu_curves\.png in {re.escape(str(results))}: "):
        learning.main(report)
    assert sorted(path.name for path in small_disk.iterdir()) == ["filler", "results"]
    assert sorted(path.name for path in results.iterdir()) == ["full-cpu"]


def test_a_write_that_fails_for_another_reason_names_that_reason_not_the_disk(tmp_path):
    path = tmp_path / "checkpoint.pt"
    checkpoint.atomic_save({"iteration": 1}, str(path))
    # where this writer's temporary file goes: open() fails with EISDIR, not ENOSPC
    (tmp_path / f"checkpoint.pt.tmp.{os.getpid()}").mkdir()
    with pytest.raises(
        SystemExit,
        match=rf"^error: cannot write checkpoint\.pt in {re.escape(str(tmp_path))}: Is a "
        r"directory \(the last one there is kept; put that right, then resume with "
        r"--resume\)$",
    ):
        checkpoint.atomic_save({"iteration": 2}, str(path))
    assert torch.load(path, weights_only=True)["iteration"] == 1
