"""Stopping child processes that lead their own process groups (started with ``start_new_session=True`` or
``**own_group()``), so that what they started (torchrun's workers, env worker processes) stops with them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

TERMINATE_GRACE_S = 10.0


def own_group() -> dict[str, Any]:
    """``subprocess.Popen`` arguments for a child that leads a process group of its own in this process's session.

    Unlike ``start_new_session=True`` the child stays in this session, and so in its scheduling group where the
    kernel groups tasks by session (Linux's autogroup, on by default in many distributions): it then competes with
    this session's other processes thread for thread, not as a group of its own that gets its share of the cores
    whatever the others run."""
    if sys.version_info >= (3, 11):
        return {"process_group": 0}
    return {"preexec_fn": os.setpgrp}  # setpgid(0, 0) in the child; Python 3.10 has no process_group


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except ProcessLookupError:  # the group is gone already
        pass


def _group_alive(proc: subprocess.Popen) -> bool:
    try:
        os.killpg(proc.pid, 0)
        return True
    except ProcessLookupError:
        return False


def stop_process_groups(procs: list[subprocess.Popen], grace: float = TERMINATE_GRACE_S) -> list[int]:
    """SIGTERM the process group of every process (a finished one may have left children behind), give them `grace`
    seconds together, then SIGKILL what is left. Returns the exit codes.

    The group, not just the process, is waited for: a shell that dies of the SIGTERM at once leaves its training
    run still saving its checkpoint and writing its last lines."""
    for proc in procs:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
        while _group_alive(proc) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _group_alive(proc):
            _signal_group(proc, signal.SIGKILL)
    return [proc.returncode for proc in procs]
