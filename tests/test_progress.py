"""cleanrl_utils/progress.py: what a run shows while it runs (bar or lines)."""

from __future__ import annotations

import io

from cleanrl_utils.progress import Progress, format_duration


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lines(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


def test_without_a_terminal_a_line_after_the_first_iteration_then_at_least_every_interval():
    out, clock = io.StringIO(), Clock()  # a StringIO is not a terminal: no bar
    progress = Progress(1000, out=out, clock=clock, interval=30.0)
    clock.now += 10
    progress.update(100, sps=10, recent_returns=[])
    assert lines(out) == ["global_step=100/1000 (10%), SPS: 10, return: -, ETA: 0:01:30"]
    for _ in range(2):  # 10 s per iteration: no line before 30 s have passed since the last one
        clock.now += 10
        progress.update(100, sps=10, recent_returns=[1.0, 2.0])
    assert len(lines(out)) == 1
    clock.now += 10
    progress.update(100, sps=10, recent_returns=[1.0, 2.0])
    assert lines(out)[-1] == "global_step=400/1000 (40%), SPS: 10, return: 1.5, ETA: 0:01:00"
    clock.now += 100  # the last update always prints
    progress.update(600, sps=10, recent_returns=[3.0])
    assert lines(out)[-1].startswith("global_step=1000/1000 (100%)") and lines(out)[-1].endswith("ETA: 0:00:00")
    assert "\r" not in out.getvalue()
    progress.close()


def test_eta_counts_only_the_steps_of_this_process_after_a_resume():
    out, clock = io.StringIO(), Clock()
    progress = Progress(1000, initial=500, out=out, clock=clock)
    clock.now += 50
    progress.update(100, sps=2, recent_returns=[])
    # 100 steps in 50 s, 400 to go: 200 s
    assert lines(out) == ["global_step=600/1000 (60%), SPS: 2, return: -, ETA: 0:03:20"]


def test_interval_zero_prints_every_iteration_and_a_disabled_rank_prints_nothing():
    out = io.StringIO()
    progress = Progress(300, out=out, interval=0)
    for _ in range(3):
        progress.update(100, sps=1, recent_returns=[])
    assert len(lines(out)) == 3
    quiet = io.StringIO()
    other_rank = Progress(300, out=quiet, enabled=False)
    other_rank.update(300, sps=1, recent_returns=[])
    assert quiet.getvalue() == ""


def test_format_duration():
    assert format_duration(59.6) == "0:01:00" and format_duration(3 * 3600 + 61) == "3:01:01"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_shows_one_rate_and_one_eta():
    out, clock = Terminal(), Clock()
    progress = Progress(1000, out=out, clock=clock)
    clock.now += 10
    progress.update(100, sps=10, recent_returns=[2.0])
    progress.close()
    last = out.getvalue().strip().split("\r")[-1]
    assert last.endswith("100/1000 [00:00, SPS=10, ret=2.0, ETA=0:01:30]"), last
    assert "/s" not in out.getvalue() and "<" not in out.getvalue()  # not tqdm's rate and remaining time as well
    assert "global_step=" not in out.getvalue()  # the bar instead of lines


def test_a_line_of_the_run_goes_above_the_bar_or_plainly_without_one():
    out = Terminal()
    progress = Progress(1000, out=out, clock=Clock())
    progress.update(100, sps=10, recent_returns=[])
    progress.write("checkpoint: iteration 1, global step 100")
    progress.close()
    text = out.getvalue()
    assert "checkpoint: iteration 1, global step 100\n" in text  # a line of its own, the bar redrawn below it
    assert text.rstrip().split("\r")[-1].startswith(" 10%") or "100/1000" in text.rstrip().split("\n")[-1]
    plain = io.StringIO()
    Progress(1000, out=plain).write("checkpoint: iteration 1, global step 100")
    assert plain.getvalue() == "checkpoint: iteration 1, global step 100\n"
