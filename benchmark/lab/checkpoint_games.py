"""What saving the games costs (docs/cluster.md, "What a resume keeps"): the checkpoint of ppo_atari.py with its
default 8 envs with and without the games (size, seconds to collect and write, interleaved), and the envs' stepping
speed with the `GameState` wrapper against the same chain without it (interleaved rounds, as ratios).

  python -m benchmark.lab.checkpoint_games [--backend sync] [--rounds 5] [--steps 500]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import subprocess
import tempfile
import time

import cleanrl_utils  # noqa: F401  (first: sets the OpenMP thread policy before torch loads)
import gymnasium as gym
import numpy as np
import torch

from cleanrl_utils import vector_envs
from cleanrl_utils.atari_wrappers import make_atari_env
from cleanrl_utils.checkpoint import rng_state, save_checkpoint
from cleanrl_utils.vector_envs import SAME_STEP, make_atari_vector_env, rank_games

ENV_ID = "BreakoutNoFrameskip-v4"


def cpu_model() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "?")


def plain_envs(backend: str, num_envs: int) -> gym.vector.VectorEnv:
    """The same envs without the `GameState` wrapper (what a run stepped before the games were saved)."""
    fns = [lambda: make_atari_env(ENV_ID)] * num_envs
    if backend == "async":
        return gym.vector.AsyncVectorEnv(fns, shared_memory=True, autoreset_mode=SAME_STEP)
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=SAME_STEP)


def steps_per_second(envs, steps: int, seed: int) -> tuple[float, float]:
    """Env steps per wall second and per CPU second of this process (sync steps here; async's workers are not in it)."""
    actions = np.random.default_rng(seed).integers(0, envs.single_action_space.n, size=(steps, envs.num_envs))
    envs.reset(seed=seed)
    wall, cpu = time.perf_counter(), time.process_time()
    for action in actions:
        envs.step(action)
    return steps * envs.num_envs / (time.perf_counter() - wall), steps * envs.num_envs / (time.process_time() - cpu)


def checkpoint_costs(backend: str, num_envs: int, rounds: int) -> None:
    path = os.path.join(os.path.dirname(vector_envs.__file__), "..", "cleanrl", "ppo_atari.py")
    spec = importlib.util.spec_from_file_location("ppo_atari_measured", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)  # its Args and Agent (the __main__ block does not run)
    args = script.Args(num_envs=num_envs)
    args.batch_size = args.num_envs * args.num_steps
    envs = make_atari_vector_env(backend, ENV_ID, num_envs, seed=1)
    agent = script.Agent(envs)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    state = {"agent": agent, "optimizer": optimizer}
    next_obs, _ = envs.reset(seed=1)
    for _ in range(300):  # games in progress, Adam's moments filled
        next_obs, reward, terminated, truncated, _ = envs.step(envs.action_space.sample())
    loss = sum(p.sum() for p in agent.parameters())
    loss.backward()
    optimizer.step()
    next_obs, next_done = torch.as_tensor(next_obs), np.logical_or(terminated, truncated).astype(np.float32)
    seconds = {"without games": [], "with games": [], "collecting the games": []}
    sizes = {}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(rounds):
            for name in ("without games", "with games"):
                path = os.path.join(folder, f"{name}.pt")
                start = time.perf_counter()
                games = rank_games(envs, next_obs, next_done) if name == "with games" else {}
                collected = time.perf_counter()
                save_checkpoint(path, state, args, 1, 1024, [rng_state(torch.device("cpu")) | games], [])
                seconds[name].append(time.perf_counter() - start)
                if games:
                    seconds["collecting the games"].append(collected - start)
                sizes[name] = os.path.getsize(path)
    envs.close()
    for name, values in seconds.items():
        print(f"{backend}, {num_envs} envs: {name}: median {statistics.median(values) * 1e3:.1f} ms over {rounds}")
    for name, size in sizes.items():
        print(f"{backend}, {num_envs} envs: checkpoint {name}: {size / 2**20:.2f} MiB ({size} bytes)")
    extra = sizes["with games"] - sizes["without games"]
    print(
        f"{backend}, {num_envs} envs: the games add {extra / 2**20:.2f} MiB ({extra / num_envs / 2**10:.0f} KiB per env)"
    )


def stepping_ratios(backend: str, num_envs: int, rounds: int, steps: int) -> None:
    kinds = {"with GameState": lambda: make_atari_vector_env(backend, ENV_ID, num_envs, seed=1)}
    kinds["without"] = lambda: plain_envs(backend, num_envs)
    envs = {name: make() for name, make in kinds.items()}
    speeds = {name: [] for name in envs}
    for e in envs.values():  # a warm-up round, not counted
        steps_per_second(e, steps // 5, seed=rounds)
    for r in range(rounds):  # interleaved, the order alternating: a drift of the machine hits both alike
        for name in list(envs)[:: 1 if r % 2 == 0 else -1]:
            speeds[name].append(steps_per_second(envs[name], steps, seed=r))
    for e in envs.values():
        e.close()
    for k, clock in enumerate(["wall", "CPU"] if backend == "sync" else ["wall"]):
        ratios = [a[k] / b[k] for a, b in zip(speeds["with GameState"], speeds["without"])]
        medians = [statistics.median(s[k] for s in speeds[name]) for name in envs]
        print(f"{backend}, {num_envs} envs, env steps per {clock} second with GameState / without, per round: "
              f"{', '.join(f'{x:.3f}' for x in ratios)}; median {statistics.median(ratios):.3f} "
              f"(medians {medians[0]:.0f} / {medians[1]:.0f})")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="sync", choices=["sync", "async"])
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=500)
    cli = parser.parse_args()
    torch.set_num_threads(1)
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs, {platform.python_version()}, torch {torch.__version__}")
    checkpoint_costs(cli.backend, cli.num_envs, cli.rounds)
    stepping_ratios(cli.backend, cli.num_envs, cli.rounds, cli.steps)
