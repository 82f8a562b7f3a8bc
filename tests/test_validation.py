"""Every numeric flag of the training scripts is range-checked before anything is built (cleanrl_utils/validation.py):
one `error:` line naming the flag, the value and what it may be."""

from __future__ import annotations

import dataclasses

import pytest
from helpers import load_script

from cleanrl_utils.validation import RANGES, check_ranges

SCRIPTS = ["cleanrl/ppo.py", "cleanrl/ppo_atari.py", "cleanrl/ppo_atari_multigpu.py"]
BAD = {
    "seed": (-1, "--seed must be >= 0, got -1"),
    "gamma": (1.5, "--gamma must be between 0 and 1, got 1.5"),
    "gae_lambda": (2.0, "--gae-lambda must be between 0 and 1, got 2.0"),
    "clip_coef": (-0.1, "--clip-coef must be positive, got -0.1"),
    "ent_coef": (-1.0, "--ent-coef must be >= 0, got -1.0"),
    "max_grad_norm": (0.0, "--max-grad-norm must be positive, got 0.0"),
    "learning_rate": (0.0, "--learning-rate must be positive, got 0.0"),
    "num_steps": (0, "--num-steps must be positive, got 0"),
    "torch_threads": (1000, "--torch-threads 1000 is far more threads than any machine's cores"),
}


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_defaults_pass_and_every_numeric_flag_has_a_range(script):
    module = load_script(script, "validated_" + script.split("/")[-1][:-3])
    args = module.Args()
    check_ranges(args)
    computed = ("batch_size", "minibatch_size", "num_iterations", "world_size", "local_batch_size",
                "local_minibatch_size")
    numeric = [f.name for f in dataclasses.fields(args) if f.name not in computed
               and isinstance(getattr(args, f.name), (int, float)) and not isinstance(getattr(args, f.name), bool)
               or f.name in ("target_kl", "num_envs", "local_num_envs")]
    assert len(numeric) >= 10, numeric
    unchecked = [name for name in numeric if name not in RANGES]
    assert not unchecked, f"{script}: numeric flags without a range: {unchecked}"


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("field", list(BAD))
def test_a_value_out_of_range_is_a_one_line_error(script, field):
    module = load_script(script, "validated_" + script.split("/")[-1][:-3])
    args = module.Args()
    if not hasattr(args, field):
        pytest.skip(f"{script} has no --{field}")
    value, message = BAD[field]
    setattr(args, field, value)
    with pytest.raises(SystemExit) as exit_info:
        check_ranges(args)
    text = str(exit_info.value.code)
    assert text.startswith("error: ") and "\n" not in text and message in text, text


@pytest.mark.parametrize("name", ["../../escaped", "a/b", "..", ".", "", " x", "a\\b"])
@pytest.mark.parametrize("flag", ["--run-name", "--exp-name"])
def test_a_run_name_is_one_folder_name_inside_the_runs_dir(tmp_path, flag, name):
    from helpers import assert_one_line_error, run_script

    result = run_script(["cleanrl/ppo_atari.py", flag, name, "--runs-dir", str(tmp_path / "runs"), "--num-envs", "1"],
                        cwd=tmp_path, timeout=120)
    assert_one_line_error(result, "is not a folder name")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "escaped").exists()


@pytest.mark.parametrize("script", ["cleanrl/ppo.py", "cleanrl/ppo_atari_multigpu.py"])
@pytest.mark.parametrize("flag, name", [("--run-name", "../../escaped"), ("--exp-name", "a/b")])
def test_every_script_takes_a_run_name_only_as_one_folder_name(tmp_path, script, flag, name):
    from helpers import assert_one_line_error, run_script

    result = run_script([script, flag, name, "--runs-dir", str(tmp_path / "runs")], cwd=tmp_path, timeout=120)
    assert_one_line_error(result, f"{flag} {name!r} is not a folder name: a run is one folder inside --runs-dir")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "escaped").exists()


def test_resume_without_a_name_says_what_it_looked_for_and_where(tmp_path):
    from helpers import assert_one_line_error, run_script

    result = run_script(["cleanrl/ppo_atari.py", "--resume", "--runs-dir", str(tmp_path / "runs"), "--seed", "4"],
                        cwd=tmp_path, timeout=120)
    assert_one_line_error(result, "--resume found no run to continue: no folder BreakoutNoFrameskip-v4__ppo_atari__4")
    assert str(tmp_path / "runs") in result.stderr
