"""Interleaved A/B of training-script variants: steady SPS (steps/s after the first iteration, from the TensorBoard
events' wall times), several rounds, each round every variant once, the order reversed every other round so that a
drift of the machine's speed hits all variants alike. Prints one row per variant with every round and the median
ratio to the first variant.

    python -m benchmark.lab.ab_sps --variants "all devices=python cleanrl/ppo_atari.py" \
        "no slices=python cleanrl/ppo_atari.py --torch-threads 2" --rounds 4 -- --vector-env envpool --total-timesteps 16384
"""

from __future__ import annotations

import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

import tyro
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


@dataclass
class Args:
    variants: list[str]
    """NAME=COMMAND, the first is the reference"""
    rounds: int = 4
    """each variant runs once per round"""
    common: tyro.conf.Positional[list[str]] = field(default_factory=list)
    """flags appended to every command (after `--`)"""


def steady_sps(runs_dir: str) -> float:
    run = os.path.join(runs_dir, os.listdir(runs_dir)[0])
    acc = EventAccumulator(run, size_guidance={"scalars": 0})
    acc.Reload()
    events = acc.Scalars("charts/SPS")
    return (events[-1].step - events[0].step) / (events[-1].wall_time - events[0].wall_time)


def learn_seconds(runs_dir: str) -> float | None:
    """The update's median seconds per iteration after the first (`perf/learn_seconds`), if the script logs it."""
    run = os.path.join(runs_dir, os.listdir(runs_dir)[0])
    acc = EventAccumulator(run, size_guidance={"scalars": 0})
    acc.Reload()
    if "perf/learn_seconds" not in acc.Tags()["scalars"]:
        return None
    return statistics.median(e.value for e in acc.Scalars("perf/learn_seconds")[1:])


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def main() -> int:
    args = tyro.cli(Args)
    named = [v.split("=", 1) for v in args.variants]
    results: dict[str, list[float]] = {name: [] for name, _ in named}
    learn: dict[str, list[float]] = {name: [] for name, _ in named}
    for r in range(args.rounds):
        order = named if r % 2 == 0 else named[::-1]
        for name, command in order:
            with tempfile.TemporaryDirectory() as runs:
                cmd = [*shlex.split(command), *args.common, "--runs-dir", runs, "--no-progress-bar"]
                done = subprocess.run(cmd, capture_output=True, text=True)
                if done.returncode != 0:
                    print(f"error: {name} failed: {done.stderr[-2000:]}", file=sys.stderr)
                    return 1
                results[name].append(steady_sps(runs))
                seconds = learn_seconds(runs)
                if seconds is not None:
                    learn[name].append(seconds)
            print(f"round {r + 1}: {name}: {results[name][-1]:.0f} SPS", flush=True)
    ref = results[named[0][0]]
    print(f"\n{cpu_name()}, {os.cpu_count()} cores; common flags: {shlex.join(args.common)}")
    print(
        "| variant | steady SPS per round | median ratio to the first | update s per iteration (median) |\n"
        "|---|---|---|---|"
    )
    for name, values in results.items():
        ratio = statistics.median(v / w for v, w in zip(values, ref))
        update = f"{statistics.median(learn[name]):.2f}" if learn[name] else "not logged"
        print(f"| {name} | {' / '.join(f'{v:.0f}' for v in values)} | {ratio:.3f} | {update} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
