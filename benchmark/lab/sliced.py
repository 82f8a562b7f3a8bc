"""The rollout's small inference batch cut into slices that run in parallel, one torch thread each (CPU): a form
the throughput benchmark times for comparison (``channels_last+slices``); the scripts infer the whole batch on all
the process's cores, since the slices did not earn 5% end to end.

A batch-8 forward on 2 torch threads is no faster than on 1: each of its parallel regions (every convolution, every
linear layer) waits for the other OpenMP worker to wake, since the scripts let idle workers sleep. On 1 thread the
other core idles, and the env step that follows pays for waking it (docs/throughput.md, "Where the loop loses").
``SlicedInference`` runs slice 0 of the batch on the calling thread and every other slice on a worker thread of its
own, each on one torch thread: one wake-up per forward instead of one per layer, and every core busy.

Each slice keeps at least ``MIN_SLICE`` samples: below 4 samples oneDNN picks other kernels. The sliced forward gives
the whole batch's numbers within float rounding, not always bit for bit: oneDNN picks its kernels by batch size and
instruction set, so on some AVX-512 CPUs a slice of 4 rounds its last bits otherwise than the batch of 8 or 16
(``tests/test_sliced.py`` checks it on the scripts' network).
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Optional

import torch

MIN_SLICE = 4


def inference_slices(num_envs: int, cores: int) -> int:
    """How many slices a batch of ``num_envs`` is cut into on ``cores`` cores: one per core, each of at least
    ``MIN_SLICE`` samples (1: no slicing)."""
    return max(1, min(cores, num_envs // MIN_SLICE))


class SlicedInference:
    """``fn`` (a batch-in, batch-out forward) with gradients off: the batch in ``slices`` slices, computed in parallel
    and concatenated in order. With gradients on (the update's minibatches) it is ``fn`` itself.

    The workers are daemon threads started at the first sliced call; torch gives a new thread the intra-op thread count
    set at that moment (``torch.set_num_threads``), so call it first while that count is 1, as the throughput
    benchmark does. ``close()`` ends them.
    """

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor], slices: int):
        self.fn = fn
        self.slices = slices
        self._inboxes: list[queue.SimpleQueue] = []
        self._workers: list[threading.Thread] = []

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() or self.slices < 2 or x.shape[0] < 2 * MIN_SLICE:
            return self.fn(x)
        if not self._inboxes:
            self._start()
        parts = x.tensor_split(min(self.slices, x.shape[0] // MIN_SLICE))
        inference = torch.is_inference_mode_enabled()
        # one reply queue per call: a call interrupted (Ctrl-C) leaves its late results where no later call reads them
        replies: queue.SimpleQueue = queue.SimpleQueue()
        for k, (inbox, part) in enumerate(zip(self._inboxes, parts[1:]), start=1):
            inbox.put((k, part, inference, replies))
        outputs: list[Optional[torch.Tensor]] = [self.fn(parts[0])] + [None] * (len(parts) - 1)
        for _ in parts[1:]:
            k, output = replies.get()
            if isinstance(output, BaseException):
                raise output
            outputs[k] = output
        return torch.cat(outputs)

    def _start(self) -> None:
        for _ in range(self.slices - 1):
            inbox: queue.SimpleQueue = queue.SimpleQueue()
            worker = threading.Thread(target=self._serve, args=(inbox,), daemon=True, name="sliced-inference")
            worker.start()
            self._inboxes.append(inbox)
            self._workers.append(worker)

    def _serve(self, inbox: queue.SimpleQueue) -> None:
        while (work := inbox.get()) is not None:
            k, part, inference, replies = work
            try:
                # grad mode and inference mode are per thread: the caller's, here too
                with torch.inference_mode(inference), torch.no_grad():
                    replies.put((k, self.fn(part)))
            except BaseException as exc:  # to the caller, which raises it
                replies.put((k, exc))

    def close(self) -> None:
        """End the worker threads and wait for them (a later sliced call starts new ones). A worker still ending
        while the interpreter shuts down can abort the process in torch's thread-exit code, hence the wait."""
        for inbox in self._inboxes:
            inbox.put(None)
        for worker in self._workers:
            worker.join()
        self._inboxes, self._workers = [], []
