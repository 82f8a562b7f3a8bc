"""benchmark/lab/rank_params.py: the hash of the parameters each torchrun rank ended with, and of the saved model,
read from outside the script (gpu_check's torchrun steps rely on it). A real 2-rank torchrun job under it, with
--model, is tests/test_multigpu.py::test_readme_command_two_ranks_sixteen_envs_identical_parameters."""

from __future__ import annotations

import torch
from helpers import load_script, run_script

from benchmark.lab import rank_params


class _Spaces:
    class single_action_space:  # noqa: N801
        n = 4


def test_the_hash_is_of_names_and_values_not_of_the_memory_layout(tmp_path):
    torch.manual_seed(0)
    agent = load_script("cleanrl/ppo_atari.py", "ppo_atari_for_rank_params").Agent(_Spaces)  # channels_last
    digest = rank_params.params_sha256(agent.state_dict())
    nchw = {name: tensor.contiguous() for name, tensor in agent.state_dict().items()}
    assert rank_params.params_sha256(nchw) == digest
    torch.save({"model": agent.state_dict(), "env_id": "BreakoutNoFrameskip-v4"}, tmp_path / "m.cleanrl_model")
    assert rank_params.saved_model_sha256(tmp_path / "m.cleanrl_model") == digest
    changed = dict(nchw, **{"critic.bias": nchw["critic.bias"] + 1e-7})
    assert rank_params.params_sha256(changed) != digest
    renamed = {("x" + name): tensor for name, tensor in nchw.items()}
    assert rank_params.params_sha256(renamed) != digest


def test_the_ranks_hashes_are_read_back_by_rank(tmp_path):
    (tmp_path / "rank0.sha256").write_text("aa\n")
    (tmp_path / "rank1.sha256").write_text("bb\n")
    (tmp_path / rank_params.MODEL_HASH).write_text("aa\n")
    assert rank_params.rank_hashes(tmp_path) == {0: "aa", 1: "bb"}
    assert rank_params.rank_hashes(tmp_path / "none") == {}


def test_a_missing_script_is_a_one_line_error(tmp_path):
    result = run_script(
        ["-m", "benchmark.lab.rank_params", str(tmp_path / "out"), "nowhere.py"], cwd=tmp_path, timeout=120
    )
    assert result.returncode == 1 and result.stderr.strip().splitlines() == [  # the path as the user gave it
        "error: no such script: nowhere.py (give the training script after OUT, then its arguments)"
    ]
    assert not (tmp_path / "out").exists()
