"""A trial's runs: each a logged process in its own run folder, which keeps its attempts' wall-clock times."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Optional

from cleanrl_utils.launch.processes import start_logged, stop_process_groups
from cleanrl_utils.launch.runs import holder_pid
from cleanrl_utils.run_events import EventFollower


@dataclass
class Run:
    """One run of a trial: the script on one env id with one seed, in its own run folder."""

    env_id: str
    seed: int
    name: str
    run_dir: str
    words: list[str]
    process: Optional[subprocess.Popen] = None
    follower: Optional[EventFollower] = None
    attempts: list[list[Optional[float]]] = field(default_factory=list)  # [start, end] wall-clock times
    done: bool = False  # finished, or stopped at the time budget
    returncode: Optional[int] = None
    held_by: Optional[str] = None  # a live process of an earlier tuner that still runs in the folder: followed

    @property
    def attempts_path(self) -> str:
        return os.path.join(self.run_dir, "tuner_attempts.json")

    @property
    def log_path(self) -> str:
        return os.path.join(self.run_dir, "tuner.log")

    def load(self, metric: str) -> None:
        """The run folder made, its earlier attempts and events read."""
        os.makedirs(self.run_dir, exist_ok=True)
        if os.path.exists(self.attempts_path):
            with open(self.attempts_path) as f:
                self.attempts = json.load(f)
        self.follower = EventFollower(self.run_dir, metric)
        self.follower.poll()

    def active_seconds(self, wall: float) -> float:
        """The run's seconds of running (over its attempts) at the time `wall`: each from its first logged event."""
        total = 0.0
        starts = sorted(self.follower.file_starts) if self.follower else []
        for i, (start, end) in enumerate(self.attempts):
            live = self.process is not None and i == len(self.attempts) - 1
            first = next((f for f in starts if f >= start and (end is None or f <= end)), None)
            if first is None:  # nothing logged yet in this attempt
                continue
            if end is None:  # the live attempt, or one whose tuner died: until its last logged point
                end = time.time() if live else self.follower.last_wall
            total += max(0.0, min(end, wall) - first)
        return total

    def save_attempts(self) -> None:
        with open(self.attempts_path, "w") as f:
            json.dump(self.attempts, f)

    def start(self, threads: int) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": str(threads)}
        self.process = start_logged(self.words, self.log_path, env)
        self.attempts.append([time.time(), None])
        self.save_attempts()

    def finish(self) -> None:
        if self.process is None:
            return
        self.returncode = self.process.wait()
        self.attempts[-1][1] = time.time()
        self.save_attempts()
        self.process = None


def end_runs(runs: list[Run]) -> None:
    """Stop the runs at their checkpoints (SIGTERM to their groups), an earlier tuner's ones on this host too."""
    live = [r for r in runs if r.process is not None and r.process.poll() is None]
    for run in runs:
        pid = holder_pid(run.held_by) if run.held_by else None
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                try:
                    os.killpg(pid, signal.SIGTERM)  # it leads its process group, as the tuner started it
                except ProcessLookupError:
                    os.kill(pid, signal.SIGTERM)
        run.held_by = None
    stop_process_groups([r.process for r in live])
    for run in runs:
        run.finish()
