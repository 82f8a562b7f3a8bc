"""A run's TensorBoard scalars, read while the run writes them, across the event files of all its attempts (a resumed
attempt drops what the cut one logged after its checkpoint, as TensorBoard does)."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field

import numpy as np
from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader
from tensorboard.compat.proto.event_pb2 import SessionLog


def _file_order(path: str) -> tuple[int, float, str]:
    """Event files in the order they were started: the time in the name (events.out.tfevents.TIME...), then mtime."""
    parts = os.path.basename(path).split(".")
    stamp = int(parts[3]) if len(parts) > 3 and parts[3].isdigit() else 0
    return stamp, os.path.getmtime(path), path


def event_files(run_dir: str) -> list[str]:
    """The TensorBoard event files in `run_dir`, in the order they were started."""
    return sorted(glob.glob(os.path.join(glob.escape(run_dir), "events.out.tfevents.*")), key=_file_order)


@dataclass
class EventFollower:
    """The points of `tag` in the run folder `run_dir`, read on from where the last `poll` stopped."""

    run_dir: str
    tag: str
    steps: list[int] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    last_step: int = 0  # the furthest step of any tag
    last_wall: float = 0.0  # the wall-clock time of the newest point of any tag
    file_starts: list[float] = field(default_factory=list)  # each event file's first event: an attempt's start
    tags: set[str] = field(default_factory=set)  # every scalar tag seen
    texts: dict[str, str] = field(default_factory=dict)  # the text summaries, e.g. the logged hyperparameters
    _loaders: dict[str, LegacyEventFileLoader] = field(default_factory=dict)

    def poll(self) -> None:
        """Read what was written since the last call (a record cut short is read on the next call)."""
        for path in event_files(self.run_dir):
            loader = self._loaders.setdefault(path, LegacyEventFileLoader(path))
            for event in loader.Load():
                if len(self.file_starts) < len(self._loaders):
                    self.file_starts.append(event.wall_time)
                if event.HasField("session_log") and event.session_log.status == SessionLog.START:
                    self._purge(event.step)
                if not event.HasField("summary"):
                    continue
                for value in event.summary.value:
                    self.tags.add(value.tag)
                    self.last_step = max(self.last_step, event.step)
                    self.last_wall = max(self.last_wall, event.wall_time)
                    if value.metadata.plugin_data.plugin_name == "text":
                        self.texts[value.tag] = value.tensor.string_val[0].decode(errors="replace")
                    if value.tag != self.tag:
                        continue
                    number = (
                        value.simple_value
                        if value.HasField("simple_value")
                        else (value.tensor.float_val[0] if value.tensor.float_val else float("nan"))
                    )
                    self.steps.append(event.step)
                    self.walls.append(event.wall_time)
                    self.values.append(float(number))

    def _purge(self, step: int) -> None:
        """A resumed attempt's start: the points at `step` and after, logged by the cut attempt, are dropped."""
        keep = [i for i, s in enumerate(self.steps) if s < step]
        self.steps, self.walls, self.values = ([xs[i] for i in keep] for xs in (self.steps, self.walls, self.values))
        self.last_step = min(self.last_step, step)

    def mean_last(
        self, window: int, until_step: float = np.inf, times: np.ndarray | None = None, until_time: float = np.inf
    ) -> float | None:
        """The mean of the last `window` points up to a step and (`times`: each point's time) a time, or None."""
        keep = np.asarray(self.steps, dtype=np.float64) <= until_step
        if times is not None:
            keep &= np.asarray(times) <= until_time
        chosen = np.asarray(self.values, dtype=np.float64)[keep]
        return float(np.mean(chosen[-window:])) if len(chosen) else None
