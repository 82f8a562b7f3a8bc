"""What a long training run shows while it runs: on a terminal a tqdm bar with steps, SPS, the mean return of the last
games and the ETA; elsewhere (a Slurm log, `nohup`, `| tee`) a line after the first iteration, then after the first
iteration that ends `interval` seconds or more after the last line (every iteration with 0), and at the end."""

import sys
import time
from typing import Callable, TextIO

from tqdm import tqdm


def format_duration(seconds: float) -> str:
    hours, rest = divmod(int(round(seconds)), 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


class Progress:
    """Steps done out of `total`; `update` after every iteration. Shows nothing when not `enabled` (other ranks)."""

    def __init__(self, total: int, initial: int = 0, enabled: bool = True, bar: bool = True, interval: float = 30.0,
                 out: TextIO = sys.stdout, clock: Callable[[], float] = time.monotonic):
        self.total, self.initial, self.steps = total, initial, initial
        self.out, self.clock, self.interval, self.start, self.last_line = out, clock, interval, clock(), -float("inf")
        on_terminal = bar and out.isatty()
        self.lines = enabled and not on_terminal
        # tqdm's bar with the script's SPS and ETA in place of tqdm's own rate and remaining time
        self.bar = tqdm(total=total, initial=initial, unit="step", disable=not (enabled and on_terminal), file=out,
                        dynamic_ncols=True, bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]")

    def update(self, steps: int, sps: int, recent_returns: list[float]) -> None:
        self.steps += steps
        now = self.clock()
        done, elapsed = self.steps - self.initial, now - self.start  # the ETA: at this process's rate so far
        eta = "-" if done <= 0 or elapsed <= 0 else format_duration((self.total - self.steps) * elapsed / done)
        ret = f"{sum(recent_returns) / len(recent_returns):.1f}" if recent_returns else "-"
        self.bar.update(steps)
        self.bar.set_postfix({"SPS": sps, "ret": ret, "ETA": eta})  # a dict: in this order (kwargs are sorted)
        if self.lines and (now - self.last_line >= self.interval or self.steps >= self.total):
            print(f"global_step={self.steps}/{self.total} ({100 * self.steps / max(self.total, 1):.0f}%), SPS: {sps}, "
                  f"return: {ret}, ETA: {eta}", file=self.out, flush=True)
            self.last_line = now

    def write(self, line: str) -> None:
        """A line of the run's own (a checkpoint, a note) above the bar, or as a plain line without one."""
        if self.bar.disable:
            print(line, file=self.out, flush=True)
        else:
            self.bar.write(line, file=self.out)

    def close(self) -> None:
        self.bar.close()
