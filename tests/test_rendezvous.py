"""A missing node says so: `python -m cleanrl_utils.launch.rendezvous` (torchrun plus a watcher) prints, while it waits,
what the rendezvous waits for, and when the join timeout passes ends with one line (a real torchrun, one of two nodes
started)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from helpers import REPO_ROOT


@pytest.mark.slow
@pytest.mark.torchrun
def test_a_node_that_never_starts_is_named_then_one_line(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [
        sys.executable, "-m", "cleanrl_utils.launch.rendezvous", "--nnodes=2", "--node-rank=0", "--nproc-per-node=1",
        "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-conf", "join_timeout=20",
        str(REPO_ROOT / "cleanrl/ppo_atari_multigpu.py"), "--total-timesteps", "256",
    ]  # fmt: skip
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    assert proc.poll() is None, first  # said while the rendezvous still waits (no seconds asserted: CI may be loaded)
    assert first.startswith(f"waiting for nodes: 1 of 2 joined the rendezvous at 127.0.0.1:{port} ("), first
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: 1 of 2 nodes joined the rendezvous"), err
    assert "--rdzv-conf join_timeout=SECONDS" in lines[0] and "Traceback" not in err + out
