"""benchmark/lab/loop_profile.py: every mode is timed on 1 thread and on the scripts' threads (all the process's
cores, the whole batch), once per round; the overlapped rollout once per round when asked for."""

from __future__ import annotations

import pytest
from benchmark.lab.loop_profile import Args, main, profile
from benchmark.lab.placement import plan_threads, usable_cores


@pytest.mark.slow
def test_inference_is_timed_alone_in_the_loop_and_after_a_sleep():
    times = profile(Args(vector_env="ale", num_envs=8, steps=3, rounds=2))
    assert plan_threads(8).torch_threads == usable_cores()  # the scripts' form: the whole batch on all cores
    threads = sorted({1, usable_cores()})
    assert set(times) == {f"{mode}_t{t}" for mode in ("alone", "loop", "env", "sleep") for t in threads}
    assert all(len(values) == 2 and min(values) > 0 for values in times.values())


@pytest.mark.slow
def test_the_overlapped_rollout_is_timed_once_per_round_when_asked_for():
    times = profile(Args(vector_env="ale", num_envs=4, steps=3, rounds=2, pipelined=True))
    assert len(times["pipelined"]) == 2 and min(times["pipelined"]) > 0
    assert "pipelined" not in profile(Args(vector_env="ale", num_envs=4, steps=2, rounds=1))


def test_an_odd_env_count_cannot_be_halved_for_the_overlapped_rollout():
    with pytest.raises(SystemExit) as exit_info:
        main(Args(vector_env="ale", num_envs=5, pipelined=True))
    assert "even --num-envs, not 5" in str(exit_info.value.code)
