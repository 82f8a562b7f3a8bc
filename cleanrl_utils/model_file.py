"""A saved model (the `.cleanrl_model` of `--save-model`, a run's checkpoint.pt, or CleanRL's own file: its weights
alone): reading it, and the training script whose `Agent` its weights load into."""

from __future__ import annotations

import os
from typing import Optional

import torch

from cleanrl_utils.script_shape import find_script
from cleanrl_utils.validation import fail, first_sentence, is_atari


def load_checkpoint(path: str) -> dict:
    """Load a saved model safely (`weights_only=True`), with a one-line error for a bad file."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        fail(f"no model file at {path!r}; pass the .cleanrl_model written by --save-model or a run's checkpoint.pt")
    except Exception as exc:  # torch raises several types for a corrupt or foreign file
        fail(unreadable(path, exc))
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("state"), dict) and "agent" in checkpoint["state"]:
        checkpoint = {**checkpoint, "model": checkpoint["state"]["agent"]}  # a run's checkpoint.pt: its agent
    if isinstance(checkpoint, dict) and checkpoint and all(isinstance(v, torch.Tensor) for v in checkpoint.values()):
        checkpoint = {"model": checkpoint}  # CleanRL's file: `agent.state_dict()` alone, without its env id
    if not isinstance(checkpoint, dict) or "model" not in checkpoint:
        fail(f"{path!r} holds no model; pass the .cleanrl_model written by --save-model or a run's checkpoint.pt")
    return checkpoint


def agent_script(model: dict, path: str, env_id: str, script: Optional[str], exp_name: Optional[str]) -> str:
    """The training script whose `Agent` the model in `path` loads into: --script, else `cleanrl/{exp_name}.py`, else
    the one it records (else by its name in cleanrl/), else for CleanRL's own file ppo_atari.py or ppo.py by the env."""
    if script is not None:
        return find_script(script) or fail(f"no script {script!r}: pass --script the path of the training script")
    named = find_script(f"cleanrl/{exp_name}.py") if exp_name else None
    recorded = model.get("script_path") or model.get("script")
    if named is None and recorded is None:
        named = find_script("cleanrl/ppo_atari.py" if is_atari(env_id) else "cleanrl/ppo.py")
    found = named or (find_script(recorded) if os.path.isabs(recorded) else None)
    found = found or find_script(os.path.join("cleanrl", os.path.basename(recorded)))
    if found is None:
        fail(
            f"the model in {path!r} was trained by {recorded}, which is not here: pass --script PATH (that script, or "
            f"a copy of it{'; a pushed repository holds one' * bool(model.get('source'))})"
        )
    return found


def unreadable(path: str, exc: BaseException) -> str:
    """Why a model file does not load: one that starts as torch's zip archives do is damaged, another is foreign."""
    with open(path, "rb") as f:
        if f.read(4) == b"PK\x03\x04":
            return (
                f"the model file {path!r} is damaged (cut short or changed: {first_sentence(exc)}); save, copy or "
                "download it again (a run's checkpoint.pt holds the same weights)"
            )
    return f"cannot read the model file {path!r} ({type(exc).__name__}); is it a .cleanrl_model or checkpoint.pt?"
