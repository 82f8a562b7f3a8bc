"""The learning benchmark: does every backend learn as CleanRL does? Runs, keeps and reports (docs/results.md).

    python -m cleanrl_utils.learning run              # the `quick` profile: trains what has not finished yet
    python -m cleanrl_utils.learning report           # docs/results.md and its PNGs from what has finished
    python -m cleanrl_utils.learning commands --profile full   # the runs of CleanRL's benchmark, for a cluster

A run is finished when its episodes are exported to ``{results_dir}/{profile}/{config}__{seed}.csv`` (step, wall
seconds, full-game return, length in frames) with a ``.json`` beside it (command, steps, seconds, SPS, machine,
date). Those files are committed, so the report can be rebuilt on any machine. A run that was stopped (Ctrl-C,
SIGTERM from a scheduler, the end of a session) keeps its checkpoint in ``{runs_dir}/{run_name}`` and resumes from
it when ``run`` is started again (``--resume``); every run writes a checkpoint every ``--checkpoint-interval``
iterations and when it stops.
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import tyro

from cleanrl_utils import plot
from cleanrl_utils.validation import fail

ENV_ID = "BreakoutNoFrameskip-v4"
WINDOW = 100_000  # steps per window of the results table (the anchors below use the same)
# CleanRL's own ppo_atari.py (patched only to run on gymnasium 1.x), Breakout, seed 1, 8 envs, 500k steps on a
# 2-core machine: mean full-game return per 100k-step window (measured outside this benchmark, which does not rerun it)
ANCHORS = {
    "CleanRL ppo_atari.py, SAME_STEP autoreset (its loop's semantics)": [2.03, 3.60, 7.81, 11.13, 12.44],
    "CleanRL ppo_atari.py, NEXT_STEP autoreset (gymnasium 1.x default)": [1.99, 4.16, 7.57, 8.46, 7.74],
}
PUBLISHED = "CleanRL at 10M steps, 3 seeds: Breakout 414.66 ± 28.09, Pong 20.36 ± 0.20, BeamRider 1915.93 ± 484.58"
SINGLE = ["python", "cleanrl/ppo_atari.py"]
BASELINES = {"sync_1env"}  # configs that are not a backend of the 8-env game: no verdict, not in the seed noise
TWO_RANKS = ["torchrun", "--standalone", "--nnodes=1", "--nproc_per_node=2", "cleanrl/ppo_atari_multigpu.py"]


@dataclass(frozen=True)
class Config:
    """One line of the results: a script and its backend, CleanRL's hyperparameters otherwise."""

    name: str
    launcher: tuple[str, ...]
    flags: tuple[str, ...]
    seeds: tuple[int, ...]


PROFILES: dict[str, dict] = {
    # Breakout, 500k steps, 8 envs in all (the 2-rank run: 4 per rank, the same global batch of 1,024)
    "quick": {
        "env_ids": [ENV_ID],
        "total_timesteps": 500_000,
        "configs": [
            Config("sync", tuple(SINGLE), ("--vector-env", "sync"), (1, 2)),
            Config("ale", tuple(SINGLE), ("--vector-env", "ale"), (1,)),
            Config("envpool", tuple(SINGLE), ("--vector-env", "envpool"), (1, 2)),
            Config("multigpu_2ranks", tuple(TWO_RANKS), ("--vector-env", "sync", "--num-envs", "8"), (1,)),
            # the parallel-sampling write-up's baseline: one env in one process (its claims: cleanrl_utils/seed_claims.py)
            Config("sync_1env", tuple(SINGLE), ("--vector-env", "sync", "--num-envs", "1"), (1,)),
        ],
    },
    # CleanRL's benchmark: 3 games, 10M steps, 3 seeds (a cluster's job: see `commands` and benchmark/learning.sh)
    "full": {
        "env_ids": ["BreakoutNoFrameskip-v4", "PongNoFrameskip-v4", "BeamRiderNoFrameskip-v4"],
        "total_timesteps": 10_000_000,
        "configs": [
            Config("sync", tuple(SINGLE), ("--vector-env", "sync"), (1, 2, 3)),
            Config("envpool", tuple(SINGLE), ("--vector-env", "envpool"), (1, 2, 3)),
        ],
    },
    # CleanRL's benchmark at full length on one CPU machine: Breakout and Pong, 10M steps, seed 1, the fastest
    # backend; hours per run, so it runs in parts (`--max-hours`), each resuming the last one's checkpoint
    "full-cpu": {
        "env_ids": ["BreakoutNoFrameskip-v4", "PongNoFrameskip-v4"],
        "total_timesteps": 10_000_000,
        "configs": [Config("envpool", tuple(SINGLE), ("--vector-env", "envpool"), (1,))],
    },
}


@dataclass
class Args:
    action: tyro.conf.Positional[Literal["run", "report", "commands", "import"]]
    """`run` what has not finished, `report` from what has, print the `commands`, or `import` a finished run"""
    profile: Literal["quick", "full", "full-cpu"] = "quick"
    """`quick`: Breakout 500k steps per run (about an hour each on 2 cores); `full`: CleanRL's 10M-step benchmark
    (a cluster's job); `full-cpu`: Breakout and Pong to 10M steps, seed 1, on this machine in parts"""
    max_hours: float = 0.0
    """`run`: end this part after so many hours (the run checkpoints and stops; `run` again continues it); 0: no limit"""
    runs_dir: str = "runs/learning"
    """where the runs write their logs and checkpoints"""
    results_dir: str = "docs/results"
    """where finished runs are exported (committed) and the report's PNGs go"""
    report_path: str = "docs/results.md"
    """the report"""
    only: list[str] = field(default_factory=list)
    """`run`: only these configs (e.g. `--only sync ale`), to run the benchmark in parts"""
    checkpoint_interval: int = 25
    """iterations between checkpoints of a run"""
    run_dir: str = ""
    """`import`: the finished run's TensorBoard folder"""
    config: str = ""
    """`import`: its config name"""
    seed: int = 1
    """`import`: its seed"""
    command: str = ""
    """`import`: the command that made it, as it was typed"""
    length_unit: str = "frames"
    """`import`: the unit of its logged episodic_length (runs before the frames unit logged agent steps)"""


@dataclass
class Planned:
    config: Config
    env_id: str
    seed: int
    total_timesteps: int

    @property
    def run_name(self) -> str:  # plot.parse_run_name's layout, with a fixed last part so that a resume finds it
        return f"{self.env_id}__{self.config.name}__{self.seed}__0"

    def export_base(self, args: Args) -> str:
        game = "" if self.env_id == ENV_ID else self.env_id.split("NoFrameskip")[0] + "_"
        return os.path.join(args.results_dir, args.profile, f"{game}{self.config.name}__{self.seed}")

    def command(self, args: Args, resume: bool) -> list[str]:
        cmd = [*self.config.launcher, "--env-id", self.env_id, "--seed", str(self.seed),
               "--total-timesteps", str(self.total_timesteps), "--exp-name", self.config.name,
               *self.config.flags, "--runs-dir", args.runs_dir, "--run-name", self.run_name,
               "--checkpoint-interval", str(args.checkpoint_interval), "--no-progress-bar"]
        return cmd + ["--resume"] if resume else cmd


def plan(args: Args) -> list[Planned]:
    profile = PROFILES[args.profile]
    unknown = sorted(set(args.only) - {c.name for c in profile["configs"]})
    if unknown:
        fail(f"unknown config(s) {', '.join(unknown)}; the {args.profile} profile has "
             f"{', '.join(c.name for c in profile['configs'])}")
    return [Planned(c, env_id, seed, profile["total_timesteps"])
            for env_id in profile["env_ids"] for c in profile["configs"] if not args.only or c.name in args.only
            for seed in c.seeds]


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores"


def export(run_dir: str, base: str, meta: dict) -> None:
    """The run's episodes to ``base.csv`` and what made them to ``base.json``."""
    returns = plot.load_run(run_dir, "charts/episodic_return")
    lengths = plot.load_run(run_dir, "charts/episodic_length")
    sps = plot.load_run(run_dir, "charts/SPS")
    if any(isinstance(curve, str) for curve in (returns, lengths, sps)):
        fail(f"{run_dir} logged no finished game: nothing to export")
    os.makedirs(os.path.dirname(base), exist_ok=True)
    with open(base + ".csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["step", "wall_seconds", "return", "length"])
        for row in zip(returns.steps, returns.times, returns.values, lengths.values):
            out.writerow([int(row[0]), f"{row[1]:.1f}", f"{row[2]:g}", int(row[3])])
    meta = {**meta, "steps": int(sps.steps[-1]), "wall_seconds": round(sps.runtime, 1),
            "sps": round(sps.steps[-1] / max(sps.runtime, 1e-9), 1), "episodes": len(returns.values)}
    with open(base + ".json", "w") as f:
        json.dump(meta, f, indent=1)
    print(f"exported {run_dir} -> {base}.csv ({len(returns.values)} games)", flush=True)


def run(args: Args) -> int:
    stop = {"requested": False}

    def on_signal(signum, frame):  # pass the stop on to the run (it checkpoints), then end after it
        stop["requested"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    deadline = time.time() + args.max_hours * 3600 if args.max_hours > 0 else float("inf")
    for p in plan(args):
        base = p.export_base(args)
        if os.path.exists(base + ".json"):
            print(f"{p.config.name} seed {p.seed}: finished ({base}.json)", flush=True)
            continue
        run_dir = os.path.join(args.runs_dir, p.run_name)
        resume = os.path.exists(os.path.join(run_dir, "checkpoint.pt"))
        cmd = p.command(args, resume)
        print(f"{p.config.name} seed {p.seed}: {'resuming' if resume else 'starting'}: {shlex.join(cmd)}", flush=True)
        started = time.time()
        part = {"started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "resumed": resume, "machine": machine()}
        child = subprocess.Popen(cmd, start_new_session=True)
        timed_out = False
        while child.poll() is None:
            timed_out = time.time() > deadline
            if stop["requested"] or timed_out:
                os.killpg(child.pid, signal.SIGTERM)
                child.wait()
                break
            time.sleep(0.5)
        part.update(ended=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    seconds=round(time.time() - started, 1), returncode=child.returncode)
        if os.path.isdir(run_dir):  # one line per part: how often the run was resumed, on which machine
            with open(os.path.join(run_dir, "parts.jsonl"), "a") as f:
                f.write(json.dumps(part) + "\n")
        if stop["requested"] or timed_out:
            why = f"the part's {args.max_hours:g} hours are up" if timed_out else "stopped"
            print(f"{why}: {p.config.name} seed {p.seed} keeps its checkpoint in {run_dir}; run again to resume",
                  file=sys.stderr)
            return 0 if timed_out else 130
        if child.returncode != 0:
            print(f"error: {p.config.name} seed {p.seed} exited with {child.returncode}; its log is above",
                  file=sys.stderr)
            return 1
        export(run_dir, base, {"config": p.config.name, "seed": p.seed, "env_id": p.env_id,
                               "command": shlex.join(p.command(args, False)), "machine": machine(),
                               "length_unit": "frames",
                               "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                               "last_part_seconds": round(time.time() - started, 1)})
    return 0


@dataclass
class Finished:
    config: str
    seed: int
    env_id: str
    meta: dict
    steps: np.ndarray
    times: np.ndarray
    returns: np.ndarray


def load_finished(args: Args) -> list[Finished]:
    folder = os.path.join(args.results_dir, args.profile)
    runs = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if not name.endswith(".json"):
            continue
        with open(os.path.join(folder, name)) as f:
            meta = json.load(f)
        data = np.loadtxt(os.path.join(folder, name[:-5] + ".csv"), delimiter=",", skiprows=1, ndmin=2)
        runs.append(Finished(meta["config"], meta["seed"], meta.get("env_id", ENV_ID), meta,
                             data[:, 0], data[:, 1], data[:, 2]))
    return runs


def window_means(run: Finished, total: int) -> list[float]:
    """Mean full-game return of the games that ended in each 100k-step window."""
    edges = range(0, total, WINDOW)
    return [float(run.returns[(run.steps > lo) & (run.steps <= lo + WINDOW)].mean()) for lo in edges]


def late_mean(r: Finished, total: int) -> float:
    """A run's mean full-game return over the last two windows (the learnt part of the curve)."""
    return float(r.returns[r.steps > total - 2 * WINDOW].mean())


def seed_noise(by_config: dict[str, list[Finished]], total: int) -> tuple[float, int]:
    """The standard deviation between seeds of `late_mean`, pooled over the configurations with 2 seeds or more
    (all play the same game and train alike: tests/test_backend_training.py), and its degrees of freedom."""
    squares, dof = 0.0, 0
    for name, runs in by_config.items():
        if name in BASELINES or len(runs) < 2:
            continue
        means = np.array([late_mean(r, total) for r in runs])
        squares += float(((means - means.mean()) ** 2).sum())
        dof += len(runs) - 1
    return (float(np.sqrt(squares / dof)) if dof else float("nan")), dof


def verdict(name: str, runs: list[Finished], by_config: dict[str, list[Finished]], total: int) -> str:
    """Within seed noise of sync or not: the difference of the mean over seeds of `late_mean` against 2 standard
    errors of that difference, from the pooled seed-to-seed standard deviation (a two-sample t-test's footing;
    with a few seeds the deviation itself is very uncertain, so a verdict is coarse)."""
    if name == "sync":
        return "the reference"
    if name in BASELINES:
        return "not a backend: the single-env baseline of the claims about parallel sampling (another batch size; see its section)"
    sync = by_config.get("sync", [])
    if not sync:
        return "no finished sync run to compare with"
    ours, ref = [late_mean(r, total) for r in runs], [late_mean(r, total) for r in sync]
    sigma, dof = seed_noise(by_config, total)
    seeds = (f"last 200k steps, per seed {', '.join(f'{v:.2f}' for v in ours)} vs sync "
             f"{', '.join(f'{v:.2f}' for v in ref)}")
    if not dof:
        return f"undecided until some configuration has 2 seeds (the seed-to-seed spread): {seeds}"
    diff = float(np.mean(ours) - np.mean(ref))
    tolerance = 2 * sigma * np.sqrt(1 / len(ours) + 1 / len(ref))
    figures = (f"{seeds}; difference of the means {diff:+.2f}, tolerance {tolerance:.2f} = 2 standard errors from "
               f"the seed-to-seed std {sigma:.2f} ({dof} degrees of freedom)")
    return f"{'within' if abs(diff) <= tolerance else 'NOT within'} seed noise of sync: {figures}"


def report(args: Args) -> int:
    finished = load_finished(args)
    if not finished:
        fail(f"no finished run in {os.path.join(args.results_dir, args.profile)}: run `python -m "
             f"cleanrl_utils.learning run` first")
    profile = PROFILES[args.profile]
    total = profile["total_timesteps"]
    order = [c.name for c in profile["configs"]]
    by_config: dict[str, list[Finished]] = {}
    for r in sorted(finished, key=lambda r: (order.index(r.config) if r.config in order else 99, r.seed)):
        by_config.setdefault(r.config, []).append(r)
    windows = [f"{lo // 1000}-{(lo + WINDOW) // 1000}k" for lo in range(0, total, WINDOW)]

    lines = [f"| configuration | seed | {' | '.join(windows)} |", "|---|---|" + "---|" * len(windows)]
    for name, runs in by_config.items():
        for r in runs:
            lines.append(f"| {name} | {r.seed} | " + " | ".join(f"{v:.2f}" for v in window_means(r, total)) + " |")
        if len(runs) > 1:
            mean = np.mean([window_means(r, total) for r in runs], axis=0)
            lines.append(f"| **{name}, mean** | {len(runs)} seeds | " + " | ".join(f"{v:.2f}" for v in mean) + " |")
    for label, values in ANCHORS.items():
        lines.append(f"| {label} | 1 | " + " | ".join(f"{v:.2f}" for v in values) + " |")
    table = "\n".join(lines)

    runs_table = ["| configuration | seed | steps | wall time | SPS | games | machine | finished | command |",
                  "|---|---|---|---|---|---|---|---|---|"]
    for name, runs in by_config.items():
        for r in runs:
            m = r.meta
            runs_table.append(f"| {name} | {r.seed} | {m['steps']:,} | {plot.format_duration(m['wall_seconds'])} | "
                              f"{m['sps']:.0f} | {m['episodes']} | {m['machine']} | {m['finished']} | "
                              f"`{m['command']}` |")
    verdicts = [f"- **{name}**: {verdict(name, runs, by_config, total)}"
                for name, runs in by_config.items()]
    missing = [f"{p.config.name} seed {p.seed}" for p in plan(Args("run", profile=args.profile))
               if not any(r.config == p.config.name and r.seed == p.seed for r in finished)]

    groups = {(ENV_ID, name): [plot.RunCurve(r.env_id, name, r.seed, "", r.steps, r.returns, r.times,
                                             r.meta["wall_seconds"]) for r in runs]
              for name, runs in by_config.items()}
    plt = plot.import_pyplot()
    figure = os.path.join(args.results_dir, f"{args.profile}_curves.png")
    fig = plot.draw(groups, plot.Args(smoothing_window=20), plt)
    fig.savefig(figure, dpi=110)
    plt.close(fig)

    section = open(args.report_path).read() if os.path.exists(args.report_path) else ""
    generated = "\n".join([
        GENERATED_START,
        f"Profile `{args.profile}`: {ENV_ID}, {total:,} steps per run, CleanRL's hyperparameters (8 envs x 128 "
        f"steps, 4 minibatches, 4 epochs, lr 2.5e-4 annealed). Rebuilt by `python -m cleanrl_utils.learning "
        f"report` from the committed exports in `{args.results_dir}/{args.profile}/`.",
        "",
        f"![return vs steps and vs wall time]({os.path.relpath(figure, os.path.dirname(args.report_path) or '.')})",
        "",
        "Curves: trailing mean of 20 games per run, then mean and ±1 std over seeds (one seed: no band).",
        "",
        "### Mean full-game return per 100k-step window",
        "",
        "Each cell: the mean raw score (all 5 lives, unclipped) of the games that ended in that window.",
        "",
        table,
        "",
        f"Published: {PUBLISHED}.",
        "",
        "### Verdicts",
        "",
        "Seeds are the unit: each run's mean return over its last 200k steps; a configuration is within seed noise "
        "of sync when the difference of the means over seeds is at most 2 standard errors, from the seed-to-seed "
        "standard deviation pooled over the configurations with 2 or more seeds (a two-sample t-test's footing; "
        "with so few seeds that deviation is itself very uncertain: its 95% interval spans 0.45x to 32x of the "
        "estimate at 1 degree of freedom, 0.52x to 6.3x at 2, 0.57x to 3.7x at 3).",
        "",
        *verdicts,
        "",
        "### Runs",
        "",
        *runs_table,
        "",
        "Not finished yet: " + (", ".join(missing) if missing else "none") + ".",
        GENERATED_END,
    ])
    if GENERATED_START in section and GENERATED_END in section:
        head, rest = section.split(GENERATED_START, 1)
        section = head + generated + rest.split(GENERATED_END, 1)[1]
    else:
        section = f"# Learning results\n\n{generated}\n"
    with open(args.report_path, "w") as f:
        f.write(section)
    print(f"wrote {args.report_path} and {figure}")
    print(table)
    return 0


GENERATED_START = "<!-- learning report: generated by cleanrl_utils.learning, do not edit by hand -->"
GENERATED_END = "<!-- end of the generated learning report -->"


def main(argv: list[str] | None = None) -> int:
    args = tyro.cli(Args, args=argv)
    if args.action == "run":
        return run(args)
    if args.action == "report":
        return report(args)
    if args.action == "commands":
        for p in plan(args):
            print(shlex.join(p.command(args, False)))
        return 0
    if not (args.run_dir and args.config and args.command):
        fail("import needs --run-dir, --config and --command (the finished run, its config and what made it)")
    p = next((p for p in plan(args) if p.config.name == args.config and p.seed == args.seed), None)
    if p is None:
        fail(f"the {args.profile} profile has no config {args.config!r} with seed {args.seed}")
    export(args.run_dir, p.export_base(args), {
        "config": args.config, "seed": args.seed, "env_id": p.env_id, "command": args.command,
        "machine": machine(), "length_unit": args.length_unit, "finished": datetime.datetime.fromtimestamp(
            max(os.path.getmtime(os.path.join(args.run_dir, f)) for f in os.listdir(args.run_dir)),
            datetime.timezone.utc).isoformat(timespec="seconds")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
