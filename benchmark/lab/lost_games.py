"""Replay a trained Atari agent and look at the games it loses: the return, length and actions of every game.

    python -m benchmark.lab.lost_games runs/RUN/checkpoint.pt --games 64 --backend sync

plays ``--games`` full games with the checkpoint's agent (``cleanrl/ppo_atari.py``'s `Agent`, actions sampled as in
training) on ``--num-envs`` envs of ``--backend``, and prints one line per game: its return, length in frames, the
share of steps of each action, and, on the Python wrappers (`sync`), where the agent's paddle was (Pong's RAM byte
51, the player's paddle y; other games: omitted). It ends with the same figures for the games below
``--lost-below`` against the rest, so that a game the agent throws (Pong 0-21 while it wins the rest 21-0) can be
told apart from an env difference: the same checkpoint on two backends must lose alike if the policy is the cause.
``--out FILE.json`` also writes the figures, for the full-length learning report (``benchmark.lab.learning``),
which shows the replays it finds in ``docs/results/PROFILE/replays/``.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Optional

import cleanrl_utils  # noqa: F401  (first: sets the OpenMP thread policy before torch loads)
import gymnasium as gym
import numpy as np
import torch
import tyro

from cleanrl.ppo_atari import Agent
from cleanrl_utils.evals.ppo_eval import load_checkpoint
from cleanrl_utils.vector_envs import make_atari_vector_env

from benchmark.lab.learning import machine

PADDLE_Y_RAM = {"PongNoFrameskip-v4": 51}  # the player's paddle, from the Atari RAM annotations (AtariARI)


@dataclass
class Args:
    checkpoint: tyro.conf.Positional[str]
    """a run's checkpoint.pt (or a .cleanrl_model)"""
    env_id: str = "PongNoFrameskip-v4"
    """the game it was trained on"""
    backend: str = "sync"
    """the vector env to play on: sync, async, ale or envpool"""
    games: int = 64
    """full games to play"""
    num_envs: int = 8
    """envs played at once"""
    seed: int = 1
    """seed of the envs and of the action sampling"""
    lost_below: float = 0.0
    """a game whose return is below this is a lost game"""
    out: Optional[str] = None
    """also write the figures to this JSON file"""


def main(args: Args) -> None:
    torch.manual_seed(args.seed)
    envs = make_atari_vector_env(args.backend, args.env_id, args.num_envs, seed=args.seed)
    agent = Agent(envs)
    checkpoint = load_checkpoint(args.checkpoint)
    agent.load_state_dict(checkpoint["model"])
    agent.eval()
    with gym.make(args.env_id) as probe:
        names = probe.unwrapped.get_action_meanings()
    ram_at = PADDLE_Y_RAM.get(args.env_id) if hasattr(envs, "envs") else None
    n_actions = envs.single_action_space.n
    counts = np.zeros((args.num_envs, n_actions))
    entropy = np.zeros(args.num_envs)
    paddle: list[list[int]] = [[] for _ in range(args.num_envs)]
    games: list[tuple[float, int, np.ndarray, float, np.ndarray]] = []
    obs, _ = envs.reset(seed=args.seed)
    while len(games) < args.games:
        with torch.inference_mode():
            action, _, ent, _ = agent.get_action_and_value(torch.as_tensor(obs))
        action = action.numpy()
        counts[np.arange(args.num_envs), action] += 1
        entropy += ent.numpy()
        if ram_at is not None:
            for i, env in enumerate(envs.envs):
                paddle[i].append(int(env.unwrapped.ale.getRAM()[ram_at]))
        obs, _, _, _, infos = envs.step(action)
        for i in np.flatnonzero(infos.get("_final_info", np.zeros(args.num_envs, bool))):
            stats = infos["final_info"]
            if not stats["_episode"][i]:
                continue
            steps = counts[i].sum()
            games.append(
                (
                    float(stats["episode"]["r"][i]),
                    int(stats["episode"]["l"][i]),
                    counts[i] / steps,
                    entropy[i] / steps,
                    np.array(paddle[i]),
                )
            )
            r, length, share, ent_mean, ys = games[-1]
            where = f", paddle y median {np.median(ys):.0f} (range {ys.min()}..{ys.max()})" if len(ys) else ""
            print(
                f"game {len(games)} (env {i}): return {r:+.0f}, {length} frames, entropy {ent_mean:.2f}, "
                f"actions {' '.join(f'{a:.2f}' for a in share)}{where}",
                flush=True,
            )
            counts[i], entropy[i], paddle[i] = 0, 0, []
    envs.close()

    returns = np.array([g[0] for g in games])
    lost = returns < args.lost_below
    print(
        f"\n{args.backend}: {len(games)} games, mean return {returns.mean():.2f}, {lost.sum()} below "
        f"{args.lost_below:g} ({', '.join(f'{r:+.0f}' for r in returns[lost]) or 'none'})"
    )
    print("actions: " + " ".join(names))
    summary = {
        "env_id": args.env_id,
        "checkpoint_step": checkpoint.get("global_step"),
        "backend": args.backend,
        "games": len(games),
        "lost_below": args.lost_below,
        "returns": returns.tolist(),
        "action_names": names,
        "machine": machine(),
        "command": "python -m benchmark.lab.lost_games "  # the checkpoint's path is this machine's: left out
        + " ".join("CHECKPOINT" if a == args.checkpoint else a for a in sys.argv[1:]),
    }
    for label, mask in (("lost", lost), ("rest", ~lost)):
        if not mask.any():
            continue
        share = np.mean([g[2] for g, m in zip(games, mask) if m], axis=0)
        ent = float(np.mean([g[3] for g, m in zip(games, mask) if m]))
        line = f"{label}: {mask.sum()} games, action shares {' '.join(f'{a:.2f}' for a in share)}, entropy {ent:.2f}"
        summary[label] = {"games": int(mask.sum()), "action_shares": share.round(4).tolist(), "entropy": round(ent, 4)}
        ys = [g[4] for g, m in zip(games, mask) if m and len(g[4])]
        if ys:
            quartiles = np.percentile(np.concatenate(ys), [25, 50, 75])
            line += f", paddle y quartiles {' '.join(f'{q:.0f}' for q in quartiles)}"
            summary[label]["paddle_y_quartiles"] = quartiles.tolist()
        print(line)
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main(tyro.cli(Args))
