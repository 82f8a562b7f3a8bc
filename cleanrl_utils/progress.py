"""What a long training run shows while it runs.

On a terminal: a tqdm bar with steps, SPS, the mean return of the last games and the ETA (the script's own SPS and
ETA, the same figures as in the lines below; tqdm's own rate and remaining time are left out). Elsewhere (a Slurm log,
`nohup`, `| tee`), where a redrawn bar would be noise: one compact line after the first iteration, then after the
first iteration that ends `interval` seconds or more after the last line (every iteration with `interval=0`), and
at the end: a cluster log is never silent for long.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Optional, TextIO

from tqdm import tqdm

LINE_INTERVAL = 30.0
# tqdm's default without its rate and remaining time: "45%|####     | 4500/10000 [00:12, SPS=..., ret=..., ETA=...]"
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


class Progress:
    """Steps done out of `total`; `update` after every iteration. Shows nothing when not `enabled` (other ranks)."""

    def __init__(
        self,
        total: int,
        initial: int = 0,
        enabled: bool = True,
        bar: bool = True,
        interval: float = LINE_INTERVAL,
        out: TextIO = sys.stdout,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.total, self.initial, self.steps = total, initial, initial
        self.out, self.clock, self.interval = out, clock, interval
        self.start = self.last_line = clock()
        self.first = True
        on_terminal = bar and out.isatty()
        self.lines = enabled and not on_terminal
        self.bar = tqdm(total=total, initial=initial, unit="step", disable=not (enabled and on_terminal),
                        dynamic_ncols=True, file=out, bar_format=BAR_FORMAT)  # fmt: skip

    def eta(self) -> Optional[float]:
        """Seconds left at the rate of this process so far (None before the first step)."""
        done, elapsed = self.steps - self.initial, self.clock() - self.start
        return None if done <= 0 or elapsed <= 0 else (self.total - self.steps) * elapsed / done

    def update(self, steps: int, sps: int, recent_returns: list[float]) -> None:
        self.steps += steps
        ret = f"{sum(recent_returns) / len(recent_returns):.1f}" if recent_returns else "-"
        eta = self.eta()
        eta_text = "-" if eta is None else format_duration(eta)
        self.bar.update(steps)
        self.bar.set_postfix({"SPS": sps, "ret": ret, "ETA": eta_text})  # in this order (kwargs are sorted)
        now = self.clock()
        if self.lines and (self.first or now - self.last_line >= self.interval or self.steps >= self.total):
            percent = 100 * self.steps / max(self.total, 1)
            line = f"global_step={self.steps}/{self.total} ({percent:.0f}%), SPS: {sps}, return: {ret}, ETA: {eta_text}"
            print(line, file=self.out, flush=True)
            self.first, self.last_line = False, now

    def write(self, line: str) -> None:
        """A line of the run's own (a checkpoint, a note) above the bar, or as a plain line without one."""
        if self.bar.disable:
            print(line, file=self.out, flush=True)
        else:
            self.bar.write(line, file=self.out)

    def close(self) -> None:
        self.bar.close()
