"""A run's progress: on a terminal a tqdm bar; elsewhere (a log) a line at the start, every `interval` s, at the end."""

import sys
import time
from tqdm import tqdm


def format_duration(seconds: float) -> str:
    hours, rest = divmod(int(round(seconds)), 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


class Progress:
    """`total` units (a run's steps, a sweep's runs) done; shows nothing when not `enabled` (other ranks)."""

    def __init__(
        self, total, initial=0, enabled=True, bar=True, interval=30.0, out=sys.stdout, clock=time.monotonic, unit="step"
    ):
        self.total, self.initial, self.steps = total, initial, initial
        self.out, self.clock, self.interval = out, clock, interval
        self.start, self.last_line = clock(), -float("inf")
        shown, self.lines = enabled and bar and out.isatty(), enabled and not (bar and out.isatty())
        # tqdm's bar with the caller's figures (SPS, ETA...) in place of tqdm's own rate and remaining time
        form = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"
        self.bar = tqdm(
            total=total, initial=initial, unit=unit, file=out, dynamic_ncols=True, disable=not shown, bar_format=form
        )

    def advance(self, n: int, figures: dict) -> None:
        """`n` more done; `figures` after the bar, in their order (keyword arguments would be sorted)."""
        self.steps += n
        self.bar.update(n)
        self.bar.set_postfix(figures)

    def update(self, steps: int, sps: int, recent_returns: list[float]) -> None:
        """A training iteration's `steps` done, at `sps`; the mean of `recent_returns` and the ETA are shown."""
        now = self.clock()
        done, elapsed = self.steps + steps - self.initial, now - self.start  # the ETA: at this process's rate so far
        eta = "-" if done <= 0 or elapsed <= 0 else format_duration((self.total - self.steps - steps) * elapsed / done)
        ret = f"{sum(recent_returns) / len(recent_returns):.1f}" if recent_returns else "-"
        self.advance(steps, {"SPS": sps, "ret": ret, "ETA": eta})
        if self.lines and (now - self.last_line >= self.interval or self.steps >= self.total):
            percent = 100 * self.steps / max(self.total, 1)
            line = f"global_step={self.steps}/{self.total} ({percent:.0f}%), SPS: {sps}, return: {ret}, ETA: {eta}"
            self.write(line)
            self.last_line = now

    def write(self, line: str) -> None:
        """A line of the run's own (a checkpoint, a note) above the bar, or as a plain line without one."""
        if self.bar.disable:
            print(line, file=self.out, flush=True)
        else:
            self.bar.write(line, file=self.out)

    def close(self) -> None:
        self.bar.close()
