"""The rollout's inference in slices (cleanrl_utils/sliced.py): the whole batch's numbers within float rounding, in
order, on other threads, and the scripts' runs the same by it."""

from __future__ import annotations

import threading

import pytest
import torch
from helpers import LOSS_TAGS, find_run_dir, load_script, read_scalars, run_script
from test_fixed_seed import beyond_tolerance

from cleanrl_utils.placement import plan_threads, usable_cores
from cleanrl_utils.sliced import MIN_SLICE, SlicedInference, inference_slices


class _Spaces:
    class single_action_space:  # noqa: N801
        n = 4


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the scripts' rollout: the workers start with this count
    yield
    torch.set_num_threads(before)


def test_slices_per_batch_and_cores():
    assert inference_slices(8, 2) == 2
    assert inference_slices(8, 16) == 2  # at least MIN_SLICE samples per slice
    assert inference_slices(64, 16) == 16
    assert inference_slices(4, 2) == inference_slices(7, 2) == inference_slices(8, 1) == 1
    plan = plan_threads(num_envs=8, cores=2)
    assert (plan.inference_slices, plan.inference_threads, plan.learning_threads) == (2, 1, 2)
    assert "the batch in 2 slices" in plan.describe("envpool")
    plan = plan_threads(num_envs=8, cores=2, sliced=False)  # a GPU or torch.compile: the whole batch
    assert (plan.inference_slices, plan.inference_threads) == (1, 2)
    assert "slices" not in plan.describe("envpool")
    plan = plan_threads(num_envs=8, torch_threads=2, cores=2)  # an explicit thread count: as asked
    assert (plan.inference_slices, plan.inference_threads, plan.learning_threads) == (1, 2, 2)


@pytest.mark.parametrize("batch,slices", [(8, 2), (9, 2), (12, 3), (16, 4), (16, 2)])
def test_sliced_network_gives_the_whole_batch_numbers(one_thread, batch, slices):
    """The whole batch's numbers within float rounding, on the scripts' network, for slices of at least MIN_SLICE
    frames. Not bit for bit everywhere: oneDNN picks its convolution kernels by batch size and instruction set, and
    on some AVX-512 CPUs a batch of 4 rounds its last bits otherwise than a batch of 16."""
    agent = load_script("cleanrl/ppo_atari.py", "ppo_atari_for_sliced").Agent(_Spaces)
    frames = torch.randint(0, 256, (batch, 4, 84, 84), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    sliced = SlicedInference(agent.hidden, slices)
    try:
        with torch.inference_mode():
            whole, parts = agent.hidden(frames), sliced(frames)
        assert parts.is_inference()  # the caller's inference mode held on the worker threads too
        torch.testing.assert_close(parts, whole, rtol=1e-5, atol=1e-6)
        with torch.no_grad():  # gradients off without inference mode: ordinary tensors
            parts = sliced(frames)
        assert not parts.is_inference()
        torch.testing.assert_close(parts, whole, rtol=1e-5, atol=1e-6)
    finally:
        sliced.close()


def test_slices_run_on_worker_threads_in_order_and_the_update_is_whole():
    calls: list[tuple[int, int]] = []  # (thread, batch size) per call of the forward

    def forward(x: torch.Tensor) -> torch.Tensor:
        calls.append((threading.get_ident(), x.shape[0]))
        return x * 2

    sliced = SlicedInference(forward, 3)
    x = torch.arange(3 * MIN_SLICE, dtype=torch.float32)
    try:
        with torch.inference_mode():
            assert torch.equal(sliced(x), x * 2)
        assert sorted(size for _, size in calls) == [MIN_SLICE] * 3
        threads = {thread for thread, _ in calls}
        assert len(threads) == 3 and threading.get_ident() in threads  # slice 0 here, the others on 2 workers
        calls.clear()
        y = sliced(x.requires_grad_())  # gradients on (the update): one call, the whole batch, this thread
        assert calls == [(threading.get_ident(), 3 * MIN_SLICE)] and y.requires_grad
        calls.clear()
        with torch.no_grad():
            sliced(x[: 2 * MIN_SLICE - 1])  # too small to cut: whole
        assert calls == [(threading.get_ident(), 2 * MIN_SLICE - 1)]
    finally:
        sliced.close()
    assert not [t for t in threading.enumerate() if t.name == "sliced-inference"]  # close() ended the workers


def test_a_worker_error_reaches_the_caller_and_the_next_call_is_right():
    def forward(x: torch.Tensor) -> torch.Tensor:
        if (x < 0).any():
            raise ValueError("negative input")
        return x + 1

    sliced = SlicedInference(forward, 2)
    try:
        bad = torch.cat([torch.zeros(MIN_SLICE), -torch.ones(MIN_SLICE)])  # the second slice fails, on the worker
        with torch.no_grad(), pytest.raises(ValueError, match="negative input"):
            sliced(bad)
        good = torch.arange(2 * MIN_SLICE, dtype=torch.float32)
        with torch.no_grad():
            assert torch.equal(sliced(good), good + 1)  # no result of the failed call is read
    finally:
        sliced.close()


@pytest.mark.skipif(usable_cores() < 2, reason="inference runs in slices only with 2 or more cores")
@pytest.mark.parametrize("script", ["cleanrl/ppo_atari.py", "cleanrl/ppo_atari_multigpu.py"])
def test_a_run_in_slices_logs_the_losses_of_a_run_without(tmp_path, script):
    run = [script, "--num-envs", "8", "--num-steps", "16", "--total-timesteps", "256", "--vector-env", "sync",
           "--no-progress-bar", "--seed", "5"]
    losses = []
    # the default plan (slices on 2+ cores), then the whole batch on as many threads as the update uses
    for flags in ([], ["--torch-threads", str(usable_cores())]):
        runs = tmp_path / f"runs{len(losses)}"
        result = run_script([*run, *flags, "--runs-dir", str(runs)], cwd=tmp_path, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        assert ("the batch in 2 slices" in result.stdout) == (not flags), result.stdout[:500]
        assert "terminate called" not in result.stderr  # the workers end before the interpreter does
        losses.append({tag: [list(v) for v in read_scalars(find_run_dir(runs), tag)] for tag in LOSS_TAGS})
    # within float rounding (the slices' kernels may round otherwise: see the test above)
    assert losses[0]["losses/value_loss"] and not beyond_tolerance(losses[0], losses[1])
