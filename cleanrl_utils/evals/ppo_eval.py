"""Evaluate a trained model: the return of N full episodes.

    python -m cleanrl_utils.evals.ppo_eval --model-path runs/RUN/ppo_atari.cleanrl_model --eval-episodes 10

The model is the `.cleanrl_model` that `--save-model` writes, or a run's `checkpoint.pt` (written by every
training script without `--save-model` too). The env id it was trained on decides the network: an Atari game gets
`cleanrl/ppo_atari.py`'s `Agent` and the training wrappers, any other env (`cleanrl/ppo.py`'s classic control)
`cleanrl/ppo.py`'s `Agent`. An Atari episode's return is the sum of the raw (unclipped) game score over all lives,
as logged during training.

A copied and modified script evaluates its own network (and, if it changed them, its own wrappers) from Python,
as in CleanRL::

    from cleanrl_utils.evals.ppo_eval import evaluate
    returns = evaluate(model_path, args.env_id, eval_episodes=10, Model=Agent, device=device)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import cleanrl_utils  # noqa: F401  (first: sets the OpenMP thread policy before torch loads)
import gymnasium as gym
import numpy as np
import torch
import tyro

from cleanrl_utils.atari_wrappers import make_atari_env
from cleanrl_utils.validation import check_env_id, check_positive, fail, is_atari


@dataclass
class Args:
    model_path: str
    """the `.cleanrl_model` file written by `--save-model`, or a run's `checkpoint.pt`"""
    env_id: Optional[str] = None
    """the game to evaluate on (default: the one the model was trained on)"""
    eval_episodes: int = 10
    """the number of full games to play"""
    seed: int = 1
    """seed of the evaluation env and of the action sampling"""
    greedy: bool = False
    """take the most likely action instead of sampling from the policy"""
    max_steps: int = 108_000
    """stop after this many agent steps in total, whatever the number of finished episodes"""
    cuda: bool = True
    """run the network on CUDA when a device is there (else on CPU, with a note)"""


def load_checkpoint(path: str) -> dict:
    """Load a saved model safely (`weights_only=True`), with a one-line error for a bad file."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        fail(f"no model file at {path!r}; pass the .cleanrl_model written by --save-model or a run's checkpoint.pt")
    except Exception as exc:  # torch raises several types for a corrupt or foreign file
        fail(f"cannot read the model file {path!r} ({type(exc).__name__}); is it a .cleanrl_model or checkpoint.pt?")
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("state"), dict) and "agent" in checkpoint["state"]:
        checkpoint = {**checkpoint, "model": checkpoint["state"]["agent"]}  # a run's checkpoint.pt: its agent
    if not isinstance(checkpoint, dict) or "model" not in checkpoint:
        fail(f"{path!r} holds no model; pass the .cleanrl_model written by --save-model or a run's checkpoint.pt")
    return checkpoint


def make_classic_env(env_id: str) -> gym.Env:
    """The single env of a classic-control evaluation; `info["episode"]` marks a finished episode."""
    return gym.wrappers.RecordEpisodeStatistics(gym.make(env_id))


def pick_device(cuda: bool) -> torch.device:
    """CUDA when asked for and present; else the CPU, with a one-line note when CUDA was asked for."""
    if cuda and not torch.cuda.is_available():
        print("note: no CUDA device found; evaluating on CPU (--no-cuda skips this note)", flush=True)
    return torch.device("cuda" if cuda and torch.cuda.is_available() else "cpu")


def evaluate(
    model_path: str,
    env_id: Optional[str] = None,
    eval_episodes: int = 10,
    seed: int = 1,
    greedy: bool = False,
    max_steps: int = 108_000,
    *,
    Model: Optional[Callable[[Any], torch.nn.Module]] = None,
    make_env: Optional[Callable[[str], Any]] = None,
    device: torch.device | str = "cpu",
) -> list[float]:
    """Play `eval_episodes` full games with the saved model; returns their raw scores.

    `Model(envs)` builds the network the weights load into (default: the `Agent` of `cleanrl/ppo_atari.py` for an
    Atari game, of `cleanrl/ppo.py` otherwise); like CleanRL's agents it reads `envs.single_action_space` /
    `single_observation_space` and has `get_action_and_value(obs)` returning the action first. `greedy=True`
    takes the argmax of the logits instead, `actor(hidden(obs))` (Atari `Agent`) or `actor(obs)` (classic
    `Agent`). `make_env(env_id)` builds the single env (default: the training scripts' Atari wrappers, or
    `gym.make` with episode statistics); its `info["episode"]` marks a finished episode.
    """
    checkpoint = load_checkpoint(model_path)
    env_id = env_id or checkpoint.get("env_id")
    if env_id is None:
        fail(f"{model_path!r} does not say which env it was trained on; pass --env-id")
    check_env_id(env_id)
    atari = is_atari(env_id)
    if Model is None:
        if atari:
            from cleanrl.ppo_atari import Agent as Model
        else:
            from cleanrl.ppo import Agent as Model
    if make_env is None:
        make_env = make_atari_env if atari else make_classic_env
    env = make_env(env_id)
    # the agents read the spaces of a vector env: give the single env the same attributes
    env.single_action_space = env.action_space
    env.single_observation_space = env.observation_space
    agent = Model(env).to(device)
    try:
        agent.load_state_dict(checkpoint["model"])
    except RuntimeError:
        fail(f"the model in {model_path!r} does not fit {env_id!r} (different action count or architecture)")
    logits_from = "actor(hidden(obs))" if atari else "actor(obs)"  # as the two scripts' Agents compute them
    if greedy and not (hasattr(agent, "actor") and (hasattr(agent, "hidden") or not atari)):
        fail(f"--greedy needs the model's logits from {logits_from}; {type(agent).__name__} has no actor/hidden")
    agent.eval()
    torch.manual_seed(seed)

    returns: list[float] = []
    obs, _ = env.reset(seed=seed)
    for _ in range(max_steps):
        with torch.inference_mode():
            x = torch.as_tensor(np.asarray(obs), device=device).unsqueeze(0)
            if greedy:
                action = agent.actor(agent.hidden(x) if atari else x).argmax(dim=1)
            else:
                action, _, _, _ = agent.get_action_and_value(x)
        obs, _, terminated, truncated, info = env.step(int(action.item()))
        if terminated or truncated:
            if "episode" in info:  # a real game over (in Atari a lost life ends only the learning episode)
                returns.append(float(info["episode"]["r"]))
                print(f"eval episode {len(returns)}: return {returns[-1]:.1f}, length {int(info['episode']['l'])}")
                if len(returns) == eval_episodes:
                    break
            obs, _ = env.reset()
    env.close()
    return returns


if __name__ == "__main__":
    args = tyro.cli(Args)
    check_positive(eval_episodes=args.eval_episodes, max_steps=args.max_steps)
    device = pick_device(args.cuda)
    start = time.time()
    returns = evaluate(
        args.model_path, args.env_id, args.eval_episodes, args.seed, args.greedy, args.max_steps, device=device
    )
    if not returns:
        fail(f"no episode finished within --max-steps {args.max_steps}; raise it")
    print(
        f"{len(returns)} episodes: mean return {np.mean(returns):.2f} +- {np.std(returns):.2f} "
        f"(min {np.min(returns):.1f}, max {np.max(returns):.1f}) in {time.time() - start:.1f}s"
    )
