"""Learning curves and a results table from the TensorBoard logs of finished runs, grouped by env id, script and the
hyperparameters that differ, so that a group's runs differ only in their seed (README: Sweeps and plots)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import tyro
from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

from cleanrl_utils.launch.runs import check_positive, make_dir
from cleanrl_utils.progress import format_duration
from cleanrl_utils.run_events import EventFollower, event_files
from cleanrl_utils.validation import check_extra, check_name, fail


@dataclass
class Args:
    run_dirs: list[str] = field(default_factory=lambda: ["runs"])
    """folders searched (recursively) for run directories with TensorBoard event files"""
    output: str = "benchmark_plot"
    """path prefix of the figure: writes `{output}.png` and `{output}.svg` (see --formats)"""
    formats: list[str] = field(default_factory=lambda: ["png", "svg"])
    """file formats of the figure"""
    tag: str = "charts/episodic_return"
    """the scalar to plot"""
    last_episodes: int = 100
    """the final return of a seed is the mean of its last this many episodes"""
    smoothing_window: int = 10
    """curves are a trailing mean over this many episodes (1: raw episodic returns)"""
    num_points: int = 200
    """points of the common grid on which seeds are interpolated before averaging"""
    exp_names: list[str] = field(default_factory=list)
    """only these scripts (exp_name), e.g. `--exp-names ppo_atari ppo_atari_multigpu`; default: all"""
    env_ids: list[str] = field(default_factory=list)
    """only these env ids; default: all"""


# logged settings that do not make two runs different configurations (nor do those the script computes)
NOT_CONFIGURATION = frozenset(
    "seed exp_name env_id run_name runs_dir track wandb_project_name wandb_entity capture_video save_model "
    "progress_bar checkpoint_interval resume dist_timeout rank local_rank".split()
)


@dataclass
class RunCurve:
    """One run's scalar: steps, values and seconds since the run started, and its logged hyperparameters."""

    env_id: str
    exp_name: str
    seed: int
    path: str
    steps: np.ndarray
    values: np.ndarray
    times: np.ndarray
    runtime: float
    hyperparameters: dict[str, str] = field(default_factory=dict)


def parse_run_name(name: str) -> tuple[str, str, int] | None:
    """`{env_id}__{exp_name}__{seed}__{timestamp}` -> (env_id, exp_name, seed); None if it does not match."""
    parts = name.split("__")
    if len(parts) < 4 or not parts[-2].lstrip("-").isdigit() or not parts[-1].isdigit():
        return None
    env_id, exp_name = parts[0], "__".join(parts[1:-2])
    if not env_id or not exp_name:
        return None
    return env_id, exp_name, int(parts[-2])


def find_run_dirs(roots: list[str]) -> list[tuple[str, str]]:
    """(run directory, run name: its path under its root, e.g. `ALE/Breakout-v5__ppo__1__1700000000`) of every
    folder holding event files under the roots."""
    found: dict[str, tuple[str, str]] = {}
    for root in roots:
        if not os.path.isdir(root):
            what = "is not a directory" if os.path.exists(root) else "does not exist"
            fail(f"run directory {root!r} {what}")
        before = len(found)
        for dirpath, dirnames, _ in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "dead_attempts")  # (resume.set_aside_dead_attempt)
            if event_files(dirpath):
                rel = os.path.relpath(dirpath, root)
                name = os.path.basename(os.path.abspath(root)) if rel == "." else rel.replace(os.sep, "/")
                found.setdefault(os.path.realpath(dirpath), (dirpath, name))
        if len(found) == before:
            fail(f"no TensorBoard event files under {root!r}; pass the --runs-dir of finished runs")
    return list(found.values())


def parse_hyperparameters(text: str) -> dict[str, str]:
    """The `|param|value|` markdown table the scripts log under the TEXT tag `hyperparameters`, as a dict."""
    params = {}
    for line in text.splitlines():
        cells = line.strip().strip("|").split("|", 1)
        if len(cells) == 2 and cells[0] not in ("param", "-"):
            params[cells[0].strip()] = cells[1].strip()
    return params


@contextlib.contextmanager
def damaged_files() -> Iterator[list[str]]:
    """Inside `with`: the event files whose reading stopped at a damaged record (cut short, or bytes changed: its
    checksum fails), which TensorBoard says only in a debug message before it uses what came before."""
    paths: list[str] = []

    def note(record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("Truncated record in") and record.args:
            paths.append(str(record.args[0]))
        return True

    logger = logging.getLogger("tensorboard")
    level = logger.level
    logger.addFilter(note)
    logger.setLevel(logging.DEBUG)
    try:
        yield paths
    finally:
        logger.removeFilter(note)
        logger.setLevel(level)


def load_run(path: str, tag: str, name: str = "") -> RunCurve | str:
    """The run's curve of `tag` (`name`: its folder name under the searched root), or why it has none; a warning for
    each damaged event file, naming the step where its data ends."""
    events = EventFollower(path, tag)
    with damaged_files() as damaged:
        events.poll()
    for event_file in dict.fromkeys(damaged):
        step = max((e.step for e in LegacyEventFileLoader(event_file).Load() if e.HasField("summary")), default=None)
        where = "before its first step" if step is None else f"at step {step}"
        print(f"warning: {event_file} is damaged (cut short or changed): its data ends {where}", file=sys.stderr)
    hyperparameters = parse_hyperparameters(events.texts.get("hyperparameters/text_summary", ""))
    try:  # the run's identity as it logged it, else from its folder name
        env_id, exp_name, seed = hyperparameters["env_id"], hyperparameters["exp_name"], int(hyperparameters["seed"])
    except (KeyError, ValueError):
        env_id, exp_name, seed = parse_run_name(name) or ("", "", 0)
    if tag not in events.tags:
        return f"no {tag} logged ({'its events file is damaged' if damaged else 'no episode finished?'})"
    start = events.file_starts[0]
    return RunCurve(
        env_id=env_id,
        exp_name=exp_name,
        seed=seed,
        path=path,
        steps=np.array(events.steps, dtype=np.float64),
        values=np.array(events.values, dtype=np.float64),
        times=np.array(events.walls, dtype=np.float64) - start,
        runtime=events.last_wall - start,
        hyperparameters=hyperparameters,
    )


def configuration_labels(runs: list[RunCurve]) -> dict[str, str]:
    """Label of each run (by path): its exp_name, plus `key=value` for every hyperparameter that differs between the
    runs of that exp_name (over all env ids, so a configuration keeps its label and color in every panel)."""
    by_script: dict[str, list[RunCurve]] = defaultdict(list)
    for run in runs:
        by_script[run.exp_name].append(run)
    labels = {}
    for exp_name, script_runs in by_script.items():
        keys = sorted({k for r in script_runs for k in r.hyperparameters} - NOT_CONFIGURATION)
        differing = [k for k in keys if len({r.hyperparameters.get(k, "?") for r in script_runs}) > 1]
        if differing:  # settings the script computed from its flags (batch sizes...) follow the flags that differ
            computed = computed_settings([r.path for r in script_runs])
            differing = [k for k in differing if k not in computed]
        for run in script_runs:
            settings = ", ".join(f"{k}={run.hyperparameters.get(k, '?')}" for k in differing)
            labels[run.path] = f"{exp_name} ({settings})" if settings else exp_name
    return labels


def computed_settings(run_dirs: list[str]) -> set[str]:
    """The settings the runs' scripts compute at runtime, not flags (each run's checkpoint lists them)."""
    import torch

    from cleanrl_utils.checkpoint import CHECKPOINT_FILE

    names: set[str] = set()
    for path in (os.path.join(run_dir, CHECKPOINT_FILE) for run_dir in run_dirs):
        if os.path.exists(path):
            with contextlib.suppress(Exception):  # a damaged checkpoint: its run is still plotted
                names.update(torch.load(path, map_location="cpu", weights_only=True, mmap=True).get("computed", ()))
    return names


def load_runs(args: Args) -> dict[tuple[str, str], list[RunCurve]]:
    """Runs grouped by (env id, configuration label); a run without the tag or an identity is skipped with a warning."""
    runs: list[RunCurve] = []
    for path, name in find_run_dirs(args.run_dirs):
        run = load_run(path, args.tag, name)
        if isinstance(run, RunCurve) and not run.exp_name:
            run = "it logged no env_id, exp_name and seed, and its name is not {env_id}__{exp_name}__{seed}__{time}"
        if isinstance(run, str):
            print(f"warning: skipping {path}: {run}", file=sys.stderr)
        elif not (args.env_ids and run.env_id not in args.env_ids) and not (
            args.exp_names and run.exp_name not in args.exp_names
        ):
            runs.append(run)
    labels = configuration_labels(runs)
    groups: dict[tuple[str, str], list[RunCurve]] = defaultdict(list)
    for run in runs:
        groups[(run.env_id, labels[run.path])].append(run)
    if not groups:
        filters = " matching --env-ids/--exp-names" if args.env_ids or args.exp_names else ""
        fail(f"no run{filters} under {' '.join(args.run_dirs)} logged {args.tag}")
    return dict(sorted(groups.items()))


def trailing_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of each value and the up to window-1 values before it."""
    sums = np.cumsum(np.insert(values, 0, 0.0))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(idx - window, 0)
    return (sums[idx] - sums[lo]) / (idx - lo)


def mean_and_std(runs: list[RunCurve], x: str, window: int, num_points: int):
    """Seeds interpolated on a common grid of x ("steps" or "times") where all of them have data."""
    lo = max(getattr(r, x)[0] for r in runs)
    hi = min(getattr(r, x)[-1] for r in runs)
    grid = np.linspace(lo, hi, num_points) if hi > lo else np.array([hi])
    ys = np.stack([np.interp(grid, getattr(r, x), trailing_mean(r.values, window)) for r in runs])
    return grid, ys.mean(axis=0), ys.std(axis=0)


def results_table(groups: dict[tuple[str, str], list[RunCurve]], last: int) -> str:
    lines = [
        f"| env id | configuration | seeds | final return (mean ± std, last {last} episodes) | runtime (mean ± std) |",
        "|---|---|---|---|---|",
    ]
    for (env_id, label), runs in groups.items():
        finals = np.array([r.values[-last:].mean() for r in runs])
        runtimes = np.array([r.runtime for r in runs])
        seeds = len({r.seed for r in runs})  # a copied run is a second run of its seed, not a second seed
        counted = f"{seeds} ({len(runs)} runs)" if len(runs) > seeds else f"{seeds}"
        lines.append(
            f"| {env_id} | {label} | {counted} | {finals.mean():.2f} ± {finals.std():.2f} "
            f"| {format_duration(runtimes.mean())} ± {format_duration(runtimes.std())} |"
        )
    return "\n".join(lines)


def import_pyplot():
    check_extra("matplotlib", "plotting", "plot")
    import matplotlib

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    return plt


def draw(groups: dict[tuple[str, str], list[RunCurve]], args: Args, plt):
    """Two panels per game (return vs steps, vs wall-clock time), 4 games a row at most; a curve per configuration."""
    env_ids = sorted({env_id for env_id, _ in groups})
    labels = sorted({label for _, label in groups})
    colors = {label: f"C{i % 10}" for i, label in enumerate(labels)}
    ncols = min(len(env_ids), 4)
    nrows = 2 * -(-len(env_ids) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.5 * ncols, 3.2 * nrows), squeeze=False)
    for ax in axes.flat:
        ax.set_visible(False)
    for i, env_id in enumerate(env_ids):
        row, col = 2 * (i // ncols), i % ncols
        for ax, x, axis_label in (
            (axes[row, col], "steps", "global step"),
            (axes[row + 1, col], "times", "wall-clock time (s)"),
        ):
            ax.set_visible(True)
            for label in labels:
                runs = groups.get((env_id, label))
                if not runs:
                    continue
                grid, mean, std = mean_and_std(runs, x, args.smoothing_window, args.num_points)
                ax.plot(grid, mean, color=colors[label], label=label, marker="o" if len(grid) == 1 else None)
                ax.fill_between(grid, mean - std, mean + std, color=colors[label], alpha=0.2, linewidth=0)
            ax.set_title(env_id)
            ax.set_xlabel(axis_label)
            ax.set_ylabel("episodic return")
            ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], color=colors[label], label=label) for label in labels]
    # as many legend columns as the figure's width holds (about 2 per panel), in as many rows as that takes
    legend_cols = max(1, min(len(labels), 2 * ncols))
    legend_rows = -(-len(labels) // legend_cols)
    fig.legend(handles=handles, loc="upper center", ncol=legend_cols, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 * legend_rows / fig.get_figheight()))
    return fig


def main(argv: list[str] | None = None) -> int:
    args = tyro.cli(Args, args=argv)
    if not args.run_dirs:
        fail("no run directories: pass --run-dirs runs (the --runs-dir the scripts wrote to)")
    check_positive(last_episodes=args.last_episodes, smoothing_window=args.smoothing_window, num_points=args.num_points)
    for name in args.exp_names:  # a run's exp name is a folder name: another can match no run
        check_name("--exp-names", name)
    unknown = [f for f in args.formats if f not in ("png", "svg", "pdf")]
    if unknown or not args.formats:
        fail(f"--formats takes png, svg and/or pdf, got {' '.join(args.formats) or 'nothing'}")
    plt = import_pyplot()
    groups = load_runs(args)

    make_dir(os.path.dirname(args.output) or ".", "the folder of --output")
    fig = draw(groups, args, plt)
    for fmt in args.formats:
        path = f"{args.output}.{fmt}"
        try:
            fig.savefig(path, dpi=120)
        except OSError as exc:
            fail(f"cannot write {path!r} ({exc.strerror})")
        print(f"wrote {path}", file=sys.stderr)
    plt.close(fig)
    print(results_table(groups, args.last_episodes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
