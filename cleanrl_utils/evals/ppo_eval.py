"""Evaluate a trained model over N full episodes, and with `--capture-video` record each (docs/sharing.md). A copied
and modified script evaluates its own network as in CleanRL: `evaluate(model_path, env_id, Model=Agent, device=device)`.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import cleanrl_utils  # noqa: F401  (first: sets the OpenMP thread policy before torch loads)
import gymnasium as gym
import numpy as np
import torch
import tyro

from cleanrl_utils.atari_wrappers import make_atari_env
from cleanrl_utils.model_file import agent_script, load_checkpoint
from cleanrl_utils.script_shape import load_module, read_script
from cleanrl_utils.launch.runs import check_positive
from cleanrl_utils.validation import check_env_id, check_extra, check_extras, fail, is_atari


@dataclass
class Args:
    model_path: Optional[str] = None
    """the `.cleanrl_model` file written by `--save-model`, a run's `checkpoint.pt`, or a CleanRL model file"""
    hf_repository: Optional[str] = None
    """instead of --model-path: a model on the Hugging Face Hub, `ENTITY/NAME` (its file `{exp_name}.cleanrl_model`)"""
    exp_name: Optional[str] = None
    """the script that trained the model, as CleanRL names it: `cleanrl/{exp_name}.py` builds the network (default: the script the model records); with --hf-repository the repository's file `{exp_name}.cleanrl_model` (ppo_atari)"""
    script: Optional[str] = None
    """the training script whose `Agent` the weights load into (default: the one that trained the model)"""
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
    capture_video: bool = False
    """record each game as an mp4 (the emulator's screen, all lives) in --video-dir ('.[video]')"""
    video_dir: Optional[str] = None
    """the videos' folder (default: `videos/` beside the model file; for --hf-repository, `videos/` here)"""


def play_as_trained(agent: torch.nn.Module, checkpoint: dict, path: str) -> None:
    """A --bf16 model (its file's flag, or a checkpoint.pt's settings) plays as it trained: its network under bfloat16
    autocast (the scripts' `Agent.bf16`); a network without that switch plays in float32, with a note."""
    if not checkpoint.get("bf16", (checkpoint.get("settings") or {}).get("bf16", False)):
        return
    if hasattr(agent, "bf16"):
        agent.bf16 = True
        print(f"note: {path} was trained with --bf16: its network plays under bfloat16 autocast, as it trained")
    else:
        print(
            f"note: {path} was trained with --bf16, but {type(agent).__name__} has no bf16 switch: it plays in float32"
        )


def check_video_dir(folder: str) -> None:
    """The videos' folder exists or is made, and takes a file, before any game is played (else one line)."""
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".writable_"):
            pass
    except OSError as exc:
        reason = "a file is in the way" if isinstance(exc, (FileExistsError, NotADirectoryError)) else exc.strerror
        fail(f"cannot write the videos to {folder!r} ({reason}): pass a writable --video-dir")


def load_weights(agent: torch.nn.Module, weights: dict, path: str, env_id: str, action_count: Optional[int]) -> None:
    """`weights` into `agent`; a file of another game or network is one line that says which parameter differs."""
    own = agent.state_dict()
    if own.keys() != weights.keys():
        fail(
            f"the model in {path!r} is not this network: its parameters are {', '.join(list(weights)[:4])}, ... "
            f"(the network for {env_id!r} has {', '.join(list(own)[:4])}, ...; pass --script of the script that "
            "trained it)"
        )
    for name, mine in own.items():
        theirs = tuple(weights[name].shape)
        if theirs == tuple(mine.shape):
            continue
        if name.startswith("actor.") and action_count is not None:
            fail(
                f"the model in {path!r} does not fit {env_id!r}: it plays {theirs[0]} actions and the game has "
                f"{action_count} (it was trained on another game; pass that game's --env-id)"
            )
        fail(
            f"the model in {path!r} does not fit {env_id!r}: parameter {name} is {theirs} in the file, "
            f"{tuple(mine.shape)} here (pass --script of the script that trained it)"
        )
    agent.load_state_dict(weights)


class GameRecorder(gym.Wrapper):
    """Records every frame of each game to an mp4 in `folder`, streamed to ffmpeg (moviepy): the emulator's RGB screen
    (Atari), else `render()`. Each reset of the env below starts a game; `finish(name)` names its video."""

    def __init__(self, env: gym.Env, folder: str):
        super().__init__(env)
        # the writer of the game going on: opened at its first frame, when its size is known
        self.folder, self.writer, self.part = folder, None, os.path.join(folder, ".unfinished-game.mp4")
        self.ale = getattr(env.unwrapped, "ale", None)
        self.fps = 60 if self.ale is not None else env.metadata.get("render_fps", 30)  # the ALE runs at 60 Hz

    def reset(self, **kwargs: Any):
        result = self.env.reset(**kwargs)
        self._discard()  # a game that did not finish
        return result

    def step(self, action: Any):
        result = self.env.step(action)
        frame = self.ale.getScreenRGB() if self.ale is not None else self.env.render()
        if self.writer is None:
            from moviepy.video.io.ffmpeg_writer import FFMPEG_VideoWriter

            os.makedirs(self.folder, exist_ok=True)
            size, pixels = (frame.shape[1], frame.shape[0]), ["-pix_fmt", "yuv420p"]  # the players' pixel format
            self.writer = FFMPEG_VideoWriter(self.part, size, self.fps, codec="libx264", ffmpeg_params=pixels)
        self.writer.write_frame(frame)
        return result

    def finish(self, name: str) -> str:
        """Close the game's video as `name` in the folder; returns its path."""
        path = os.path.join(self.folder, name)
        self.writer.close()
        os.replace(self.part, path)
        self.writer = None
        return path

    def _discard(self) -> None:
        if self.writer is not None:
            self.writer.close()
            os.remove(self.part)
            self.writer = None

    def close(self) -> None:
        self._discard()
        super().close()


def attach_recorder(env: gym.Env, folder: str) -> GameRecorder:
    """A `GameRecorder` put right above the emulator, under the frame skip (Atari's `AtariPreprocessing`) and the
    wrappers that serve and count lives, so that it sees every frame of a whole game; else under the outermost."""
    above = env
    while (
        not isinstance(above, gym.wrappers.AtariPreprocessing)
        and isinstance(above.env, gym.Wrapper)
        and not isinstance(above.env, (gym.wrappers.TimeLimit, gym.wrappers.OrderEnforcing))
    ):
        above = above.env
    if getattr(above.env.unwrapped, "ale", None) is None and above.env.unwrapped.render_mode != "rgb_array":
        fail("--capture-video needs an env made with render_mode='rgb_array'")
    above.env = recorder = GameRecorder(above.env, folder)
    return recorder


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
    video_dir: Optional[str] = None,
    script: Optional[str] = None,
    exp_name: Optional[str] = None,
) -> list[float]:
    """Play `eval_episodes` full games with the saved model; returns their raw scores. `Model(envs)` builds the
    network (default: the `Agent` of the script `agent_script` finds), `make_env(env_id)` the single env (default: the
    training scripts' wrappers); with `video_dir` each game is recorded to `video_dir/game{k}_return{return}.mp4`."""
    checkpoint = load_checkpoint(model_path)
    env_id = env_id or checkpoint.get("env_id")
    if env_id is None:
        fail(f"{model_path!r} does not say which env it was trained on; pass --env-id")
    check_env_id(env_id)
    atari = is_atari(env_id)
    if Model is None:
        trained_by = agent_script(checkpoint, model_path, env_id, script, exp_name)
        if read_script(trained_by) is None or not hasattr(load_module(trained_by), "Agent"):
            fail(f"{trained_by} is not a training script with an `Agent` class; pass --script of the one that has it")
        Model = load_module(trained_by).Agent
    if video_dir and not atari:  # pygame draws a classic-control env's frames
        check_extra("pygame", "--capture-video of a classic-control env", "video")
    if make_env is not None or atari:
        env = (make_env or make_atari_env)(env_id)
    else:  # a classic env draws its frames only when asked to; `info["episode"]` marks a finished episode
        env = gym.wrappers.RecordEpisodeStatistics(gym.make(env_id, render_mode="rgb_array" if video_dir else None))
    recorder = attach_recorder(env, video_dir) if video_dir else None
    # the agents read the spaces of a vector env: give the single env the same attributes
    env.single_action_space = env.action_space
    env.single_observation_space = env.observation_space
    agent = Model(env).to(device)
    load_weights(agent, checkpoint["model"], model_path, env_id, getattr(env.action_space, "n", None))
    play_as_trained(agent, checkpoint, model_path)
    logits_from = "actor(hidden(obs))" if atari else "actor(obs)"  # as the two scripts' Agents compute them
    if greedy and not (hasattr(agent, "actor") and (hasattr(agent, "hidden") or not atari)):
        fail(f"--greedy needs the model's logits from {logits_from}; {type(agent).__name__} has no actor/hidden")
    agent.eval()
    torch.manual_seed(seed)
    return play(agent, env, recorder, eval_episodes, seed, greedy, max_steps, device, atari)


def play(
    agent, env: gym.Env, recorder, eval_episodes: int, seed: int, greedy: bool, max_steps: int, device, atari: bool
):
    """The games of `evaluate`: their returns, each finished one printed (and its video closed)."""
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
                video = recorder and ", video " + recorder.finish(f"game{len(returns)}_return{returns[-1]:g}.mp4")
                print(
                    f"eval episode {len(returns)} of {eval_episodes}: return {returns[-1]:.1f}, length "
                    f"{int(info['episode']['l'])}{video or ''}",
                    flush=True,
                )
                if len(returns) == eval_episodes:
                    break
            obs, _ = env.reset()
    env.close()
    return returns


def summary(returns: list[float]) -> str:
    """`mean +- std` of the games' returns, as the evaluation and the model card report it."""
    return f"{np.mean(returns):.2f} +- {np.std(returns):.2f}"


def report(returns: list[float], video_dir: Optional[str], took: str = "") -> None:
    """The games' mean return (and where their videos are)."""
    spread = f"(min {np.min(returns):.1f}, max {np.max(returns):.1f})"
    print(f"{len(returns)} episodes: mean return {summary(returns)} {spread}{took}")
    if video_dir:
        print(f"videos of the {len(returns)} games in {video_dir}")


if __name__ == "__main__":
    args = tyro.cli(Args)
    check_positive(eval_episodes=args.eval_episodes, max_steps=args.max_steps)
    check_extras(capture_video=args.capture_video)
    if (args.model_path is None) == (args.hf_repository is None):
        fail("give the model with --model-path FILE or --hf-repository ENTITY/NAME (one of them)")
    if args.hf_repository is not None:
        from cleanrl_utils.hub import download_model

        args.model_path = download_model(args.hf_repository, f"{args.exp_name or 'ppo_atari'}.cleanrl_model")
    beside = os.path.dirname(args.model_path) if args.hf_repository is None else ""  # not into huggingface_hub's cache
    video_dir = args.video_dir or os.path.join(beside, "videos")
    if args.capture_video:
        check_video_dir(video_dir)
    device = pick_device(args.cuda)
    start = time.time()
    returns = evaluate(
        args.model_path,
        args.env_id,
        args.eval_episodes,
        args.seed,
        args.greedy,
        args.max_steps,
        device=device,
        video_dir=video_dir if args.capture_video else None,
        script=args.script,
        exp_name=args.exp_name,
    )
    if not returns:
        fail(f"no episode finished within --max-steps {args.max_steps}; raise it")
    report(returns, video_dir if args.capture_video else None, f" in {time.time() - start:.1f}s")
