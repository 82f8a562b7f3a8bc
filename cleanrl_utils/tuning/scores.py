"""A trial's score, CleanRL's: runs' normalised metrics aggregated over env ids, then averaged over seeds (and the
time objectives, docs/tuning.md)."""

from __future__ import annotations

import math
from typing import Literal, Optional, Sequence

import numpy as np

Aggregation = Literal["average", "median", "max", "min"]
Objective = Literal["score", "score_in_time", "time_auc"]


def normalised(score: Optional[float], target: Optional[Sequence[float]]) -> Optional[float]:
    """`score` on the scale of `target` ([min, max] -> [0, 1]); a raw score where there is no target."""
    if score is None or target is None:
        return score
    return (score - target[0]) / (target[1] - target[0])


def aggregate(values: dict[tuple[str, int], Optional[float]], env_ids: Sequence[str], how: Aggregation):
    """CleanRL's score of the (env id, seed) -> normalised score `values`; None while one has no value."""
    if any(v is None for v in values.values()):
        return None
    seeds = sorted({seed for _, seed in values})
    return float(np.mean([getattr(np, how)([values[(e, s)] for e in env_ids]) for s in seeds]))


def run_value(follower, times, target, objective: Objective, window: int, budget, until: float = math.inf):
    """A run's normalised score up to `until` (steps for "score", else seconds of running; `times`: its points')."""
    if objective == "score":
        return normalised(follower.mean_last(window, until_step=until), target)
    limit = min(until, budget)
    if objective == "score_in_time" or until < math.inf:
        return normalised(follower.mean_last(window, times=times, until_time=limit), target)
    # time_auc: the mean over [0, budget] of the score so far (0 before the first game, the last after the run)
    values = np.array(follower.values)[times <= limit]
    times = times[times <= limit]
    if not len(values):
        return None
    means = [normalised(float(np.mean(values[max(0, i + 1 - window) : i + 1])), target) for i in range(len(values))]
    ends = np.append(times[1:], limit)
    return float(np.sum(np.array(means) * (ends - times)) / limit)
