"""Logged child processes that lead their own process groups, so that what they start stops with them."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from collections import deque
from typing import Any, Union

TERMINATE_GRACE_S = 10.0


def own_group() -> dict[str, Any]:
    """``Popen`` arguments for a child leading its own process group, in this session (so in the same autogroup of
    the scheduler, not given a share of the cores of its own as ``start_new_session`` would)."""
    if sys.version_info >= (3, 11):
        return {"process_group": 0}
    return {"preexec_fn": os.setpgrp}  # setpgid(0, 0) in the child; Python 3.10 has no process_group


def start_logged(command: Union[str, list[str]], log_path: str, env: dict[str, str], cwd=None) -> subprocess.Popen:
    """Start `command` (a string: through the shell) in its own group, its output appended to `log_path`."""
    with open(log_path, "a") as log:
        log.write(f"$ {command if isinstance(command, str) else shlex.join(command)}\n")
        log.flush()
        return subprocess.Popen(
            command,
            shell=isinstance(command, str),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            **own_group(),
        )


def log_tail(path: str, lines: int) -> list[str]:
    """The last `lines` lines of a log (none if it cannot be read)."""
    try:
        with open(path, errors="replace") as f:
            return [line.rstrip("\n") for line in deque(f, maxlen=lines)]
    except OSError:
        return []


def signal_group(pid: int, signum: int) -> None:
    """Signal the process group that `pid` leads (nothing if it is gone already)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signum)


def _group_alive(proc: subprocess.Popen) -> bool:
    try:
        os.killpg(proc.pid, 0)
        return True
    except ProcessLookupError:
        return False


def stop_process_groups(procs: list[subprocess.Popen], grace: float = TERMINATE_GRACE_S) -> list[int]:
    """SIGTERM every process's group, wait up to `grace` seconds for the groups (a shell dies first, its run still
    saves its checkpoint), then SIGKILL what is left. Returns the exit codes."""
    for proc in procs:
        signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        while _group_alive(proc) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _group_alive(proc):
            signal_group(proc.pid, signal.SIGKILL)
    return [proc.returncode for proc in procs]
