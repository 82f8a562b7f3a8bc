"""Inference in slices (benchmark/lab/sliced.py), a form the throughput benchmark times for comparison: the whole
batch's numbers within float rounding, in order, on other threads."""

from __future__ import annotations

import threading

import pytest
import torch
from helpers import load_script

from benchmark.lab.sliced import MIN_SLICE, SlicedInference, inference_slices


class _Spaces:
    class single_action_space:  # noqa: N801
        n = 4


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as the throughput benchmark times it: the workers start with this count
    yield
    torch.set_num_threads(before)


def test_slices_per_batch_and_cores():
    assert inference_slices(8, 2) == 2
    assert inference_slices(8, 16) == 2  # at least MIN_SLICE samples per slice
    assert inference_slices(64, 16) == 16
    assert inference_slices(4, 2) == inference_slices(7, 2) == inference_slices(8, 1) == 1


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
