"""cleanrl_utils/loop_profile.py: every mode is timed for 1 thread, all cores and (2+ cores) the sliced batch, once
per round."""

from __future__ import annotations

import pytest
from cleanrl_utils.loop_profile import Args, profile
from cleanrl_utils.placement import plan_threads, usable_cores


@pytest.mark.slow
def test_inference_is_timed_alone_in_the_loop_and_after_a_sleep():
    times = profile(Args(vector_env="ale", num_envs=2, steps=3, rounds=2))
    threads = sorted({1, usable_cores()})
    assert set(times) == {f"{mode}_t{t}" for mode in ("alone", "loop", "env", "sleep") for t in threads}
    assert all(len(values) == 2 and min(values) > 0 for values in times.values())
    slices = plan_threads(8).inference_slices
    times = profile(Args(vector_env="ale", num_envs=8, steps=3, rounds=1))
    variants = [f"t{t}" for t in threads] + ([f"s{slices}"] if slices > 1 else [])
    assert set(times) == {f"{mode}_{v}" for mode in ("alone", "loop", "env", "sleep") for v in variants}
