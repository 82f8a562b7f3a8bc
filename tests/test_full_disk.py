"""A full disk, on a real small filesystem (a tmpfs mounted for the test; skipped where mounting is not allowed):
a checkpoint that does not fit is a one-line error naming the folder and the space, leaves no temporary file behind,
keeps the last good checkpoint, and the run resumes from it once there is space again."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch
from helpers import run_script

FAST = {"OMP_NUM_THREADS": "1"}
RUN = ["cleanrl/ppo_atari.py", "--num-envs", "1", "--num-steps", "16", "--num-minibatches", "1", "--update-epochs", "1",
       "--total-timesteps", "64", "--torch-threads", "1", "--no-progress-bar", "--checkpoint-interval", "1",
       "--run-name", "full"]


@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=30m", "tmpfs", str(disk)], capture_output=True, text=True)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root and mount rights): {mount.stderr.strip()[:200]}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


@pytest.mark.slow
def test_a_full_disk_keeps_the_last_checkpoint_and_the_run_resumes_once_there_is_space(tmp_path, small_disk: Path):
    # a checkpoint (model and Adam moments) is about 20 MiB: the first fits in 30 MiB, the second's temporary file not
    result = run_script([*RUN, "--runs-dir", str(small_disk)], cwd=tmp_path, timeout=300, env=FAST)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert len(errors) == 1 and f"cannot write checkpoint.pt in {small_disk / 'full'}" in errors[0], result.stderr
    assert "MiB free" in errors[0] and "the last one there is kept" in errors[0]
    run_dir = small_disk / "full"
    assert not list(run_dir.glob("*.tmp"))  # the failed write took its temporary file with it
    assert torch.load(run_dir / "checkpoint.pt", weights_only=True)["iteration"] == 1

    subprocess.run(["mount", "-o", "remount,size=80m", str(small_disk)], check=True)  # space freed
    result = run_script([*RUN, "--runs-dir", str(small_disk), "--resume"], cwd=tmp_path, timeout=300, env=FAST)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resuming from iteration 1" in result.stdout
    assert torch.load(run_dir / "checkpoint.pt", weights_only=True)["iteration"] == 4
    assert os.path.getsize(run_dir / "checkpoint.pt") > 10 * 2**20


@pytest.mark.slow
def test_a_full_disk_before_the_run_starts_says_so(tmp_path, small_disk: Path):
    try:  # fill the 30 MiB to the last block
        with open(small_disk / "filler", "wb", buffering=0) as f:
            while True:
                f.write(b"\0" * 2**16)
    except OSError:
        pass
    result = run_script([*RUN, "--runs-dir", str(small_disk)], cwd=tmp_path, timeout=300, env=FAST)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.returncode == 1 and len(errors) == 1 and "is full: free some space" in errors[0], result.stderr
