"""Stopping child processes that lead their own process groups (started with ``start_new_session=True``), so that
what they started (torchrun's workers, env worker processes) stops with them."""

from __future__ import annotations

import os
import signal
import subprocess
import time

TERMINATE_GRACE_S = 10.0


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
