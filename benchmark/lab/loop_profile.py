"""Inference of the rollout's batch alone, between env steps and between sleeps, in one process (docs/throughput.md,
"Where the loop loses").

The OpenMP policy is read when torch loads, so compare policies by running this once per setting, in turns:

    python -m benchmark.lab.loop_profile                                  # the scripts' policy (PASSIVE)
    GOMP_SPINCOUNT=10000 python -m benchmark.lab.loop_profile             # workers spin briefly
    OMP_WAIT_POLICY=ACTIVE python -m benchmark.lab.loop_profile           # workers spin

Each round times, on 1 torch thread and on all the process's cores (``t{cores}``: the scripts' form, the whole batch
on the threads of their plan), a batch-``num_envs`` forward with the action sampled and copied out:
in a tight loop ("alone"), alternating with a step of the vector env ("loop", and the env step itself), and
alternating with a ``time.sleep`` as long as that env step ("sleep": what is left of the loop's cost without the
env's threads). With ``--pipelined`` each round also times the rollout overlapped: the envs in two pools of half the
batch each, one stepping while the policy acts for the other on one torch thread ("pipelined", ms per batch of
``num_envs``, to set against "loop" + "env" of the serial rollout). As in the scripts, glibc keeps freed memory
(``cleanrl_utils/cpu.py``) and the env pool gets the scripts' stepping threads (``benchmark/lab/placement.py``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Optional

import cleanrl_utils  # noqa: F401  (first: sets the OpenMP thread policy before torch loads)
import numpy as np
import torch
import tyro

from cleanrl_utils.cpu import keep_freed_memory
from benchmark.lab.placement import plan_threads, use_threads
from benchmark.lab.throughput import _Spaces, load_agent_class
from cleanrl_utils.validation import fail
from cleanrl_utils.vector_envs import envpool_available, make_atari_vector_env


@dataclass
class Args:
    env_id: str = "BreakoutNoFrameskip-v4"
    """the game"""
    vector_env: Optional[str] = None
    """the backend (default: envpool when installed, else ale)"""
    num_envs: int = 8
    """envs, and the inference batch"""
    steps: int = 100
    """batches per measurement"""
    rounds: int = 3
    """rounds over the thread counts"""
    pipelined: bool = False
    """also time the rollout overlapped: two pools of half the envs, one stepping while the policy acts for the other"""


def profile(args: Args) -> dict[str, list[float]]:
    """Milliseconds per batch, one value per round, under ``{mode}_t{threads}`` (modes: alone, loop, env, sleep;
    threads: 1 and the scripts' count), and ``pipelined`` with ``args.pipelined``."""
    backend = args.vector_env or ("envpool" if envpool_available() else "ale")
    torch.manual_seed(0)
    agent = load_agent_class()(_Spaces)
    envs = make_atari_vector_env(
        backend, args.env_id, args.num_envs, env_threads=plan_threads(args.num_envs).env_threads
    )  # as the scripts size it
    obs = torch.as_tensor(envs.reset(seed=0)[0])
    thread_counts = sorted({1, plan_threads(args.num_envs).torch_threads})
    half = args.num_envs // 2
    halves = [
        make_atari_vector_env(backend, args.env_id, half, env_threads=plan_threads(half).env_threads, seed=k * half)
        for k in range(2 if args.pipelined else 0)
    ]
    half_obs = [torch.as_tensor(envs_half.reset(seed=k * half)[0]) for k, envs_half in enumerate(halves)]

    def infer(x: torch.Tensor) -> np.ndarray:
        with torch.inference_mode():
            action = agent.get_action_and_value(x)[0]
        return action.cpu().numpy()

    times: dict[str, list[float]] = {}
    try:
        for _ in range(args.rounds):
            for threads in thread_counts:
                variant = f"t{threads}"
                use_threads(threads)
                for _ in range(10):  # warm-up
                    infer(obs)
                start = time.perf_counter()
                for _ in range(args.steps):
                    infer(obs)
                alone = time.perf_counter() - start
                loop = env = 0.0
                for _ in range(args.steps):
                    t0 = time.perf_counter()
                    actions = infer(obs)
                    t1 = time.perf_counter()
                    obs = torch.as_tensor(envs.step(actions)[0])
                    loop, env = loop + t1 - t0, env + time.perf_counter() - t1
                slept = 0.0
                for _ in range(args.steps):
                    t0 = time.perf_counter()
                    infer(obs)
                    slept += time.perf_counter() - t0
                    time.sleep(env / args.steps)
                for mode, seconds in (("alone", alone), ("loop", loop), ("env", env), ("sleep", slept)):
                    times.setdefault(f"{mode}_{variant}", []).append(1e3 * seconds / args.steps)
            if halves:  # one half steps while the policy acts for the other
                use_threads(1)
                first, second = halves
                send(first, infer(half_obs[0]))
                start = time.perf_counter()
                for _ in range(args.steps):
                    send(second, infer(half_obs[1]))
                    half_obs[0] = torch.as_tensor(wait(first)[0])
                    send(first, infer(half_obs[0]))
                    half_obs[1] = torch.as_tensor(wait(second)[0])
                pipelined = time.perf_counter() - start
                half_obs[0] = torch.as_tensor(wait(first)[0])
                times.setdefault("pipelined", []).append(1e3 * pipelined / args.steps)
    finally:
        envs.close()
        for envs_half in halves:
            envs_half.close()
    return times


def send(envs, actions) -> None:
    """The first half of a step; gymnasium's SyncVectorEnv has none, so it keeps the actions for `wait`."""
    if hasattr(envs, "step_async"):
        envs.step_async(actions)
    else:
        envs.pending_actions = actions


def wait(envs) -> tuple:
    return envs.step_wait() if hasattr(envs, "step_async") else envs.step(envs.pending_actions)


def main(args: Args) -> None:
    if args.pipelined and args.num_envs % 2:
        fail(f"--pipelined splits the envs in two halves: give an even --num-envs, not {args.num_envs}")
    keep_freed_memory()  # as in the scripts
    policy = {k: os.environ[k] for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if k in os.environ}
    print(f"OpenMP: {policy}; ms per batch of {args.num_envs}, one value per round", flush=True)
    for key, values in profile(args).items():
        print(f"{key:10s} " + " ".join(f"{v:7.2f}" for v in values), flush=True)


if __name__ == "__main__":
    main(tyro.cli(Args))
