"""The envs of a training script as one object, for `--overlap` (two halves of the envs stepped in turn) or not."""

from __future__ import annotations

import collections
import contextlib
from typing import Any, Callable

import gymnasium as gym
import numpy as np


class OverlappedVectorEnv:
    """The envs of a training script as one object: one vector env, or (``--overlap``) two halves that take turns.

    With two groups (from `split_groups`), `rollout` steps one group in the background (``step_async``) while the
    policy computes the actions of the other, so env stepping and inference run at the same time; with one group
    it simply alternates policy and ``step``. Either way the script sees ``reset``, the spaces, ``num_envs``,
    ``rollout`` and ``close``, and its buffers get the same contents per step and env.
    """

    def __init__(self, groups: list[gym.vector.VectorEnv]):
        self.groups = groups
        self.num_envs = sum(g.num_envs for g in groups)
        self.single_observation_space = groups[0].single_observation_space
        self.single_action_space = groups[0].single_action_space
        self.metadata = groups[0].metadata
        starts = np.cumsum([0] + [g.num_envs for g in groups])
        self.slices = [slice(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:])]
        """the columns (envs) of each group in the script's buffers"""

    def reset(self, seed: int) -> tuple[np.ndarray, dict]:
        """Reset every env; env i gets the seed ``seed + i``."""
        if len(self.groups) == 1:
            return self.groups[0].reset(seed=seed)
        return np.concatenate([g.reset(seed=seed + s.start)[0] for g, s in zip(self.groups, self.slices)]), {}

    def rollout(
        self,
        num_steps: int,
        act: Callable[[int, slice], np.ndarray],
        observe: Callable[[int, slice, tuple], None],
        timer: Callable[[str], Any] | None = None,
    ) -> None:
        """`num_steps` steps of every env: ``act(step, envs)`` returns the actions of the envs ``envs`` (a slice of
        all) for their observation of that step; ``observe(step, envs, outcome)`` gets what their ``step`` returned.

        Per step, group 0 is sent its actions first; the outcome of a group is awaited only when the other group
        has been sent its actions too (the wait is timed as ``timer("env")``).
        """
        timed = timer or (lambda phase: contextlib.nullcontext())
        if len(self.groups) == 1:
            envs, cols = self.groups[0], self.slices[0]
            for step in range(num_steps):
                actions = act(step, cols)
                with timed("env"):
                    outcome = envs.step(actions)
                observe(step, cols, outcome)
            return
        pending: collections.deque[tuple[int, int]] = collections.deque()
        for step in range(num_steps):
            for g, group in enumerate(self.groups):
                group.step_async(act(step, self.slices[g]))
                pending.append((step, g))
                if len(pending) == len(self.groups):
                    self._observe_oldest(pending, observe, timed)
        while pending:
            self._observe_oldest(pending, observe, timed)

    def _observe_oldest(self, pending, observe, timed) -> None:
        step, g = pending.popleft()
        with timed("env"):
            outcome = self.groups[g].step_wait()
        observe(step, self.slices[g], outcome)

    def close(self) -> None:
        for group in self.groups:
            group.close()
