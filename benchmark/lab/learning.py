"""The learning benchmark: does every backend learn as CleanRL does? Runs, keeps and reports (docs/results.md).

    python -m benchmark.lab.learning run              # the `quick` profile: trains what has not finished yet
    python -m benchmark.lab.learning report           # docs/results.md and its PNGs from what has finished
    python -m benchmark.lab.learning commands --profile full   # the runs of CleanRL's benchmark, for a cluster
    python -m benchmark.lab.learning export --profile full-cpu --runs-dir RUNS --checkout CODE  # runs so far
    python -m benchmark.lab.learning report --profile full-cpu  # docs/results_10m.md: CleanRL's 10M steps on a CPU

A run is finished when its episodes are exported to ``{results_dir}/{profile}/{config}__{seed}.csv`` (step, wall
seconds, full-game return, length in frames) with a ``.json`` beside it (command, steps, seconds, SPS, machine,
date). Those files are committed, so the report can be rebuilt on any machine. A run that was stopped (Ctrl-C,
SIGTERM from a scheduler, the end of a session) keeps its checkpoint in ``{runs_dir}/{run_name}`` and resumes from
it when ``run`` is started again (``--resume``); every run writes a checkpoint every ``--checkpoint-interval``
iterations and when it stops.

The `full-cpu` profile's runs take days of parts; `export` writes what a run has done so far to
``{results_dir}/{profile}/{config}__{seed}.partial.csv`` and ``.partial.json`` (with its parts, the commit of the
checkout its command ran from and the machine), so that finished parts can be committed while the run goes on. Once
the run has reached its last step, `export` writes the plain files instead, which supersede the partial ones.
"""

from __future__ import annotations

import contextlib
import csv
import datetime
import errno
import glob
import io
import json
import os
import platform
import shlex
import shutil
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
# CleanRL's benchmark at full length (the full-cpu report): its published mean return of the last 100 games at 10M
# steps (mean ± std over its 3 seeds), its own time for the whole run, and the returns whose first reach is timed
CLEANRL_10M = {"BreakoutNoFrameskip-v4": (414.66, 28.09), "PongNoFrameskip-v4": (20.36, 0.20)}
CLEANRL_10M_MINUTES = 264  # ppo_atari.py, all 10M steps, on 1 GPU and 10 CPUs
CLEANRL_SEEDS = 3  # behind each published figure
# The same figure for CleanRL's other PPOs with the same hyperparameters (openrlbenchmark's tables beside ppo_atari's)
CLEANRL_SIBLINGS = {
    "BreakoutNoFrameskip-v4": {"ppo_atari_envpool.py": (211.24, 151.84), "ppo_atari_multigpu.py": (414.94, 20.60)},
    "PongNoFrameskip-v4": {"ppo_atari_envpool.py": (20.45, 0.09), "ppo_atari_multigpu.py": (20.34, 0.43)},
}
GAME_MAX = {"PongNoFrameskip-v4": 21.0}  # the most a full game can score
REPLAYS = "replays"  # a profile's subfolder of checkpoint replays (benchmark/lab/lost_games.py --out)
LOST = "lost"  # a profile's subfolder of exports whose run folder was lost before they finished (never resumed)
MILESTONES = {"BreakoutNoFrameskip-v4": (100, 200, 400), "PongNoFrameskip-v4": (0, 18)}
LONG_WINDOW = 1_000_000  # steps per window of the full-length report
LAST_GAMES = 100  # a run's final return: the mean of its last 100 games, as CleanRL's figure
TRAILING = 20  # a return is reached at the first game where the mean of the last 20 games is at least that
TOP_PART_SECONDS = 600  # a run's top speed: the SPS of its fastest part of at least this much training (minutes
# drift by up to 1.8x, so the fastest half minute of a long run is well above what any part of it averages)
SHARED_BELOW = 0.85  # a part slower than this share of the top speed ran on a machine busy with other work
TWO_RANKS = ["torchrun", "--standalone", "--nnodes=1", "--nproc_per_node=2", "cleanrl/ppo_atari_multigpu.py"]


@dataclass(frozen=True)
class Config:
    """One line of the results: a script and its backend, CleanRL's hyperparameters otherwise."""

    name: str
    launcher: tuple[str, ...]
    flags: tuple[str, ...]
    seeds: tuple[int, ...]
    env_ids: tuple[str, ...] = ()  # only these games of the profile (empty: all of them)


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
            # the parallel-sampling write-up's baseline: one env in one process (its claims: benchmark/lab/seed_claims.py)
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
    # --bf16 against float32 on the fastest backend, on one machine: Breakout, 500k steps, 2 seeds each
    "bf16": {
        "env_ids": [ENV_ID],
        "total_timesteps": 500_000,
        "configs": [
            Config("envpool", tuple(SINGLE), ("--vector-env", "envpool"), (1, 2)),
            Config("envpool_bf16", tuple(SINGLE), ("--vector-env", "envpool", "--bf16"), (1, 2)),
        ],
    },
    # CleanRL's benchmark at full length on one CPU machine: its 3 games, 10M steps, seed 1, the fastest backend,
    # and Breakout again with --bf16 (paired with the float32 run: the same seed and command but the flag); hours per
    # run, so it runs in parts (`--max-hours`), each resuming the last one's checkpoint
    "full-cpu": {
        "env_ids": ["BreakoutNoFrameskip-v4", "PongNoFrameskip-v4", "BeamRiderNoFrameskip-v4"],
        "total_timesteps": 10_000_000,
        "configs": [
            Config("envpool", tuple(SINGLE), ("--vector-env", "envpool"), (1,)),
            Config("envpool_bf16", tuple(SINGLE), ("--vector-env", "envpool", "--bf16"), (1,), env_ids=(ENV_ID,)),
        ],
    },
}


@dataclass
class Args:
    action: tyro.conf.Positional[Literal["run", "report", "commands", "import", "export"]]
    """`run` what has not finished, `report` from what has, print the `commands`, `import` a finished run, or
    `export` the runs of the profile as far as they are (partial exports of the runs in progress)"""
    profile: Literal["quick", "bf16", "full", "full-cpu"] = "quick"
    """`quick`: Breakout 500k steps per run (about an hour each on 2 cores); `full`: CleanRL's 10M-step benchmark
    (a cluster's job); `full-cpu`: Breakout, Pong and BeamRider to 10M steps, seed 1 (and Breakout with --bf16), on this machine in parts"""
    max_hours: float = 0.0
    """`run`: end this part after so many hours (the run checkpoints and stops; `run` again continues it); 0: no limit"""
    runs_dir: str = "runs/learning"
    """where the runs write their logs and checkpoints"""
    results_dir: str = "docs/results"
    """where finished runs are exported (committed) and the report's PNGs go"""
    report_path: str = ""
    """the report (default: docs/results.md; for the full-cpu profile docs/results_10m.md)"""
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
    checkout: str = "."
    """`export`: the folder the runs' command ran from (a git checkout: its commit goes in the export)"""


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
        cmd = [
            *self.config.launcher,
            "--env-id",
            self.env_id,
            "--seed",
            str(self.seed),
            "--total-timesteps",
            str(self.total_timesteps),
            "--exp-name",
            self.config.name,
            *self.config.flags,
            "--runs-dir",
            args.runs_dir,
            "--run-name",
            self.run_name,
            "--checkpoint-interval",
            str(args.checkpoint_interval),
            "--no-progress-bar",
        ]
        return cmd + ["--resume"] if resume else cmd


def plan(args: Args) -> list[Planned]:
    profile = PROFILES[args.profile]
    unknown = sorted(set(args.only) - {c.name for c in profile["configs"]})
    if unknown:
        fail(
            f"unknown config(s) {', '.join(unknown)}; the {args.profile} profile has "
            f"{', '.join(c.name for c in profile['configs'])}"
        )
    planned = [
        Planned(c, env_id, seed, profile["total_timesteps"])
        for env_id in profile["env_ids"]
        for c in profile["configs"]
        if not args.only or c.name in args.only
        if not c.env_ids or env_id in c.env_ids
        for seed in c.seeds
    ]
    # seed by seed: a benchmark cut short has compared every configuration on its first seeds
    return sorted(planned, key=lambda p: p.seed)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores"


def load_episodes(run_dir: str) -> tuple[plot.RunCurve, plot.RunCurve, plot.RunCurve] | None:
    """The run's game returns, game lengths and SPS (one point per iteration); None before its first game."""
    curves = tuple(
        plot.load_run(run_dir, tag) for tag in ("charts/episodic_return", "charts/episodic_length", "charts/SPS")
    )
    return None if any(isinstance(curve, str) for curve in curves) else curves


def write_whole(files: dict[str, str | bytes]) -> None:
    """Each file's text or bytes, all or none: each goes to a temporary file beside it, renamed over it once all are
    written, so that a failed write leaves every file as it was and no partial or temporary file; a full disk is one
    error line naming the file, its folder and the space left."""
    temps = {path: f"{path}.tmp.{os.getpid()}" for path in files}  # this writer's own
    try:
        for path, content in files.items():
            with open(temps[path], "wb") as f:
                f.write(content.encode() if isinstance(content, str) else content)
    except OSError as exc:
        for tmp in temps.values():
            with contextlib.suppress(OSError):
                os.remove(tmp)
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        folder = os.path.dirname(os.path.abspath(path))
        free = shutil.disk_usage(folder).free / 2**20
        fail(
            f"cannot write {os.path.basename(path)} in {folder}: the disk is full ({free:.0f} MiB free); free some "
            "space, then run this command again (the files it writes are as they were)"
        )
    for path, tmp in temps.items():
        os.replace(tmp, path)


def write_export(base: str, returns: plot.RunCurve, lengths: plot.RunCurve, seconds: np.ndarray, meta: dict) -> None:
    """The games to ``base.csv`` (step, wall seconds, return, length) and ``meta`` to ``base.json``, both or none."""
    os.makedirs(os.path.dirname(base), exist_ok=True)
    rows = io.StringIO()
    out = csv.writer(rows)
    out.writerow(["step", "wall_seconds", "return", "length"])
    for row in zip(returns.steps, seconds, returns.values, lengths.values):
        out.writerow([int(row[0]), f"{row[1]:.1f}", f"{row[2]:g}", int(row[3])])
    write_whole({base + ".csv": rows.getvalue(), base + ".json": json.dumps(meta, indent=1)})


def export(run_dir: str, base: str, meta: dict) -> None:
    """The run's episodes to ``base.csv`` and what made them to ``base.json``."""
    curves = load_episodes(run_dir)
    if curves is None:
        fail(f"{run_dir} logged no finished game: nothing to export")
    returns, lengths, sps = curves
    meta = {
        **meta,
        "steps": int(sps.steps[-1]),
        "wall_seconds": round(sps.runtime, 1),
        "sps": round(sps.steps[-1] / max(sps.runtime, 1e-9), 1),
        "episodes": len(returns.values),
    }
    write_export(base, returns, lengths, returns.times, meta)
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
        part = {
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "resumed": resume,
            "machine": machine(),
        }
        child = subprocess.Popen(cmd, start_new_session=True)
        timed_out = False
        while child.poll() is None:
            timed_out = time.time() > deadline
            if stop["requested"] or timed_out:
                os.killpg(child.pid, signal.SIGTERM)
                child.wait()
                break
            time.sleep(0.5)
        part.update(
            ended=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            seconds=round(time.time() - started, 1),
            returncode=child.returncode,
        )
        if os.path.isdir(run_dir):  # one line per part: how often the run was resumed, on which machine
            with open(os.path.join(run_dir, "parts.jsonl"), "a") as f:
                f.write(json.dumps(part) + "\n")
        if stop["requested"] or timed_out:
            why = f"the part's {args.max_hours:g} hours are up" if timed_out else "stopped"
            print(
                f"{why}: {p.config.name} seed {p.seed} keeps its checkpoint in {run_dir}; run again to resume",
                file=sys.stderr,
            )
            return 0 if timed_out else 130
        if child.returncode != 0:
            print(
                f"error: {p.config.name} seed {p.seed} exited with {child.returncode}; its log is above",
                file=sys.stderr,
            )
            return 1
        export(
            run_dir,
            base,
            {
                "config": p.config.name,
                "seed": p.seed,
                "env_id": p.env_id,
                "command": shlex.join(p.command(args, False)),
                "machine": machine(),
                "length_unit": "frames",
                "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "last_part_seconds": round(time.time() - started, 1),
            },
        )
    return 0


def utc(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).isoformat(timespec="seconds")


def part_starts(run_dir: str) -> list[float]:
    """When each part of a run started (unix seconds): every start of the script writes an event file of its own,
    which opens with an event at that time (the first file's is the time the run's curves count from)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    starts = []
    for name in sorted(os.listdir(run_dir)):
        if name.startswith("events.out.tfevents."):
            first = next(iter(EventFileLoader(os.path.join(run_dir, name)).Load()), None)
            if first is not None:
                starts.append(first.wall_time)
    return sorted(starts)


def training_seconds(sps: plot.RunCurve, starts: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """(when each part started, the pause before it), in seconds since the run started: a pause runs from the last
    iteration logged before the part to the part's start (hours or days between sessions)."""
    bounds = np.array(starts, dtype=np.float64) - starts[0]
    pauses = np.zeros(len(bounds))
    for k, bound in enumerate(bounds[1:], 1):
        before = sps.times[sps.times < bound]
        pauses[k] = max(bound - before[-1], 0.0) if len(before) else 0.0
    return bounds, pauses


def without_pauses(times: np.ndarray, bounds: np.ndarray, pauses: np.ndarray) -> np.ndarray:
    """Seconds since the run started less the pauses between its parts."""
    return times - np.cumsum(pauses)[np.maximum(np.searchsorted(bounds, times, side="right") - 1, 0)]


def segment_stats(sps: plot.RunCurve, bounds: np.ndarray) -> tuple[list[dict], float]:
    """What each part did, from its iterations (first and last step, training seconds, SPS), and the run's top speed:
    the SPS of its fastest part of `TOP_PART_SECONDS` or more (of its fastest part where none is that long)."""
    edges = [*bounds, float("inf")]
    stats, done = [], 0
    for k in range(len(bounds)):
        inside = (sps.times >= edges[k]) & (sps.times < edges[k + 1])
        steps, times = sps.steps[inside], sps.times[inside]
        if not len(steps):
            stats.append({"steps_from": done, "steps_to": done, "training_seconds": 0.0, "sps": None})
            continue
        seconds = float(times[-1] - bounds[k])
        stats.append(
            {
                "steps_from": done,
                "steps_to": int(steps[-1]),
                "training_seconds": round(seconds, 1),
                "sps": round((steps[-1] - done) / max(seconds, 1e-9), 1),
            }
        )
        done = int(steps[-1])
    timed = [s for s in stats if s["sps"] is not None]
    long_enough = [s["sps"] for s in timed if s["training_seconds"] >= TOP_PART_SECONDS]
    return stats, max(long_enough or [s["sps"] for s in timed] or [0.0])


def parts_of(run_dir: str, starts: list[float], stats: list[dict], last_event: float) -> list[dict]:
    """The run's parts in order: each line `run` logged in the run's parts.jsonl (started, ended, seconds, resumed,
    machine, returncode) with what its iterations did; a part that logged no line (the one running now, or one
    started by hand) from its event file alone."""
    path = os.path.join(run_dir, "parts.jsonl")
    logged = []
    if os.path.exists(path):
        with open(path) as f:
            logged = [{**json.loads(line), "logged": True} for line in f if line.strip()]
    when = lambda iso: datetime.datetime.fromisoformat(iso).timestamp()  # noqa: E731
    unmatched = []
    for k, (start, stat) in enumerate(zip(starts, stats)):
        part = next((p for p in logged if when(p["started"]) - 2 <= start <= when(p["ended"]) + 2), None)
        if part is not None:
            part.update(stat)
        else:
            unmatched.append(
                {
                    "started": utc(start),
                    "ended": None,
                    "seconds": None,
                    "resumed": k > 0,
                    "machine": machine(),
                    "returncode": None,
                    "logged": False,
                    "running": bool(k == len(starts) - 1 and time.time() - last_event < 600),
                    **stat,
                }
            )
    return sorted(logged + unmatched, key=lambda p: when(p["started"]))


def checkout_commit(folder: str) -> tuple[str, bool]:
    """The commit a checkout is at, and whether its tracked files differ from it (read only: no index refresh)."""
    try:
        head = subprocess.run(
            ["git", "-C", folder, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        changes = subprocess.run(
            ["git", "--no-optional-locks", "-C", folder, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        fail(f"--checkout {folder} is not a git checkout: pass the folder the runs' command ran from")
    return head, bool(changes.strip())


def export_runs(args: Args) -> int:
    """Every planned run with a run folder, as far as it is: ``.partial`` files until it has reached its last step,
    then the plain ones (which supersede the partial ones)."""
    commit, modified = checkout_commit(args.checkout)
    written = 0
    for p in plan(args):
        run_dir = os.path.join(args.runs_dir, p.run_name)
        if not os.path.isdir(run_dir):
            print(f"{p.run_name}: no run folder in {args.runs_dir}", flush=True)
            continue
        curves = load_episodes(run_dir)
        if curves is None:
            print(f"{p.run_name}: no finished game yet, nothing to export", flush=True)
            continue
        returns, lengths, sps = curves
        starts = part_starts(run_dir)
        bounds, pauses = training_seconds(sps, starts)
        seconds = without_pauses(sps.times[-1:], bounds, pauses)[0]
        stats, top = segment_stats(sps, bounds)
        parts = parts_of(run_dir, starts, stats, starts[0] + sps.times[-1])
        steps = int(max(sps.steps[-1], returns.steps[-1]))  # games of the iteration under way count too
        complete = steps + int(sps.hyperparameters.get("batch_size", 1024)) > p.total_timesteps
        meta = {
            "config": p.config.name,
            "seed": p.seed,
            "env_id": p.env_id,
            # as `run` starts it from the repository root (the runs folder as by default)
            "command": shlex.join(p.command(Args("run", profile=args.profile), False)),
            "machine": ", ".join(dict.fromkeys(part["machine"] for part in parts)) or machine(),
            "length_unit": "frames",
            "commit": commit,
            "commit_modified": modified,
            "total_timesteps": p.total_timesteps,
            "steps": steps,
            "complete": complete,
            "wall_seconds": round(float(seconds), 1),
            "elapsed_seconds": round(float(sps.times[-1]), 1),
            "sps": round(steps / max(float(seconds), 1e-9), 1),
            "top_sps": round(top, 1),
            "episodes": len(returns.values),
            "resumes": max(len(parts) - 1, 0),
            "parts": parts,
            "exported": utc(time.time()),
        }
        base = p.export_base(args) + ("" if complete else ".partial")
        if complete:
            meta["finished"] = utc(starts[0] + sps.times[-1])
        write_export(base, returns, lengths, without_pauses(returns.times, bounds, pauses), meta)
        for superseded in (base + ".partial.csv", base + ".partial.json") if complete else ():  # once that is written
            if os.path.exists(superseded):
                os.remove(superseded)
        print(
            f"exported {run_dir} -> {base}.csv ({len(returns.values)} games, {steps:,} steps, "
            f"{'finished' if complete else 'in progress'}, {len(parts)} part(s))",
            flush=True,
        )
        written += 1
    if not written:
        fail(f"no run of the {args.profile} profile with a finished game in {args.runs_dir}: nothing to export")
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
    partial: bool = False  # a run in progress, exported so far
    path: str = ""  # its export, without the extension


def load_exports(args: Args, subfolder: str = "") -> list[Finished]:
    """The profile's exports: the finished runs, and the partial exports of runs that have not finished (or those in
    a subfolder of the profile's, such as `LOST`)."""
    folder = os.path.join(args.results_dir, args.profile, subfolder)
    runs = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if not name.endswith(".json"):
            continue
        partial = name.endswith(".partial.json")
        if partial and os.path.exists(os.path.join(folder, name[: -len(".partial.json")] + ".json")):
            continue  # superseded by the finished export
        with open(os.path.join(folder, name)) as f:
            meta = json.load(f)
        data = np.loadtxt(os.path.join(folder, name[:-5] + ".csv"), delimiter=",", skiprows=1, ndmin=2)
        runs.append(
            Finished(
                meta["config"],
                meta["seed"],
                meta.get("env_id", ENV_ID),
                meta,
                data[:, 0],
                data[:, 1],
                data[:, 2],
                partial,
                os.path.join(folder, name[:-5]),
            )
        )
    return runs


def load_finished(args: Args) -> list[Finished]:
    return [r for r in load_exports(args) if not r.partial]


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


def stalled_or_regressed(r: Finished, total: int, sigma: float) -> str | None:
    """Why a run fails the learning rule, or None: it stalled (its last 200k steps' mean is not above its first
    window's by more than 2 seed-to-seed standard deviations) or regressed (its last window fell below its best
    earlier window by more than that)."""
    means = window_means(r, total)
    if not late_mean(r, total) > means[0] + 2 * sigma:
        return f"seed {r.seed} stalled (last 200k steps {late_mean(r, total):.2f}, first window {means[0]:.2f})"
    if means[-1] < max(means[:-1]) - 2 * sigma:
        return f"seed {r.seed} regressed (last window {means[-1]:.2f}, best earlier {max(means[:-1]):.2f})"
    return None


def verdict(
    name: str, runs: list[Finished], by_config: dict[str, list[Finished]], total: int, reference: str = "sync"
) -> str:
    """Within seed noise of the reference configuration or not: the difference of the mean over seeds of `late_mean`
    against 2 standard errors of that difference, from the pooled seed-to-seed standard deviation (a two-sample
    t-test's footing; with a few seeds the deviation itself is very uncertain, so a verdict is coarse); a run that
    stalled or regressed (`stalled_or_regressed`) fails in any case."""
    if name == reference:
        return "the reference"
    if name in BASELINES:
        return "not a backend: the single-env baseline of the claims about parallel sampling (another batch size; see its section)"
    ref_runs = by_config.get(reference, [])
    if not ref_runs:
        return f"no finished {reference} run to compare with"
    ours, ref = [late_mean(r, total) for r in runs], [late_mean(r, total) for r in ref_runs]
    sigma, dof = seed_noise(by_config, total)
    seeds = (
        f"last 200k steps, per seed {', '.join(f'{v:.2f}' for v in ours)} vs {reference} "
        f"{', '.join(f'{v:.2f}' for v in ref)}"
    )
    if not dof:
        return f"undecided until some configuration has 2 seeds (the seed-to-seed spread): {seeds}"
    diff = float(np.mean(ours) - np.mean(ref))
    tolerance = 2 * sigma * np.sqrt(1 / len(ours) + 1 / len(ref))
    figures = (
        f"{seeds}; difference of the means {diff:+.2f}, tolerance {tolerance:.2f} = 2 standard errors from "
        f"the seed-to-seed std {sigma:.2f} ({dof} degrees of freedom)"
    )
    failures = [why for r in runs if (why := stalled_or_regressed(r, total, sigma))]
    if failures:
        return f"FAILS: {'; '.join(failures)}; {figures}"
    return f"{'within' if abs(diff) <= tolerance else 'NOT within'} seed noise of {reference}: {figures}"


def report(args: Args) -> int:
    if not args.report_path:
        args.report_path = {"full-cpu": "docs/results_10m.md", "bf16": "docs/results_bf16.md"}.get(
            args.profile, "docs/results.md"
        )
    if args.profile == "full-cpu":
        return report_long(args)
    finished = load_finished(args)
    if not finished:
        fail(
            f"no finished run in {os.path.join(args.results_dir, args.profile)}: run `python -m "
            f"benchmark.lab.learning run` first"
        )
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

    runs_table = [
        "| configuration | seed | steps | wall time | SPS | games | machine | finished | command |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, runs in by_config.items():
        for r in runs:
            m = r.meta
            runs_table.append(
                f"| {name} | {r.seed} | {m['steps']:,} | {plot.format_duration(m['wall_seconds'])} | "
                f"{m['sps']:.0f} | {m['episodes']} | {m['machine']} | {m['finished']} | "
                f"`{m['command']}` |"
            )
    verdicts = [f"- **{name}**: {verdict(name, runs, by_config, total, order[0])}" for name, runs in by_config.items()]
    missing = [
        f"{p.config.name} seed {p.seed}"
        for p in plan(Args("run", profile=args.profile))
        if not any(r.config == p.config.name and r.seed == p.seed for r in finished)
    ]

    groups = {
        (ENV_ID, name): [
            plot.RunCurve(r.env_id, name, r.seed, "", r.steps, r.returns, r.times, r.meta["wall_seconds"]) for r in runs
        ]
        for name, runs in by_config.items()
    }
    plt = plot.import_pyplot()
    figure = os.path.join(args.results_dir, f"{args.profile}_curves.png")
    png = png_of(plot.draw(groups, plot.Args(smoothing_window=20), plt), plt)

    generated = "\n".join(
        [
            GENERATED_START,
            f"Profile `{args.profile}`: {ENV_ID}, {total:,} steps per run, CleanRL's hyperparameters (8 envs x 128 "
            f"steps, 4 minibatches, 4 epochs, lr 2.5e-4 annealed). Rebuilt by `python -m benchmark.lab.learning "
            f"report{'' if args.profile == 'quick' else ' --profile ' + args.profile}` from the committed exports in `{args.results_dir}/{args.profile}/`.",
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
            f"of {order[0]} when the difference of the means over seeds is at most 2 standard errors, from the seed-to-seed "
            "standard deviation pooled over the configurations with 2 or more seeds (a two-sample t-test's footing; "
            "with so few seeds that deviation is itself very uncertain: its 95% interval spans 0.45x to 32x of the "
            "estimate at 1 degree of freedom, 0.52x to 6.3x at 2, 0.57x to 3.7x at 3). A run fails whatever the means "
            "if it stalled (its last 200k steps not above its first 100k-step window by more than 2 seed-to-seed "
            "standard deviations) or regressed (its last window below its best earlier one by more than that).",
            "",
            *verdicts,
            "",
            "### Runs",
            "",
            *runs_table,
            "",
            "Not finished yet: " + (", ".join(missing) if missing else "none") + ".",
            GENERATED_END,
        ]
    )
    write_whole({figure: png, args.report_path: page_with(args.report_path, "Learning results", generated)})
    print(f"wrote {args.report_path} and {figure}")
    print(table)
    return 0


def png_of(fig, plt) -> bytes:
    """The figure as a PNG file's bytes (closed after)."""
    data = io.BytesIO()
    fig.savefig(data, format="png", dpi=110)
    plt.close(fig)
    return data.getvalue()


def page_with(path: str, title: str, generated: str) -> str:
    """The report page at `path` with its generated part in place: between the markers where the page has them, so
    that what a person wrote around them stays; a new page otherwise."""
    section = open(path).read() if os.path.exists(path) else ""
    if GENERATED_START in section and GENERATED_END in section:
        head, rest = section.split(GENERATED_START, 1)
        return head + generated + rest.split(GENERATED_END, 1)[1]
    return f"# {title}\n\n{generated}\n"


@dataclass
class WindowCheck:
    """One 1M-step window of a run, judged by the second half of the full-length rule (see `long_verdict`)."""

    lo: int
    hi: int  # the window's end, or the run's last step inside it
    games: int
    mean: float
    se: float  # standard error of the mean
    best: float | None = None  # the best earlier window's mean
    tolerance: float | None = None
    ok: bool = True

    @property
    def label(self) -> str:
        return f"{self.lo / 1e6:g}-{(self.lo + LONG_WINDOW) / 1e6:g}M"


def level_interval(env_id: str) -> tuple[float, float]:
    """The first half of the rule: CleanRL's published mean ± 2 standard deviations of its seeds."""
    mean, std = CLEANRL_10M[env_id]
    return mean - 2 * std, mean + 2 * std


def one_more_seed(env_id: str) -> tuple[float, float, float]:
    """What CleanRL's 3 seeds say about one more seed of its own code, were seeds' results normal: the chance that it
    lands inside the rule's band (mean ± 2 of the published standard deviations), and the range that 95% of such
    seeds land in. The published ± is the population standard deviation of the seeds' figures (ddof=0); one more
    seed's distance from their mean, over the sample standard deviation times sqrt(1 + 1/3), follows Student's t with
    2 degrees of freedom, for which P(|T| < t) = t / sqrt(2 + t²)."""
    mean, std = CLEANRL_10M[env_id]
    n = CLEANRL_SEEDS
    scale = std * np.sqrt(n / (n - 1)) * np.sqrt(1 + 1 / n)
    t = 2 * std / scale
    q = 0.95 * np.sqrt(2 / (1 - 0.95**2))  # P(|T| < q) = 0.95
    return float(t / np.sqrt(2 + t * t)), mean - q * scale, mean + q * scale


def outside_band_lines(r: Finished) -> list[str]:
    """For a finished run whose last games end outside CleanRL's band: the facts that bear on why."""
    mean, std = CLEANRL_10M[r.env_id]
    lo, hi = level_interval(r.env_id)
    last = float(last_games(r).mean())
    inside, p_lo, p_hi = one_more_seed(r.env_id)
    top = GAME_MAX.get(r.env_id)
    cap = f" (no game scores above {top:g})" if top is not None and p_hi > top else ""
    siblings = ", ".join(f"`{name}` {m:.2f} ± {s:.2f}" for name, (m, s) in CLEANRL_SIBLINGS.get(r.env_id, {}).items())
    lines = [
        f"**Outside CleanRL's band ({'above' if last > hi else 'below'} it): what bears on why.** The verdict stands "
        "as the rule was stated; these are the facts beside it.",
        "",
        f"- *The same figure.* CleanRL's table was made by openrlbenchmark's `rlops`, which takes the plain mean of "
        f"each seed's last {LAST_GAMES} logged full-game returns (`charts/episodic_return`, the run's whole history) "
        f"and prints the mean ± the population standard deviation (ddof=0) of its {CLEANRL_SEEDS} seeds' figures: "
        f"this run's last-{LAST_GAMES} mean is that figure for one seed.",
        f"- *One seed against {CLEANRL_SEEDS}.* Were seeds' results normal, one more seed of CleanRL's own code would "
        f"land inside the rule's {lo:.2f}..{hi:.2f} with probability {inside:.0%} (Student's t, "
        f"{CLEANRL_SEEDS - 1} degrees of freedom), and 95% of such seeds in {p_lo:.2f}..{p_hi:.2f}{cap}: this run's "
        f"{last:.2f} is {'inside' if p_lo <= last <= p_hi else 'outside'} that range.",
        f"- *CleanRL's other PPOs with the same hyperparameters*, the same figure, {CLEANRL_SEEDS} seeds each: "
        f"{siblings} (`ppo_atari.py`: {mean:.2f} ± {std:.2f}).",
    ]
    if top is not None:
        lines.append(
            f"- *The gap in play:* this run's last {LAST_GAMES} games average {top - last:.2f} below the "
            f"game's top score of {top:g}; CleanRL's seeds, {top - mean:.2f}."
        )
    return lines + [""]


def leading_games_alike(a: Finished, b: Finished) -> int:
    """How many games, from the first, two runs ended at the same step with the same return."""
    n = min(len(a.steps), len(b.steps))
    differ = np.flatnonzero((a.steps[:n] != b.steps[:n]) | (a.returns[:n] != b.returns[:n]))
    return int(differ[0]) if len(differ) else n


def trajectory_lines(r: Finished, other: Finished, total: int) -> list[str]:
    """This run beside a lost run of the same game, seed and code: a second sample of the training where the two
    part, compared as far as both reached."""
    common = min(int(r.meta["steps"]), int(other.meta["steps"]))
    last = [float(x.returns[x.steps <= common][-LAST_GAMES:].mean()) for x in (other, r)]
    pairs = [
        f"{a.label} {a.mean:.2f} / {b.mean:.2f}"
        for a, b in zip(window_checks(other, total), window_checks(r, total))
        if a.hi - a.lo == LONG_WINDOW and b.hi - b.lo == LONG_WINDOW and a.games and b.games
    ]
    alike = leading_games_alike(r, other)
    same_code = other.meta.get("commit") == r.meta.get("commit")
    why = (
        " (floating-point rounding differs between its processor and this run's, and a policy's small differences grow)"
        if other.meta["machine"] != r.meta["machine"]
        else ""
    )
    return [
        f"Another run of this seed: `{other.path}.csv`, the same {'commit' if same_code else 'seed'} on "
        f"{other.meta['machine']}. Its games match this run's for the first {alike}, then part{why}, so it is a "
        f"second sample of the training. It was exported to {int(other.meta['steps']):,} steps, then its run folder was lost, so it "
        f"never finished and has no verdict. As far as both reached ({common:,} steps), the mean of the last "
        f"{LAST_GAMES} games: "
        f"{last[0]:.2f} there, {last[1]:.2f} here; per whole 1M-step window, there / here: "
        + ("; ".join(pairs) if pairs else "none yet")
        + ".",
        "",
    ]


def lost_games_lines(r: Finished, total: int, folder: str) -> list[str]:
    """Games lost outright (return below 0) after the run first reached its game's top milestone, per 1M-step
    window, and the replays of its checkpoints in `folder` (benchmark/lab/lost_games.py): whether the same
    checkpoint loses alike on another backend, and how it plays the games it loses."""
    top = MILESTONES.get(r.env_id, ())[-1:] or (None,)
    hit = first_reach(r, top[0]) if top[0] is not None and (r.returns < 0).any() else None
    if hit is None:
        return []
    late = r.steps > hit[0]
    counts = [
        (
            lo,
            int(((r.returns < 0) & late & (r.steps > lo) & (r.steps <= lo + LONG_WINDOW)).sum()),
            int((late & (r.steps > lo) & (r.steps <= lo + LONG_WINDOW)).sum()),
        )
        for lo in range(0, min(int(r.meta["steps"]), total), LONG_WINDOW)
    ]
    lines = [
        f"Games lost outright (return below 0) after the mean of {TRAILING} games first reached {top[0]:g} "
        f"(step {int(hit[0]):,}), per 1M-step window: "
        + "; ".join(f"{lo // LONG_WINDOW}-{lo // LONG_WINDOW + 1}M {k} of {n}" for lo, k, n in counts if n)
        + ".",
        "",
    ]
    replays = []
    for path in sorted(glob.glob(os.path.join(folder, REPLAYS, "*.json"))):
        with open(path) as f:
            replay = json.load(f)
        if replay.get("env_id") == r.env_id:
            replays.append((path, replay))
    if not replays:
        return lines
    lines += [
        "Replays of this run's checkpoints (`python -m benchmark.lab.lost_games CHECKPOINT --backend B`: "
        "actions sampled as in training, 8 envs; the paddle's height is the game's RAM byte 51, 38 at the top "
        "to 203 at the bottom, read on the Python wrappers only):",
        "",
    ]
    for path, rp in sorted(replays, key=lambda x: (x[1].get("checkpoint_step") or 0, x[1]["backend"])):
        names = rp["action_names"]
        parts = []
        for label in ("lost", "rest"):
            g = rp.get(label)
            if not g:
                continue
            acts = ", ".join(f"{n} {a:.2f}" for n, a in zip(names, g["action_shares"]))
            paddle = (
                f"; paddle height quartiles {'/'.join(f'{q:.0f}' for q in g['paddle_y_quartiles'])}"
                if "paddle_y_quartiles" in g
                else ""
            )
            which = "Games lost" if label == "lost" else "Other games" if "lost" in rp else "All games"
            parts.append(f"{which} ({g['games']}): {acts}; policy entropy {g['entropy']:.2f}{paddle}")
        returns = np.array(rp["returns"])
        lost = returns[returns < rp["lost_below"]]
        lines.append(
            f"- Step {rp.get('checkpoint_step') or 0:,}, `{rp['backend']}` ({rp['machine']}): {rp['games']} "
            f"games, mean {returns.mean():.2f}, {len(lost)} lost"
            + (f" ({', '.join(f'{x:+.0f}' for x in lost)})" if len(lost) else "")
            + ". "
            + ". ".join(parts)
            + f". `{os.path.relpath(path)}`"
        )
    return lines + [""]


def window_checks(r: Finished, total: int) -> list[WindowCheck]:
    """Each 1M-step window the run has reached: its games' mean return, not below the best earlier window's mean by
    more than the noise, the larger of 2 standard errors of the difference of the two means and 2 of CleanRL's
    seed-to-seed standard deviations; a window in which no game ended fails."""
    spread = CLEANRL_10M.get(r.env_id, (0.0, 0.0))[1]
    reached = int(r.meta["steps"])
    checks: list[WindowCheck] = []
    best: WindowCheck | None = None
    for lo in range(0, min(reached, total), LONG_WINDOW):
        games = r.returns[(r.steps > lo) & (r.steps <= lo + LONG_WINDOW)]
        check = WindowCheck(
            lo,
            min(lo + LONG_WINDOW, reached),
            len(games),
            float(games.mean()) if len(games) else float("nan"),
            float(games.std(ddof=1) / np.sqrt(len(games))) if len(games) > 1 else 0.0,
            ok=len(games) > 0,
        )
        if best is not None and len(games):
            check.best = best.mean
            check.tolerance = float(max(2 * np.hypot(check.se, best.se), 2 * spread))
            check.ok = check.mean >= best.mean - check.tolerance
        if len(games) and (best is None or check.mean > best.mean):
            best = check
        checks.append(check)
    return checks


def last_games(r: Finished) -> np.ndarray:
    return r.returns[-LAST_GAMES:]


def long_verdict(r: Finished, total: int) -> str:
    """The full-length rule, as the report states it: a run that has not reached its last step is not finished; a
    finished one passes when the mean of its last 100 games is inside CleanRL's mean ± 2 standard deviations and
    no 1M-step window fell below the best earlier one by more than the noise (`window_checks`)."""
    steps = int(r.meta["steps"])
    if r.partial or not r.meta.get("complete", True):
        return f"not finished ({steps:,} steps)"
    if r.env_id not in CLEANRL_10M:
        return f"no published CleanRL figure for {r.env_id} to judge by"
    lo, hi = level_interval(r.env_id)
    last = float(last_games(r).mean())
    failed = (
        []
        if lo <= last <= hi
        else [f"the mean of the last {LAST_GAMES} games, {last:.2f}, is outside {lo:.2f}..{hi:.2f}"]
    )
    for c in window_checks(r, total):
        if not c.ok:
            failed.append(
                f"window {c.label}: "
                + (
                    f"mean {c.mean:.2f}, below the best earlier window's {c.best:.2f} by more than {c.tolerance:.2f}"
                    if c.games
                    else "no game ended in it"
                )
            )
    if failed:
        return "FAIL: " + "; ".join(failed)
    return (
        f"PASS: the mean of the last {LAST_GAMES} games, {last:.2f}, is inside {lo:.2f}..{hi:.2f}, and no 1M-step "
        f"window fell below the best earlier one by more than the noise"
    )


def first_reach(r: Finished, level: float) -> tuple[float, float] | None:
    """(step, wall seconds) of the first game at which the mean of the last `TRAILING` games is at least `level`."""
    if len(r.returns) < TRAILING:
        return None
    hit = np.flatnonzero(plot.trailing_mean(r.returns, TRAILING)[TRAILING - 1 :] >= level)
    return (r.steps[hit[0] + TRAILING - 1], r.times[hit[0] + TRAILING - 1]) if len(hit) else None


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


def state_of(r: Finished) -> str:
    return f"partial: {int(r.meta['steps']):,} steps" if r.partial else "finished"


def draw_long(runs: list[Finished]) -> bytes:
    """plot.py's panels per game (return vs steps, vs wall hours), each titled with how far its run is, with
    CleanRL's 10M-step band where it does not squash the curve: a PNG file's bytes."""
    plt = plot.import_pyplot()
    from matplotlib.ticker import EngFormatter

    groups = {
        (r.env_id, f"{r.config}, seed {r.seed}"): [
            plot.RunCurve(
                r.env_id, r.config, r.seed, "", r.steps, r.returns, r.times / 3600, r.meta["wall_seconds"] / 3600
            )
        ]
        for r in runs
    }
    fig = plot.draw(groups, plot.Args(smoothing_window=TRAILING), plt)
    by_env = {r.env_id: r for r in runs}
    for ax in fig.axes:
        r = by_env.get(ax.get_title())
        if r is None or not ax.get_visible():
            continue
        if ax.get_xlabel() == "global step":
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 200k, 1M: no run-together labels
        else:
            ax.set_xlabel("wall-clock hours (pauses between parts left out)")
        ax.set_title(f"{r.env_id} ({state_of(r)})")
        curve = plot.trailing_mean(r.returns, TRAILING)
        if r.env_id in CLEANRL_10M:
            lo, hi = level_interval(r.env_id)
            if hi - curve.min() <= 3 * max(curve.max() - curve.min(), 1e-9):
                ax.axhspan(lo, hi, color="0.5", alpha=0.25, label="CleanRL 10M: mean ± 2 std")
                ax.legend(loc="upper left", fontsize=8)  # a rising curve leaves that corner empty
    return png_of(fig, plt)


def long_game_section(r: Finished, total: int, lost: list[Finished], folder: str) -> list[str]:
    """A game's part of the full-length report: its windows, its last games against CleanRL (and why, if a finished
    run ends outside CleanRL's band), a lost run of the same seed beside it, its times."""
    checks = window_checks(r, total)
    rows = [
        "| window | games | mean ± std error | best earlier window | tolerance | check |",
        "|---|---|---|---|---|---|",
    ]
    for c in checks:
        label = c.label if c.hi - c.lo == LONG_WINDOW or not r.partial else f"{c.label} (to {c.hi:,} so far)"
        mean = f"{c.mean:.2f} ± {c.se:.2f}" if c.games > 1 else f"{c.mean:.2f}" if c.games else "no game ended"
        best = f"{c.best:.2f}" if c.best is not None else "—"
        tolerance = f"{c.tolerance:.2f}" if c.tolerance is not None else "—"
        check = "first window" if c.best is None and c.games else "ok" if c.ok else "**below**"
        rows.append(f"| {label} | {c.games} | {mean} | {best} | {tolerance} | {check} |")
    last = last_games(r)
    first_step = int(r.steps[-len(last)])
    if r.env_id in CLEANRL_10M:
        mean, std = CLEANRL_10M[r.env_id]
        lo, hi = level_interval(r.env_id)
        inside = "inside" if lo <= last.mean() <= hi else "outside"
        level = f"CleanRL's {mean:.2f} ± {std:.2f} (3 seeds): {inside} the rule's {lo:.2f}..{hi:.2f}" + (
            " (the run has not finished: for orientation only)" if r.partial else ""
        )
    else:
        level = "no published CleanRL figure"
    times = ["| return | first step | wall hours |", "|---|---|---|"]
    for value in MILESTONES.get(r.env_id, ()):
        hit = first_reach(r, value)
        best = plot.trailing_mean(r.returns, TRAILING)[TRAILING - 1 :].max(initial=-np.inf)
        times.append(
            f"| {value:g} | {int(hit[0]):,} | {hours(hit[1])} |"
            if hit
            else f"| {value:g} | not reached {'yet ' if r.partial else ''}(best mean of {TRAILING} games: "
            f"{best:.2f}) | — |"
        )
    steps, seconds = int(r.meta["steps"]), float(r.meta["wall_seconds"])
    pace = f"{hours(seconds)} for {steps:,} steps ({r.meta['sps']:.0f} SPS)"
    top = r.meta.get("top_sps")
    if r.partial and steps:
        pace += f"; at that pace all {total:,} steps take about {hours(total / steps * seconds)}" + (
            f", at its top speed ({top:.0f} SPS) {hours(total / top)}" if top else ""
        )
    elif top:  # shared parts make the wall hours overstate what the machine needs alone
        pace += f"; at its top speed ({top:.0f} SPS), the machine alone, about {hours(total / top)}"
    return [
        f"### {r.env_id}: {long_verdict(r, total)}",
        "",
        "Mean full-game return (raw score, unclipped) of the games that ended in each 1M-step window, with the "
        "rule's check against the best earlier window:",
        "",
        *rows,
        "",
        f"Last {len(last)} games (steps {first_step:,} to {int(r.steps[-1]):,}): mean {last.mean():.2f} ± "
        f"{last.std(ddof=1) / np.sqrt(len(last)) if len(last) > 1 else 0.0:.2f} (standard error), against {level}.",
        "",
        *(
            outside_band_lines(r)
            if r.env_id in CLEANRL_10M
            and not r.partial
            and not level_interval(r.env_id)[0] <= last.mean() <= level_interval(r.env_id)[1]
            else []
        ),
        *[
            line
            for other in lost
            if (other.env_id, other.config, other.seed) == (r.env_id, r.config, r.seed)
            for line in trajectory_lines(r, other, total)
        ],
        *lost_games_lines(r, total, folder),
        f"Time to a return (the first game at which the mean of the last {TRAILING} games reaches it):",
        "",
        *times,
        "",
        f"Wall time: CleanRL's own `ppo_atari.py` took {CLEANRL_10M_MINUTES} minutes "
        f"({hours(CLEANRL_10M_MINUTES * 60)}) for all 10M steps on 1 GPU and 10 CPUs; this run: {pace}.",
        "",
    ]


def report_long(args: Args) -> int:
    """The full-cpu profile's page: the rule first, then per game the curves, windows, final return against CleanRL,
    times to a return, and the runs with their parts."""
    runs = load_exports(args)
    folder = os.path.join(args.results_dir, args.profile)
    if not runs:
        fail(f"no export in {folder}: run `python -m benchmark.lab.learning export --profile {args.profile}` first")
    profile = PROFILES[args.profile]
    total = profile["total_timesteps"]
    order = {env_id: i for i, env_id in enumerate(profile["env_ids"])}
    runs.sort(key=lambda r: (order.get(r.env_id, 99), r.config, r.seed))
    figure = os.path.join(args.results_dir, f"{args.profile}_curves.png")
    png = draw_long(runs)
    planned = plan(Args("run", profile=args.profile))
    exported = {(r.env_id, r.config, r.seed): r for r in runs}
    lost = load_exports(args, LOST)  # runs whose folder was lost before they finished: beside their restart

    status = ["| game | run | export | steps reached | verdict |", "|---|---|---|---|---|"]
    for p in planned:
        r = exported.get((p.env_id, p.config.name, p.seed))
        base = p.export_base(Args("run", profile=args.profile, results_dir=args.results_dir))
        status.append(
            f"| {p.env_id} | {p.config.name}, seed {p.seed} | "
            + (
                f"`{base}{'.partial' if r.partial else ''}.csv` | {int(r.meta['steps']):,} of {total:,} "
                f"({int(r.meta['steps']) / total:.1%}) | {long_verdict(r, total)} |"
                if r
                else "none yet | 0 | not started |"
            )
        )
    bounds = "; ".join(
        f"{env_id} {level_interval(env_id)[0]:.2f}..{level_interval(env_id)[1]:.2f}"
        for env_id in profile["env_ids"]
        if env_id in CLEANRL_10M
    )
    spreads = ", ".join(
        f"{env_id} {2 * CLEANRL_10M[env_id][1]:.2f}" for env_id in profile["env_ids"] if env_id in CLEANRL_10M
    )

    runs_table = [
        "| game | steps | wall hours | SPS | games | resumes | started from commit | machine | command |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    parts_table = [
        "| game | part | started (UTC) | training hours | steps | SPS | share of the top speed | |",
        "|---|---|---|---|---|---|---|---|",
    ]
    shared = []
    for r in runs:
        m = r.meta
        commit = m.get("commit", "not recorded")[:7] + (
            " (with uncommitted changes)" if m.get("commit_modified") else ""
        )
        runs_table.append(
            f"| {r.env_id} | {int(m['steps']):,} | {hours(m['wall_seconds'])} | {m['sps']:.0f} | "
            f"{m['episodes']} | {m.get('resumes', 'not recorded')} | {commit} | {m['machine']} | "
            f"`{m['command']}` |"
        )
        top = m.get("top_sps") or 0.0
        for k, part in enumerate(m.get("parts", []), 1):
            share = part["sps"] / top if part.get("sps") and top else None
            notes = (
                (["shared"] if share is not None and share < SHARED_BELOW else [])
                + (["running when exported"] if part.get("running") else [])
                + (["not logged in parts.jsonl"] if not part.get("logged") and not part.get("running") else [])
            )
            if "shared" in notes:
                shared.append(f"{r.env_id} part {k}")
            speed = f"{part['sps']:.0f} | {share:.0%}" if share is not None else "— | —"
            parts_table.append(
                f"| {r.env_id} | {k} | {part['started'].replace('+00:00', '')} | "
                f"{hours(part.get('training_seconds') or 0.0)} | "
                f"{part.get('steps_from', 0):,} to {part.get('steps_to', 0):,} | {speed} | {', '.join(notes)} |"
            )
    shared_note = (
        f"Parts run at less than {SHARED_BELOW:.0%} of their run's top speed (the SPS of its fastest part of "
        f"{TOP_PART_SECONDS // 60} training minutes or more) are marked *shared*: the machine was busy with other "
        "work during them. A run's work per step does not change along the run (the same network, batch and game), "
        "so a slower part is a busier machine, and the wall hours of a run with shared parts overstate what the machine needs alone. "
        + (f"Shared so far: {', '.join(shared)}." if shared else "No part so far was shared.")
    )

    generated = "\n".join(
        [
            GENERATED_START,
            f"Profile `{args.profile}`: CleanRL's Atari benchmark at full length on one CPU machine: "
            f"{' and '.join(profile['env_ids'])}, {total:,} steps each, seed 1, `ppo_atari.py --vector-env envpool` "
            "with CleanRL's hyperparameters (8 envs x 128 steps, 4 minibatches, 4 epochs, lr 2.5e-4 annealed). A run "
            "takes many hours here, so it runs in parts (`python -m benchmark.lab.learning run --profile full-cpu "
            "--max-hours 2`), each resuming the last part's checkpoint. `python -m benchmark.lab.learning export "
            "--profile full-cpu --runs-dir RUNS --checkout CODE` exports the runs as far as they are (a run short of "
            "its last step as a `.partial` export, labelled here with the steps it reached), and `python -m "
            f"benchmark.lab.learning report --profile full-cpu` rebuilds this page from the exports in `{folder}/`.",
            "",
            "### The verdict rule",
            "",
            "Stated before the results, and applied as stated (`long_verdict` in `benchmark/lab/learning.py`):",
            "",
            "- A run that has not reached its last step is **not finished (N steps)**, whatever its curve: never a pass.",
            "- A finished run **PASSES** when both of these hold, and **FAILS** otherwise:",
            f"  1. *Level*: the mean full-game return of its last {LAST_GAMES} games is inside CleanRL's published mean "
            f"± 2 standard deviations of its 3 seeds: {bounds}.",
            "  2. *No collapse*: in every 1M-step window, the mean return of the games that ended in it is not below "
            "the best earlier window's mean by more than the noise: 2 standard errors of the difference of the two "
            "means (from the spread of the games in each), or 2 of CleanRL's seed-to-seed standard deviations "
            f"({spreads}) where that is larger, as late in a run the windows' means move by more than their games' "
            "sampling noise while the policy keeps changing. A window in which no game ended fails.",
            "",
            "A run stalled at a low return fails the level; one that learnt and then fell apart fails the level or, "
            "if it recovered, the windows.",
            "",
            "### Where the runs are",
            "",
            *status,
            "",
            f"![return vs steps and vs wall hours]({os.path.relpath(figure, os.path.dirname(args.report_path) or '.')})",
            "",
            f"Curves: trailing mean of {TRAILING} games. Wall hours count the parts' training time, not the pauses "
            "between parts. The grey band, once the curve comes near enough for it to fit: CleanRL's 10M-step mean ± 2 "
            "standard deviations.",
            "",
            *[line for r in runs for line in long_game_section(r, total, lost, folder)],
            "### Runs and their parts",
            "",
            *runs_table,
            "",
            "Wall hours: the parts' training time, pauses between parts left out. Resumes: parts after the first. "
            "Command: as `run` starts it from the repository root with the default runs folder.",
            "",
            *parts_table,
            "",
            shared_note,
            GENERATED_END,
        ]
    )
    title = f"CleanRL's benchmark at full length on a CPU: {' and '.join(profile['env_ids'])}, 10M steps"
    write_whole({figure: png, args.report_path: page_with(args.report_path, title, generated)})
    print(f"wrote {args.report_path} and {figure}")
    for line in status[2:]:
        print(line)
    return 0


GENERATED_START = "<!-- learning report: generated by benchmark.lab.learning, do not edit by hand -->"
GENERATED_END = "<!-- end of the generated learning report -->"


def main(argv: list[str] | None = None) -> int:
    args = tyro.cli(Args, args=argv)
    if args.action == "run":
        return run(args)
    if args.action == "report":
        return report(args)
    if args.action == "export":
        return export_runs(args)
    if args.action == "commands":
        for p in plan(args):
            print(shlex.join(p.command(args, False)))
        return 0
    if not (args.run_dir and args.config and args.command):
        fail("import needs --run-dir, --config and --command (the finished run, its config and what made it)")
    p = next((p for p in plan(args) if p.config.name == args.config and p.seed == args.seed), None)
    if p is None:
        fail(f"the {args.profile} profile has no config {args.config!r} with seed {args.seed}")
    export(
        args.run_dir,
        p.export_base(args),
        {
            "config": args.config,
            "seed": args.seed,
            "env_id": p.env_id,
            "command": args.command,
            "machine": machine(),
            "length_unit": args.length_unit,
            "finished": datetime.datetime.fromtimestamp(
                max(os.path.getmtime(os.path.join(args.run_dir, f)) for f in os.listdir(args.run_dir)),
                datetime.timezone.utc,
            ).isoformat(timespec="seconds"),
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
