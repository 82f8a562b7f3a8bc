"""Every numeric flag of the training scripts is range-checked before anything is built (cleanrl_utils/validation.py):
one `error:` line naming the flag, the value and what it may be."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
from helpers import load_script

from cleanrl_utils.cpu import thread_plan
from cleanrl_utils.validation import RANGES, check_env_id, check_ranges, computed_fields, first_sentence

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
    computed = computed_fields(module.Args)
    numeric = [
        f.name
        for f in dataclasses.fields(args)
        if f.name not in computed
        and isinstance(getattr(args, f.name), (int, float))
        and not isinstance(getattr(args, f.name), bool)
        or f.name in ("target_kl", "num_envs", "local_num_envs")
    ]
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
def test_a_run_name_is_one_folder_name_inside_the_runs_dir(tmp_path, monkeypatch, flag, name):
    """Each name is refused by the scripts' start (`start_run`, here in this process) before anything is made; the
    next test runs the scripts themselves on two of these names."""
    from cleanrl_utils.resume import start_run

    monkeypatch.chdir(tmp_path)
    module = load_script("cleanrl/ppo_atari.py", "validated_ppo_atari")
    with pytest.raises(SystemExit) as exit_info:
        start_run(module.Args, module.__file__, [flag, name, "--runs-dir", str(tmp_path / "runs"), "--num-envs", "1"])
    text = str(exit_info.value.code)
    assert text.startswith("error: ") and "\n" not in text and "is not a folder name" in text, text
    assert not (tmp_path / "runs").exists() and not (tmp_path / "escaped").exists()


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("flag, name", [("--run-name", "../../escaped"), ("--exp-name", "a/b")])
def test_every_script_takes_a_run_name_only_as_one_folder_name(tmp_path, script, flag, name):
    from helpers import assert_one_line_error, run_script

    result = run_script([script, flag, name, "--runs-dir", str(tmp_path / "runs")], cwd=tmp_path, timeout=120)
    assert_one_line_error(result, f"{flag} {name!r} is not a folder name: a run is one folder inside --runs-dir")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "escaped").exists()


def test_resume_without_a_name_says_what_it_looked_for_and_where(tmp_path):
    from helpers import assert_one_line_error, run_script

    result = run_script(
        ["cleanrl/ppo_atari.py", "--resume", "--runs-dir", str(tmp_path / "runs"), "--seed", "4"],
        cwd=tmp_path,
        timeout=120,
    )
    assert_one_line_error(result, "--resume found no run to continue: no folder BreakoutNoFrameskip-v4__ppo_atari__4")
    assert str(tmp_path / "runs") in result.stderr


def test_thread_counts_are_capped_at_the_cores_this_process_may_use_with_a_note(capsys, monkeypatch):
    """More threads than cores only wait for each other (200 torch threads on 2 cores took minutes per iteration):
    a count above the cores is capped there, and one note says what was asked, what is used and why."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    assert thread_plan(0, 0, 8, cores=2)[1:3] == (
        2,
        2,
    )  # 0: one env thread per env, at most the cores; torch: the cores
    assert thread_plan(0, 0, 1, cores=4)[1:3] == (1, 4)
    assert thread_plan(1, 2, 8, cores=2)[1:3] == (1, 2)  # what fits is kept as given
    assert capsys.readouterr().out == ""
    assert thread_plan(200, 200, 8, cores=2)[1:3] == (2, 2)
    why = "(more threads than cores only wait for each other)"
    assert capsys.readouterr().out.splitlines() == [
        f"note: --env-threads 200 is more than the 2 cores this process may use: using 2 {why}",
        f"note: --torch-threads 200 is more than the 2 cores this process may use: using 2 {why}",
    ]
    assert thread_plan(0, 3, 8, cores=1)[1:3] == (1, 1)
    one_core = f"note: --torch-threads 3 is more than the 1 core this process may use: using 1 {why}"
    assert capsys.readouterr().out.splitlines() == [one_core]
    assert thread_plan(0, 3, 8, cores=1, notes=False)[1:3] == (1, 1)  # a rank other than 0: rank 0 says it
    assert capsys.readouterr().out == ""


def test_check_ranges_leaves_thread_counts_below_any_machines_cores_to_the_machine_that_runs_the_job():
    """submit_exp.py checks a job for another machine with check_ranges: 200 threads may fit there."""
    module = load_script("cleanrl/ppo_atari.py", "validated_ppo_atari")
    args = module.Args()
    args.torch_threads = args.env_threads = 200
    check_ranges(args)


def test_an_envpool_game_name_is_told_gymnasiums_ids():
    """`Breakout-v5` is how EnvPool names the game; gymnasium has no such id (its close matches were v4 and v0)."""
    with pytest.raises(SystemExit) as exc:
        check_env_id("Breakout-v5")
    assert str(exc.value.code) == (
        "error: 'Breakout-v5' is EnvPool's name of the game; the scripts take gymnasium's ids, with --vector-env "
        "envpool too: BreakoutNoFrameskip-v4 (CleanRL's benchmark) or ALE/Breakout-v5 (sticky actions)"
    )


def test_an_unreadable_checkpoint_quotes_the_first_sentence_of_the_reason_whole():
    """read_checkpoint quotes `first_sentence` of torch's error (end to end: tests/test_ppo_atari.py)."""
    zip_error = RuntimeError(
        "PytorchStreamReader failed reading zip archive: failed finding central directory. This "
        "is an internal miniz error. If you are seeing this error, there is a high likelihood"
    )
    assert first_sentence(zip_error) == (
        "PytorchStreamReader failed reading zip archive: failed finding central directory"
    )
    advice = "Weights only load failed. In PyTorch 2.6 ... with `weights_only` set to `False`.\nPlease file an issue"
    assert first_sentence(pickle.UnpicklingError(advice)) == "Weights only load failed"
    assert first_sentence(pickle.UnpicklingError("invalid load key, 'g'.")) == "invalid load key, 'g'"
    assert first_sentence(RuntimeError("torch.load of v1.2 failed\nmore")) == "torch.load of v1.2 failed"
    assert first_sentence(EOFError()) == "EOFError"  # no message: its type
    assert first_sentence(ValueError("x" * 301 + ". Then")) == "ValueError"  # too long for one line: its type
