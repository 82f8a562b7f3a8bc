"""The data-parallel update of cleanrl/ppo_atari_multigpu.py is the single-process update of the whole batch.

Two gloo processes each run `ppo_update` on their own batch (A and B); one process runs it on A+B with the same
minibatch partition (minibatch j = A's minibatch j together with B's). The parameters must come out the same,
and the ranks must have used two all-reduce calls per minibatch (advantage sums + ONE flattened gradient
buffer), not one per parameter tensor.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers import load_script
from multigpu_helpers import EPOCHS, HALF, MINIBATCHES, SCRIPT, fresh_agent, make_batch, partitions


def run_update(mg, agent, optimizer, batch, epochs, world_size):
    args = mg.Args(target_kl=10.0, world_size=world_size)  # exercises the all-ranks KL decision too (never stops at 10)
    return mg.ppo_update(
        agent, optimizer, args, batch["obs"], batch["logprobs"], batch["actions"], batch["advantages"],
        batch["returns"], batch["values"], epochs,
    )  # fmt: skip


def rank_worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    mg = load_script(SCRIPT, "ppo_atari_multigpu_worker")
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    calls = []
    real_all_reduce = dist.all_reduce

    def counting_all_reduce(tensor, *a, **kw):
        calls.append(tensor.numel())
        return real_all_reduce(tensor, *a, **kw)

    dist.all_reduce = counting_all_reduce
    agent, optimizer = fresh_agent(mg)
    batch = make_batch(100 + rank, agent)
    run_update(mg, agent, optimizer, batch, partitions(200 + rank), world_size=2)
    torch.save({"state": agent.state_dict(), "calls": calls}, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


@pytest.mark.torchrun
@pytest.mark.slow
def test_two_rank_update_equals_single_process_on_concatenated_batch(tmp_path):
    mp.spawn(rank_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    results = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]

    torch.set_num_threads(1)
    mg = load_script(SCRIPT, "ppo_atari_multigpu_single")
    agent, optimizer = fresh_agent(mg)
    initial = {k: v.clone() for k, v in agent.state_dict().items()}
    batch_a, batch_b = make_batch(100, agent), make_batch(101, agent)
    whole = {k: torch.cat([batch_a[k], batch_b[k]]) for k in batch_a}
    epochs = [
        [np.concatenate([mb_a, mb_b + HALF]) for mb_a, mb_b in zip(epoch_a, epoch_b)]
        for epoch_a, epoch_b in zip(partitions(200), partitions(201))
    ]
    run_update(mg, agent, optimizer, whole, epochs, world_size=1)

    for name, value in agent.state_dict().items():
        assert not torch.equal(value, initial[name]), f"{name} did not change"
        for r in (0, 1):
            torch.testing.assert_close(results[r]["state"][name], value, rtol=1e-4, atol=1e-6, msg=name)
    # the ranks stayed bit-identical to each other
    for name in initial:
        assert torch.equal(results[0]["state"][name], results[1]["state"][name]), name

    # per minibatch: the advantage sums (2 numbers: the count is known) and ONE buffer of all gradients; per
    # epoch: the KL
    numel = sum(p.numel() for p in agent.parameters())
    per_epoch = [2, numel] * MINIBATCHES + [1]
    assert results[0]["calls"] == per_epoch * EPOCHS
    assert results[1]["calls"] == results[0]["calls"]
