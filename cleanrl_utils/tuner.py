"""Hyperparameter tuning with Optuna: CleanRL's `Tuner` (cleanrl_utils/tuning/trials.py) and its command line,
`python -m cleanrl_utils.tuner --script cleanrl/ppo.py --params ...` (docs/tuning.md)."""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Optional

import tyro

from cleanrl_utils.launch import slurm
from cleanrl_utils.launch.runs import check_positive
from cleanrl_utils.tuning.trials import Tuner
from cleanrl_utils.validation import fail

__all__ = ["Tuner", "main"]


PARAM_SPEC = re.compile(r"^(\w+)\((.*)\)$")


def parse_value(text: str):
    text = text.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def param_spec(text: str) -> tuple[str, Callable[[Any], Any]]:
    """`name=VALUE` (fixed), `name=uniform(a,b)`, `name=loguniform(a,b)`, `name=int(a,b)`, `name=choice(a,b,...)`:
    the flag name and a function of the trial that gives its value."""
    name, sep, spec = text.partition("=")
    name = name.strip().lstrip("-")
    if not sep or not name:
        fail(f"--params {text!r}: give NAME=VALUE or NAME=uniform(a,b) / loguniform(a,b) / int(a,b) / choice(a,b,...)")
    match = PARAM_SPEC.match(spec.strip())
    if match is None or match.group(1) not in ("uniform", "loguniform", "int", "choice"):
        value = parse_value(spec)
        return name, lambda trial: value
    kind, values = match.group(1), [parse_value(v) for v in match.group(2).split(",")]
    if kind == "choice":
        return name, lambda trial: trial.suggest_categorical(name, values)
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    if len(values) != 2 or not numbers or values[0] >= values[1]:
        fail(f"--params {text!r}: {kind} takes two numbers low,high with low < high")
    if kind == "int":
        if not all(isinstance(v, int) for v in values):
            fail(f"--params {text!r}: int takes two whole numbers")
        return name, lambda trial: trial.suggest_int(name, values[0], values[1])
    if kind == "loguniform" and values[0] <= 0:
        fail(f"--params {text!r}: loguniform needs a positive low end")
    return name, lambda trial: trial.suggest_float(name, values[0], values[1], log=kind == "loguniform")


def target_scores_of(specs: list[str]) -> dict[str, Optional[list[float]]]:
    """`ENV=MIN,MAX` (or `ENV` alone: raw scores, one env only) -> CleanRL's target_scores."""
    targets: dict[str, Optional[list[float]]] = {}
    for spec in specs:
        env_id, sep, bounds = spec.partition("=")
        if not sep:
            targets[env_id] = None
            continue
        try:
            targets[env_id] = [float(x) for x in bounds.split(",")]
        except ValueError:
            fail(f"--target-scores {spec!r}: give ENV=MIN,MAX, e.g. CartPole-v1=0,500")
    return targets


@dataclass
class Args(Tuner):
    # CleanRL's arguments as flags (the rest are the Tuner's own fields, with their help)
    script: str = "cleanrl/ppo.py"
    """the training script whose flags are tuned"""
    metric: str = "charts/episodic_return"
    """the TensorBoard scalar that scores a run"""
    target_scores: list[str] = field(default_factory=lambda: ["CartPole-v1=0,500"])
    """the env ids and their score range for the normalisation, `ENV=MIN,MAX` (`ENV` alone: raw score, one env)"""
    params_fn: tyro.conf.Suppress[Optional[Callable]] = None
    sampler: Literal["tpe", "random"] = "tpe"
    """`tpe` or `random`"""
    pruner: Literal["median", "none"] = "median"
    """`median` (Optuna's MedianPruner) or `none`"""
    wandb_kwargs: tyro.conf.Suppress[Optional[dict]] = None
    params: list[str] = field(default_factory=list)
    """the script's flags: `NAME=VALUE` (fixed), `NAME=uniform(a,b)`, `NAME=loguniform(a,b)`, `NAME=int(a,b)`,
    `NAME=choice(a,b,...)` (names without `--`, e.g. `learning-rate=loguniform(3e-4,3e-3)`)"""
    num_trials: int = 20
    """the trials the study ends with (COMPLETE or PRUNED; interrupted and failed ones do not count)"""
    num_seeds: int = 2
    """the seeds each trial runs per env id (1, 2, ...)"""
    pruner_startup_trials: int = 5
    """the median pruner prunes nothing until this many trials completed"""
    pruner_warmup_steps: int = 0
    """the median pruner prunes no trial before this step (seconds for the time objectives)"""
    sampler_seed: Optional[int] = None
    """the sampler's seed"""
    slurm_template_path: Optional[str] = None
    """an sbatch template (benchmark/slurm_tune.template): run the study as a Slurm job array of tuner processes
    sharing a journal storage"""
    slurm_array_tasks: int = 2
    """the array's tasks (tuner processes), each running --workers trials at a time"""
    slurm_cpus_per_task: Optional[int] = None
    """CPUs per array task; unset leaves Slurm's default"""
    slurm_partition: Optional[str] = None
    """the Slurm partition; unset uses the cluster's default"""
    slurm_time: Optional[int] = None
    """the time limit of a task in minutes: it stops its trials at their checkpoints before it and is requeued"""
    slurm_wait: bool = False
    """submit with `sbatch --wait` (block until every task ends)"""
    slurm_submit: bool = True
    """submit the rendered script with sbatch (else only write it)"""

    def __post_init__(self) -> None:  # the flags as given: tuner_of makes the Tuner of them
        pass


def tuner_of(args: Args) -> Tuner:
    import optuna

    if args.pruner == "median":
        pruner = optuna.pruners.MedianPruner(args.pruner_startup_trials, n_warmup_steps=args.pruner_warmup_steps)
    else:
        pruner = optuna.pruners.NopPruner()
    sampler = {"tpe": optuna.samplers.TPESampler, "random": optuna.samplers.RandomSampler}[args.sampler]
    same = {f.name: getattr(args, f.name) for f in dataclasses.fields(Tuner)}
    same.update(target_scores=target_scores_of(args.target_scores), sampler=sampler(seed=args.sampler_seed))
    parsed = [param_spec(s) for s in args.params]
    return Tuner(**{**same, "pruner": pruner, "params_fn": lambda trial: {n: suggest(trial) for n, suggest in parsed}})


SLURM_SWITCHES = ("--slurm-wait", "--no-slurm-wait", "--slurm-submit", "--no-slurm-submit")  # flags without a value


def without_slurm_flags(argv: list[str]) -> list[str]:
    """The command line of one array task: this one without its --slurm-* flags."""
    words, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word.startswith(("--slurm-", "--no-slurm-")):
            skip = "=" not in word and word not in SLURM_SWITCHES
        else:
            words.append(word)
    return words


def run_slurm(args: Args, argv: list[str], tuner: Tuner) -> int:
    """A job array of tuner processes on one study in a journal file (a storage a shared filesystem can serve)."""
    if args.storage not in (None, "journal") and not args.storage.startswith("journal:"):
        fail(f"--storage {args.storage}: a Slurm array shares its study through a journal file; use --storage journal")
    if not os.path.isfile(args.slurm_template_path):
        fail(f"Slurm template {args.slurm_template_path!r} not found (benchmark/slurm_tune.template is shipped)")
    check_positive(slurm_array_tasks=args.slurm_array_tasks)
    task = [sys.executable, "-m", "cleanrl_utils.tuner", *without_slurm_flags(argv)]
    task += ["--storage", "journal"] if args.storage is None else []
    tuner.storage, tuner.num_trials, tuner.num_seeds = tuner.storage or "journal", args.num_trials, args.num_seeds
    tuner.check()
    job = slurm.ArrayJob(
        name=tuner.study_name,
        run=shlex.join(task),
        python=None,
        torchrun=False,
        seeds=range(args.slurm_array_tasks),  # a task per tuner process
        cpus_per_task=args.slurm_cpus_per_task,
        partition=args.slurm_partition,
        log_dir=os.path.join(tuner.study_dir, "slurm"),
        time_minutes=args.slurm_time,
    )
    values = {**slurm.template_values(job), "command": job.run}
    path = os.path.join(tuner.study_dir, f"{tuner.study_name}.sbatch")
    what = f"a job array of {args.slurm_array_tasks} tuner processes on study {tuner.study_name}"
    what += f" (storage {tuner.storage_url()})"
    return slurm.submit_array(
        args.slurm_template_path, values, path, job.log_dir, what, args.slurm_submit, args.slurm_wait
    )


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = tyro.cli(Args, args=argv)
    tuner = tuner_of(args)
    if args.slurm_template_path is not None:
        return run_slurm(args, argv, tuner)
    tuner.tune(args.num_trials, args.num_seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
