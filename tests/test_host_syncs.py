"""The host-sync budget of the Atari scripts (benchmark/lab/host_syncs.py counts what would make a GPU run wait):
one per rollout step (the actions the envs need), none per minibatch, at most 2 per iteration outside them."""

from __future__ import annotations

import re

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers import FAST, REPO_ROOT, assert_one_line_error, load_script, run_each
from multigpu_helpers import EPOCHS, fresh_agent, make_batch, partitions

from benchmark.lab.host_syncs import HostSyncCounter, SyncCount, loop_lines
from benchmark.lab.host_syncs import run_script as count_script

SCRIPTS = ["cleanrl/ppo_atari.py", "cleanrl/ppo_atari_multigpu.py"]
RUN = ["--num-envs", "2", "--num-steps", "8", "--total-timesteps", "32", "--no-progress-bar", "--torch-threads", "1"]
LINE = re.compile(r"host syncs: rollout step (\S+), minibatch (\S+), iteration rest (\S+) \(counter\)")

# ---------------------------------------------------------------- what the counter counts

PROGRAM = """
import numpy as np, torch
args = type("Args", (), {"num_steps": 2})
x = torch.arange(4.0)
optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
for iteration in range(1, 4):  # as the scripts count: the last one is the number run
    for step in range(args.num_steps):
        pass
    for mb_inds in [np.array([0, 1]), np.array([2, 3])]:
        CALL
        optimizer.step()
"""


@pytest.mark.parametrize(
    "call, counted",
    [
        ("x[0].item()", 1), ("x.sum().item()", 1), ("float(x[0])", 1), ("int(x[0])", 1), ("bool(x[0] > 0)", 1),
        ("x.tolist()", 1), ("x.cpu().numpy()", 1), ("np.asarray(x)", 1), ("f'{x[0]:.1f}'", 1),
        ("[0, 1][x.long()[1]]", 1),
        ("x[mb_inds]", 1), ("x[[0, 1]]", 1), ("x[x > 1]", 1), ("x.nonzero()", 1), ("x.to('cpu')", 1),
        ("torch.tensor([1.0], device=x.device)", 1), ("torch.as_tensor(mb_inds, device=x.device)", 1),
        ("x.to('cpu', non_blocking=True)", 0), ("x[torch.from_numpy(mb_inds)]", 0), ("torch.from_numpy(mb_inds)", 0),
        ("x[1:] * 2", 0), ("x.to(torch.float64)", 0), ("torch.as_tensor(mb_inds)", 0),
    ],
)  # fmt: skip
def test_counter_counts_what_waits_for_the_device_and_nothing_else(tmp_path, call, counted):
    script = tmp_path / "program.py"
    script.write_text(PROGRAM.replace("CALL", call))
    run = count_script(str(script), [])
    assert (run.iterations, run.rollout_steps, run.minibatches) == (3, 6, 6)
    assert run.per_phase(run.counter) == (0, counted, 0), dict(run.counter.sites)


def test_a_call_in_a_helper_counts_for_the_loop_that_called_it(tmp_path):
    script = tmp_path / "program.py"
    script.write_text("def helper(x):\n    return x.sum().item()\n" + PROGRAM.replace("CALL", "helper(x)"))
    run = count_script(str(script), [])
    assert run.counter.phases["minibatch"] == 6 and sum(run.counter.phases.values()) == 6


# ---------------------------------------------------------------- the budget of the scripts


CONFIGS = [(script, minibatches, epochs, precision) for script in SCRIPTS
           for minibatches, epochs, precision in [(2, 2, "float32"), (4, 1, "float32"), (2, 2, "bf16")]]  # fmt: skip
ITEM_IN_UPDATE = "            loss_value = loss.item()  # e.g. to log it\n"


def counts(result) -> tuple[float, float, float]:
    """Per rollout step, minibatch and iteration rest: what `python -m benchmark.lab.host_syncs` printed."""
    assert result.returncode == 0, result.stderr[-3000:]
    found = LINE.findall(result.stdout)
    assert len(found) == 1, result.stdout[-3000:]
    return tuple(float(v) for v in found[0])


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    """`python -m benchmark.lab.host_syncs SCRIPT RUN...` for each of CONFIGS, then for ppo_atari.py with an `.item()`
    added to its update loop (one forked child each, see `run_each`): their results, in that order."""
    tmp_path = tmp_path_factory.mktemp("host_syncs")
    source = (REPO_ROOT / SCRIPTS[0]).read_text()
    anchor = "            loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef\n"
    assert source.count(anchor) == 1
    patched = tmp_path / "ppo_atari.py"
    patched.write_text(source.replace(anchor, anchor + ITEM_IN_UPDATE))
    runs = []
    for script, minibatches, epochs, precision in CONFIGS:
        runs.append([script, "--num-minibatches", str(minibatches), "--update-epochs", str(epochs)])
        runs[-1] += ["--bf16"] * (precision == "bf16")
    runs.append([str(patched)])
    cases = []
    for i, (script, *extra) in enumerate(runs):
        cwd = tmp_path / str(i)
        cwd.mkdir()
        cases.append((["-m", "benchmark.lab.host_syncs", script, *RUN, *extra, "--runs-dir", str(cwd / "runs")], cwd))
    return run_each(cases, env=FAST, timeout=600, train=True)


@pytest.mark.slow
def test_script_syncs_once_per_rollout_step_never_per_minibatch(counted):
    """Each script, with 2 minibatches x 2 epochs, 4 x 1, and 2 x 2 under --bf16 (the trunk under autocast, its output
    cast back, adds no host sync): one per rollout step, none per minibatch, at most 2 in the rest of an iteration."""
    for config, result in zip(CONFIGS, counted):
        per_step, per_minibatch, rest = counts(result)
        assert (per_step, per_minibatch) == (1, 0) and rest <= 2, config


@pytest.mark.slow
def test_counter_catches_an_item_reintroduced_in_the_update_loop(counted):
    per_step, per_minibatch, rest = counts(counted[len(CONFIGS)])
    assert (per_step, per_minibatch) == (1, 1) and rest <= 2


def test_cli_without_a_script_or_with_a_script_without_an_iteration_loop_is_a_one_line_error(tmp_path):
    (tmp_path / "flat.py").write_text("print('no loop')\n")
    missing, flat = run_each(  # one forked child each, see `run_each`
        [
            (["-m", "benchmark.lab.host_syncs", "nonexistent.py"], tmp_path),
            (["-m", "benchmark.lab.host_syncs", str(tmp_path / "flat.py")], tmp_path),
        ],
        timeout=120,
    )
    assert_one_line_error(missing, "no such script")
    assert_one_line_error(flat, "found no iteration loop")


# ---------------------------------------------------------------- the multi-GPU update with 2 gloo ranks


def rank_worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    mg = load_script(SCRIPTS[1], "ppo_atari_multigpu_sync_worker")
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    agent, _ = fresh_agent(mg)
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3, eps=1e-5, fused=True)  # the script's optimizer
    batch = make_batch(100 + rank, agent)
    count = SyncCount(mg.__file__, loop_lines(mg.__file__))
    with HostSyncCounter(count):
        mg.ppo_update(
            agent, optimizer, mg.Args(world_size=2), batch["obs"], batch["logprobs"], batch["actions"], batch["advantages"],
            batch["returns"], batch["values"], partitions(200 + rank),
        )  # fmt: skip
    torch.save(dict(count.phases), f"{out_dir}/rank{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.torchrun
@pytest.mark.slow
def test_two_rank_update_makes_no_host_sync_per_minibatch(tmp_path):
    mp.spawn(rank_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    for rank in (0, 1):
        phases = torch.load(tmp_path / f"rank{rank}.pt")
        assert phases.get("minibatch", 0) == 0, phases
        assert sum(phases.values()) == 1, phases  # the update's numbers, read back once at its end
    assert EPOCHS > 1  # several epochs of minibatches ran


def test_calls_from_outside_the_script_count_as_outside():
    count = SyncCount(str(REPO_ROOT / SCRIPTS[0]), loop_lines(str(REPO_ROOT / SCRIPTS[0])))
    with HostSyncCounter(count):
        torch.ones(2).sum().item()
    assert dict(count.phases) == {"outside": 1}
