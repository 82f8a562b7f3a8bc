"""Share a trained agent on the Hugging Face Hub: `python -m cleanrl_utils.huggingface push --run-dir runs/RUN`
(docs/sharing.md). Getting a model from the hub is `hub.py`."""

from __future__ import annotations

import atexit
import filecmp
import glob
import importlib.util
import os
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pprint import pformat
from typing import NoReturn, Optional

import cleanrl_utils  # noqa: F401  (first: sets the OpenMP thread policy before torch loads)
import numpy as np
import torch
import tyro

from cleanrl_utils.checkpoint import CHECKPOINT_FILE
from cleanrl_utils.evals.ppo_eval import evaluate, summary
from cleanrl_utils.hub import LOGIN, check_repo_id, reason, unreachable
from cleanrl_utils.launch.runs import check_positive, holder, holder_pid
from cleanrl_utils.model_file import agent_script, load_checkpoint
from cleanrl_utils.run_events import event_files
from cleanrl_utils.resume import RUN_IDENTITY
from cleanrl_utils.script_shape import load_module
from cleanrl_utils.validation import (
    check_env_id,
    check_extra,
    computed_fields,
    fail,
    first_sentence,
    flag_words,
    is_atari,
)

FOLDER = "huggingface"  # the repository's folder, inside the run's
REPLAY = "replay.mp4"  # the video the hub shows on the model's page (CleanRL's name)
# left out of the command that trains the model again (as are the settings the script computes)
NOT_FLAGS = {"upload_model", "hf_entity"} | RUN_IDENTITY


@dataclass
class Push:
    """Evaluate a finished run's model, write its repository folder (`{run_dir}/huggingface/`) and push it."""

    run_dir: str
    """the run's folder: its `.cleanrl_model` (--save-model or --upload-model), checkpoint.pt and TensorBoard events"""
    repo_id: Optional[str] = None
    """the model repository, ENTITY/NAME (default: `{hf_entity}/{env_id}-{exp_name}-seed{seed}`, as CleanRL)"""
    hf_entity: str = ""
    """without --repo-id: the user or organisation (empty: the logged-in user, which asks the hub)"""
    eval_episodes: int = 10
    """the number of full games the model card's result is the mean of (each recorded; the last is the replay)"""
    seed: int = 1
    """seed of the evaluation games"""
    max_steps: int = 108_000
    """stop the evaluation after this many agent steps in total"""
    dry_run: bool = False
    """write the folder and print what would be sent; send nothing (needs no network)"""


def read_run(run_dir: str) -> tuple[str, dict, dict]:
    """The run's model file, what it holds (with the computed settings' names), and the run's settings."""
    if not os.path.isdir(run_dir):
        fail(f"no run folder {run_dir!r}; pass --run-dir runs/RUN_NAME")
    checkpoint_path = os.path.join(run_dir, CHECKPOINT_FILE)
    checkpoint = load_checkpoint(checkpoint_path) if os.path.exists(checkpoint_path) else {}
    models = sorted(glob.glob(os.path.join(glob.escape(run_dir), "*.cleanrl_model")))
    models = models or model_of_checkpoint(run_dir, checkpoint)
    if len(models) != 1:
        found = f"it holds {', '.join(os.path.basename(m) for m in models)}" if models else "it holds none"
        fail(
            f"--run-dir {run_dir} must hold one .cleanrl_model ({found}): train with --save-model or "
            "--upload-model, or keep only the model to push"
        )
    if not checkpoint:
        fail(
            f"{run_dir} has no {CHECKPOINT_FILE}: the model card's hyperparameters are the run's settings stored there"
        )
    settings = checkpoint.get("settings") or {}
    model = load_checkpoint(models[0])
    if not model.get("env_id") or not settings:
        fail(f"{models[0]} is not a model saved by this project's scripts (no env id or settings); push a run's model")
    if "computed" not in checkpoint:  # a checkpoint of an older version: its script's `Args` say which
        script = agent_script(model, models[0], model["env_id"], None, None)
        checkpoint["computed"] = computed_fields(load_module(script).Args)
    return models[0], {**model, "computed": sorted(checkpoint["computed"])}, settings


def training_command(script: str, settings: dict, computed: list[str]) -> str:
    """The command that trains the model again: every flag of the run but the `computed` settings."""
    left_out = NOT_FLAGS | set(computed)
    flags = [
        shlex.join(flag_words(name, value))
        for name, value in settings.items()
        if name not in left_out and value is not None
    ]
    return f"python cleanrl/{script} {' '.join(flags)}"


def check_not_running(run_dir: str) -> None:
    """One line if another process still trains the run (--upload-model's own run, this process's parent, may)."""
    held = holder(run_dir)
    if held is not None and holder_pid(held) not in (os.getpid(), os.getppid()):
        fail(
            f"{run_dir} is in use by a run that is still going ({held}): push it once the run has ended (its model "
            "now would be an earlier attempt's, its logs cut short)"
        )


def model_of_checkpoint(run_dir: str, checkpoint: dict) -> list[str]:
    """A run without --save-model: a model file of its checkpoint's weights, in a temporary folder; [] if none."""
    if not checkpoint.get("exp_name"):
        return []
    folder = tempfile.mkdtemp(prefix="cleanrl-push-")
    atexit.register(shutil.rmtree, folder, True)
    path = os.path.join(folder, f"{checkpoint['exp_name']}.cleanrl_model")
    model = {key: checkpoint.get(key) for key in ("model", "env_id", "exp_name", "script_path")}
    torch.save({**model, "bf16": bool((checkpoint.get("settings") or {}).get("bf16"))}, path)
    print(f"note: {run_dir} has no .cleanrl_model (no --save-model): pushing the model of its {CHECKPOINT_FILE}")
    return [path]


def entity_of_login() -> str:
    """The logged-in user's name (asks the hub); one line when it cannot."""
    from huggingface_hub import HfApi

    try:
        return HfApi().whoami()["name"]
    except Exception as exc:
        if not unreachable(exc) and type(exc).__module__.split(".")[0] != "huggingface_hub":
            raise
        fail(
            f"--hf-entity is empty and the logged-in user's name cannot be had from the Hugging Face Hub "
            f"({reason(exc)}); pass --hf-entity ENTITY (or --repo-id ENTITY/NAME)"
        )


def model_card(
    repo_id: str, model: dict, settings: dict, returns: list[float], script: str, seed: int, recorded: bool
) -> tuple[str, dict]:
    """CleanRL's model card: the text and its metadata."""
    env_id, exp_name = model["env_id"], model["exp_name"]
    result = f"{np.mean(returns):.2f} +/- {np.std(returns):.2f}"
    replay = f" `{REPLAY}` is the last of these games." if recorded else ""
    text = f"""
# (CleanRL) **PPO** Agent Playing **{env_id}**

This is a trained model of a PPO agent playing {env_id}, trained with `{script}` of cleanrl-throughput, a
CleanRL-style PPO toolkit ([CleanRL](https://github.com/vwxyzjn/cleanrl)'s scripts, with faster sampling). The model
file `{exp_name}.cleanrl_model` holds the network's weights, the game and the script's name.

## Evaluation

Mean return over {len(returns)} full games (raw score, all lives in Atari; actions sampled from the policy;
evaluation seed {seed}): **{result}**.{replay}

## Get Started

In a checkout of cleanrl-throughput:

```bash
pip install -e '.[hub]'
python -m cleanrl_utils.enjoy --exp-name {exp_name} --env-id {env_id} --hf-repository {repo_id}
python -m cleanrl_utils.evals.ppo_eval --hf-repository {repo_id} --exp-name {exp_name} --capture-video
```

## Command to reproduce the training

`{script}` in this repository is the script as it ran; in a checkout of cleanrl-throughput:

```bash
{training_command(script, settings, model["computed"])}
```

# Hyperparameters
```python
{pformat(settings)}
```
"""
    return text, card_metadata(env_id, result)


def card_metadata(env_id: str, result: str) -> dict:
    from huggingface_hub.repocard import metadata_eval_result

    return {
        "tags": [env_id, "deep-reinforcement-learning", "reinforcement-learning", "custom-implementation"],
        "library_name": "cleanrl",
        **metadata_eval_result(
            model_pretty_name="PPO",
            task_pretty_name="reinforcement-learning",
            task_id="reinforcement-learning",
            metrics_pretty_name="mean_reward",
            metrics_id="mean_reward",
            metrics_value=result,
            dataset_pretty_name=env_id,
            dataset_id=env_id,
        ),
    }


def write_folder(args: Push, repo_id: str, model_path: str, model: dict, settings: dict) -> str:
    """Evaluate the model (recording each game) and write the repository's folder; returns its path."""
    from huggingface_hub.repocard import metadata_save

    folder = os.path.join(args.run_dir, FOLDER)
    check_env_id(model["env_id"])  # (registers the Atari games)
    needs = ["moviepy"] + ([] if is_atari(model["env_id"]) else ["pygame"])  # pygame draws classic-control frames
    if missing := [name for name in needs if importlib.util.find_spec(name) is None]:
        print(f"note: no {REPLAY}: recording the games needs {' and '.join(missing)}: pip install -e '.[video]'")
    script = model.get("script") or f"{model['exp_name']}.py"
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with tempfile.TemporaryDirectory(dir=args.run_dir, prefix=".eval-videos-") as videos:
        recorded = " (recorded; the last is the replay)" * (not missing)
        print(f"evaluating {model_path} over {args.eval_episodes} games{recorded}", flush=True)
        returns = evaluate(
            model_path,
            eval_episodes=args.eval_episodes,
            seed=args.seed,
            max_steps=args.max_steps,
            device=device,
            video_dir=None if missing else videos,
        )
        if not returns:
            fail(f"no game finished within --max-steps {args.max_steps}; raise it")
        print(f"{len(returns)} games: mean return {summary(returns)}", flush=True)
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        if not missing:
            last = max(glob.glob(os.path.join(videos, "game*.mp4")), key=os.path.getmtime)
            shutil.move(last, os.path.join(folder, REPLAY))
    shutil.copy2(model_path, os.path.join(folder, os.path.basename(model_path)))
    for events in event_files(args.run_dir):
        shutil.copy2(events, folder)
    if model.get("source"):
        with open(os.path.join(folder, script), "w", encoding="utf-8") as f:
            f.write(model["source"])
    else:
        print(f"note: {model_path} does not hold its training script (saved by an older version): none in the folder")
    text, metadata = model_card(repo_id, model, settings, returns, script, args.seed, not missing)
    readme = os.path.join(folder, "README.md")
    with open(readme, "w", encoding="utf-8") as f:
        f.write(text)
    metadata_save(readme, metadata)
    return folder


def written_for(folder: str, repo_id: str, model_path: str) -> bool:
    """Whether `folder` is complete and written for this model and repository (a push that failed left it)."""
    from huggingface_hub.repocard import metadata_load

    readme, copy = os.path.join(folder, "README.md"), os.path.join(folder, os.path.basename(model_path))
    if not all(os.path.exists(p) for p in (readme, copy)):
        return False
    with open(readme, encoding="utf-8") as f:
        return (
            (metadata_load(readme) or {}).get("library_name") == "cleanrl"
            and f"--hf-repository {repo_id} " in f.read()
            and filecmp.cmp(copy, model_path, shallow=False)
        )


def push_failed(what: str, folder: str, again: str) -> NoReturn:
    fail(f"{what}; the run and the folder {folder} are kept: push it with: {again}")


def push(args: Push) -> None:
    check_extra("huggingface_hub", "push", "hub")
    check_positive(eval_episodes=args.eval_episodes, max_steps=args.max_steps)
    if args.repo_id is not None:
        check_repo_id(args.repo_id)
    from huggingface_hub import HfApi, get_token
    from huggingface_hub.errors import HfHubHTTPError

    check_not_running(args.run_dir)
    model_path, model, settings = read_run(args.run_dir)
    if not args.dry_run and get_token() is None:
        fail(f"no Hugging Face token: {LOGIN}, then push again (--dry-run writes the folder without one)")
    repo_id = args.repo_id or (
        f"{args.hf_entity or entity_of_login()}/{model['env_id']}-{model['exp_name']}-seed{settings.get('seed', 1)}"
    )
    check_repo_id(repo_id, "the repository id")
    folder = os.path.join(args.run_dir, FOLDER)
    if written_for(folder, repo_id, model_path):
        print(f"{folder} is already written for this model: sending it as it is (remove it to evaluate again)")
    else:
        folder = write_folder(args, repo_id, model_path, model, settings)
    files = sorted(os.path.relpath(os.path.join(d, n), folder) for d, _, names in os.walk(folder) for n in names)
    sizes = "".join(f"\n  {name} ({os.path.getsize(os.path.join(folder, name)) / 2**10:.0f} KiB)" for name in files)
    if args.dry_run:
        sent = f"would create {repo_id} on the Hugging Face Hub (if new) and send {folder} in one commit"
        print(f"dry run: {sent}:{sizes}\nnothing was sent", flush=True)
        return
    words = [os.path.basename(sys.executable), "-m", "cleanrl_utils.huggingface", "push"]
    again = shlex.join([*words, "--run-dir", args.run_dir, "--repo-id", repo_id])
    print(f"pushing {folder} to {repo_id}:{sizes}", flush=True)
    try:
        api = HfApi()
        url = api.create_repo(repo_id, exist_ok=True)
        commit = api.upload_folder(repo_id=repo_id, folder_path=folder, commit_message="pushing model")
    except HfHubHTTPError as exc:
        status = getattr(exc.response, "status_code", None)
        if status == 401:
            push_failed(f"the Hugging Face Hub refused the token (401): {LOGIN}", folder, again)
        if status == 403:
            push_failed(f"the token may not write to {repo_id} (403): use a token with write access", folder, again)
        push_failed(f"the Hugging Face Hub refused the push: {first_sentence(exc)}", folder, again)
    except Exception as exc:
        if not unreachable(exc):
            raise
        push_failed(f"cannot push to the Hugging Face Hub: it is unreachable ({reason(exc)})", folder, again)
    print(f"model pushed to {url} ({getattr(commit, 'commit_url', commit)})")


if __name__ == "__main__":
    command = tyro.extras.subcommand_cli_from_dict({"push": Push})
    if isinstance(command, Push):
        push(command)
