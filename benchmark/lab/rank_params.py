"""The parameters every rank of a torchrun job ended with, hashed: do the ranks end as one model, and is it the model
that ``--save-model`` wrote? (benchmark/lab/gpu_check.py's torchrun steps.)

    torchrun --standalone --nproc_per_node=2 -m benchmark.lab.rank_params OUT [--model PATH] SCRIPT [its args]

runs SCRIPT on every rank as ``python SCRIPT args`` would, in the rank's own process, and then writes the sha256 of
the parameters of its ``agent`` to ``OUT/rank{RANK}.sha256``; with ``--model``, rank 0 also writes that of the model
saved at PATH to ``OUT/model.sha256``. The script reports nothing for it: its agent is read from its globals after
the run. The hash covers the names and values of the state dict, in the standard (NCHW) layout, so a channels_last
network and its saved copy hash alike.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any, Mapping

from benchmark.lab.host_syncs import exec_script
from cleanrl_utils.validation import fail

MODEL_HASH = "model.sha256"


def params_sha256(state_dict: Mapping[str, Any]) -> str:
    """sha256 of a state dict's names and values (on the CPU, standard layout): equal hashes, bit-identical models."""
    digest = hashlib.sha256()
    for name, tensor in state_dict.items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def saved_model_sha256(path: str | os.PathLike[str]) -> str:
    """`params_sha256` of the model a script's ``--save-model`` wrote."""
    import torch

    return params_sha256(torch.load(path, map_location="cpu", weights_only=True)["model"])


def rank_hashes(out: str | os.PathLike[str]) -> dict[int, str]:
    """The hashes a job's ranks wrote to ``out``, by rank."""
    return {int(path.stem[len("rank") :]): path.read_text().strip() for path in Path(out).glob("rank*.sha256")}


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    out, rest = Path(argv[0]), argv[1:]
    model = None
    if rest[0] == "--model":
        if len(rest) < 3:
            fail("--model needs the saved model's path, then the script")
        model, rest = rest[1], rest[2:]
    script, script_args = rest[0], rest[1:]
    if not os.path.isfile(script):
        fail(f"no such script: {script} (give the training script after OUT, then its arguments)")

    def write_hashes(namespace: dict) -> None:
        agent = namespace.get("agent")
        if agent is None:
            fail(f"{script} ran, but has no `agent` to hash")
        rank = os.environ.get("RANK", "0")
        out.mkdir(parents=True, exist_ok=True)
        (out / f"rank{rank}.sha256").write_text(params_sha256(agent.state_dict()) + "\n")
        if model is not None and rank == "0":
            (out / MODEL_HASH).write_text(saved_model_sha256(model) + "\n")

    # a launched rank ends its process itself (exit handlers, then os._exit): the hashes are written by the handler
    namespace, exit_code = exec_script(script, script_args, at_exit=write_hashes)
    if exit_code not in (0, None):
        if not isinstance(exit_code, int):  # a `fail(...)` message: as Python would show it
            print(exit_code, file=sys.stderr)
        return exit_code if isinstance(exit_code, int) else 1
    write_hashes(namespace)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
