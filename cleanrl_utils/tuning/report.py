"""What the tuner tells: progress lines, the table of trials, the best trial's command, a W&B run per trial."""

from __future__ import annotations

import shlex
from typing import Optional

from cleanrl_utils.launch.runs import print_table


def say(line: str) -> None:
    print(line, flush=True)


def fmt(value) -> str:
    """A score or a parameter: 4 significant digits; "-" for no score."""
    return "-" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


def stored_value(study, number: int) -> Optional[float]:
    """The trial's score; a pruned trial's last report."""
    trial = study.get_trials(deepcopy=False)[number]
    if trial.value is not None:
        return trial.value
    steps = trial.intermediate_values
    return steps[max(steps)] if steps else None


def print_trials(study) -> None:
    """Every trial: number, state, score (a pruned trial's last report), wall time, parameters."""
    trials = study.get_trials(deepcopy=False)
    names = sorted({k for t in trials for k in t.params})
    rows = [
        [
            str(t.number),
            "INTERRUPTED" if t.state.name == "FAIL" and t.user_attrs.get("interrupted") else t.state.name,
            fmt(stored_value(study, t.number)),
            f"{t.user_attrs.get('wall_time_s', 0):.1f}",
            *(fmt(t.params[n]) if n in t.params else "" for n in names),
        ]
        for t in trials
    ]
    print_table(["trial", "state", "score", "wall s", *names], rows)


def print_best(study, env_ids: list[str], num_seeds: int) -> None:
    if not any(t.state.name == "COMPLETE" for t in study.get_trials(deepcopy=False)):
        print("no trial completed: no best trial")
        return
    best = study.best_trial
    print(f"best trial {best.number}: normalised score {best.value:.4g} (over {num_seeds} seed(s)); its command:")
    for env_id in env_ids:
        print(f"    {best.user_attrs.get('command', '')} --env-id {shlex.quote(env_id)}")


def log_to_wandb(wandb_kwargs: dict, trial, state: str, value: Optional[float]) -> None:
    """One W&B run per trial, as CleanRL's tuner keeps them (not tested online)."""
    import wandb

    run = wandb.init(**wandb_kwargs, name=f"trial-{trial.number}", config=trial.params, reinit=True)
    run.log({"value": value, "state": state, "trial": trial.number})
    run.finish()
