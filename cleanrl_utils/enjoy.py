"""Play a model from the Hugging Face Hub, or from a repository's folder here, with CleanRL's command
(docs/sharing.md): `python -m cleanrl_utils.enjoy --exp-name ppo_atari --env-id BreakoutNoFrameskip-v4`."""

import os
from dataclasses import dataclass
from typing import Optional

import cleanrl_utils  # noqa: F401  (first: sets the OpenMP thread policy before torch loads)
import tyro

from cleanrl_utils.evals.ppo_eval import check_video_dir, evaluate, pick_device, report
from cleanrl_utils.hub import download_model
from cleanrl_utils.launch.runs import check_positive
from cleanrl_utils.validation import check_extra, check_extras, fail


@dataclass
class Args:
    exp_name: Optional[str] = None
    """the name of the script that trained the model (default: ppo_atari; its file is `{exp_name}.cleanrl_model`): `cleanrl/{exp_name}.py` builds the network if it is there, else the script the model records"""
    script: Optional[str] = None
    """the training script whose `Agent` the weights load into (default: see --exp-name)"""
    seed: int = 1
    """the seed of the training run (in the repository's name)"""
    hf_entity: str = "cleanrl"
    """the user or org name of the model repository from the Hugging Face Hub"""
    hf_repository: Optional[str] = None
    """the model repository, ENTITY/NAME (default: `{hf_entity}/{env_id}-{exp_name}-seed{seed}`), or its folder here"""
    env_id: str = "BreakoutNoFrameskip-v4"
    """the id of the environment (CleanRL's model files do not say it)"""
    eval_episodes: int = 10
    """the number of full games to play"""
    capture_video: bool = False
    """record each game as an mp4 in --video-dir ('.[video]')"""
    video_dir: str = "videos"
    """the videos' folder"""
    cuda: bool = True
    """run the network on CUDA when a device is there"""


if __name__ == "__main__":
    args = tyro.cli(Args)
    check_positive(eval_episodes=args.eval_episodes)
    check_extras(capture_video=args.capture_video)
    check_extra("huggingface_hub", "cleanrl_utils.enjoy", "hub")
    if args.capture_video:
        check_video_dir(args.video_dir)
    exp_name = args.exp_name or "ppo_atari"
    repo_id = args.hf_repository or f"{args.hf_entity}/{args.env_id}-{exp_name}-seed{args.seed}"
    if os.path.isdir(repo_id):  # a repository's folder on this machine
        model_path = os.path.join(repo_id, f"{exp_name}.cleanrl_model")
        if not os.path.isfile(model_path):
            fail(f"{repo_id} has no {exp_name}.cleanrl_model: pass the --exp-name of the script that trained it")
    else:
        model_path = download_model(
            repo_id,
            f"{exp_name}.cleanrl_model",
            "--hf-repository"
            if args.hf_repository
            else "the repository id ({hf_entity}/{env_id}-{exp_name}-seed{seed})",
            "copy the file and evaluate it with `python -m cleanrl_utils.evals.ppo_eval --model-path FILE`",
        )
    print(f"{repo_id}: {model_path}", flush=True)
    returns = evaluate(
        model_path,
        args.env_id,
        args.eval_episodes,
        device=pick_device(args.cuda),
        video_dir=args.video_dir if args.capture_video else None,
        script=args.script,
        exp_name=args.exp_name,
    )
    if not returns:
        fail("no game finished")
    report(returns, args.video_dir if args.capture_video else None)
