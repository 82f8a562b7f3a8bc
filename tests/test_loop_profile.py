"""cleanrl_utils/loop_profile.py: every mode is timed for 1 thread and all cores, once per round."""

from __future__ import annotations

import pytest
from cleanrl_utils.loop_profile import Args, profile
from cleanrl_utils.placement import usable_cores


@pytest.mark.slow
def test_inference_is_timed_alone_in_the_loop_and_after_a_sleep():
    times = profile(Args(vector_env="ale", num_envs=2, steps=3, rounds=2))
    threads = sorted({1, usable_cores()})
    assert set(times) == {f"{mode}_t{t}" for mode in ("alone", "loop", "env", "sleep") for t in threads}
    assert all(len(values) == 2 and min(values) > 0 for values in times.values())
