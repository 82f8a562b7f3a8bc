"""What the tests of ppo_atari_multigpu.py share: the torchrun command of a tiny run and its checks, and a
synthetic batch for the update (one process against two ranks)."""

from __future__ import annotations

import signal
import socket
import sys
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import psutil
import torch
from helpers import FAST, start_script, wait_for

from benchmark.lab import rank_params

SCRIPT = "cleanrl/ppo_atari_multigpu.py"
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))  # the `torchrun` command of this venv
ENV = FAST
QUIET = ["--no-progress-bar", "--torch-threads", "1", "--vector-env", "sync", "--dist-timeout", "120"]
# 2 ranks x 1 env x 16 steps: batch 32, 2 minibatches x 2 epochs = 4 optimizer steps per iteration
TINY = ["--local-num-envs", "1", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "2"]
TINY_BATCH, TINY_OPT_STEPS = 32, 4


def torchrun(nproc: int, *launcher: str, hashes: Path | None = None, model: Path | None = None) -> list[str]:
    """The torchrun command of `nproc` local ranks; with `hashes`, every rank runs the script under
    benchmark/lab/rank_params.py, which writes the hash of the rank's parameters there at the end of the run (and,
    with `model`, rank 0 that of the model saved at that path)."""
    rank_params_args = hashed(hashes, model)
    return [TORCHRUN, "--standalone", "--nnodes=1", f"--nproc_per_node={nproc}", *launcher, *rank_params_args, SCRIPT]


def hashed(hashes: Path | None, model: Path | None = None) -> list[str]:
    """What goes before the script in a launch so that each rank writes its parameters' hash to `hashes`."""
    if hashes is None:
        return []
    return ["-m", "benchmark.lab.rank_params", str(hashes), *(["--model", str(model)] if model else [])]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_ranks_identical(hashes: Path, world_size: int) -> str:
    """Every rank of the run wrote its parameters' hash to `hashes` (see `torchrun`), and the hashes are equal: the
    ranks ended bit-identical. Returns the hash."""
    found = rank_params.rank_hashes(hashes)
    assert sorted(found) == list(range(world_size)), f"hashes written by ranks {sorted(found)}"
    assert len(set(found.values())) == 1, f"ranks ended with different parameters: {found}"
    return found[0]


def kill_rank1_after_checkpoint_3(cmd: list[str], tmp_path: Path, log: Path) -> int:
    """Start the torchrun command `cmd`, SIGKILL its rank 1 once iteration 3 is checkpointed; torchrun's exit code."""
    proc = start_script(cmd, tmp_path, log, env=ENV)
    try:
        wait_for(log, "checkpoint: iteration 3,", proc, timeout=300)
        workers = [p for p in psutil.Process(proc.pid).children(recursive=True) if p.environ().get("RANK") == "1"]
        assert len(workers) == 1
        workers[0].send_signal(signal.SIGKILL)
        return proc.wait(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()


# ---------------------------------------------------------------- a synthetic batch for the update

HALF, MINIBATCHES, EPOCHS, ACTIONS = 8, 2, 2, 4


def make_batch(seed: int, agent) -> dict[str, torch.Tensor]:
    """A synthetic rollout of HALF samples whose old log-probs are near the agent's, so ratios get clipped too."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randint(0, 256, (HALF, 4, 84, 84), dtype=torch.uint8, generator=g)
    actions = torch.randint(0, ACTIONS, (HALF,), generator=g)
    with torch.no_grad():
        _, logprobs, _, values = agent.get_action_and_value(obs, actions)
    return {
        "obs": obs,
        "logprobs": logprobs + 0.3 * torch.randn(HALF, generator=g),
        "actions": actions,
        "advantages": 2.0 * torch.randn(HALF, generator=g) + 0.5,
        "returns": torch.randn(HALF, generator=g),
        "values": values.flatten(),
    }


def partitions(seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [np.split(rng.permutation(HALF), MINIBATCHES) for _ in range(EPOCHS)]


def fresh_agent(mg):
    torch.manual_seed(0)
    agent = mg.Agent(SimpleNamespace(single_action_space=gym.spaces.Discrete(ACTIONS)))
    return agent, torch.optim.Adam(agent.parameters(), lr=1e-3, eps=1e-5)
