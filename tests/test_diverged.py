"""No poisoned checkpoint: a minibatch of one sample (whose std is NaN) is refused before any work, and a run whose
losses turn non-finite stops at that iteration with one line, keeping its last good checkpoint, which resumes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch
from helpers import FAST, REPO_ROOT, assert_one_line_error, run_each

SCRIPTS = {
    "ppo_atari": ["cleanrl/ppo_atari.py", "--torch-threads", "1"],
    "ppo_atari_multigpu": ["cleanrl/ppo_atari_multigpu.py", "--torch-threads", "1"],
    "ppo": ["cleanrl/ppo.py"],
}
# the advantages of the minibatches turn NaN from the third iteration on, as a diverged run's do
NAN_LINE = "mb_advantages = b_advantages[mb_inds]\n"
NAN_FROM_3 = 'mb_advantages = b_advantages[mb_inds] * (float("nan") if global_step > 2 * args.batch_size else 1.0)\n'


def test_a_minibatch_of_one_sample_is_refused_before_any_work(tmp_path):
    """Each script with a rollout of 1 step of 4 envs and with 64 minibatches of 2 envs x 32 steps (one forked child
    each, see `run_each`): one line naming the minibatch's size, and no run folder."""
    cases = []
    for name in SCRIPTS:
        for sizes in (["--num-steps", "1", "--num-envs", "4"], ["--num-steps", "32", "--num-minibatches", "64"]):
            envs = ["--num-envs", "2"] if "--num-envs" not in sizes else []
            if name == "ppo_atari_multigpu":
                sizes = [s.replace("--num-envs", "--local-num-envs") for s in sizes]
            cwd = tmp_path / str(len(cases))
            cwd.mkdir()
            cases.append(([*SCRIPTS[name], *envs, *sizes, "--runs-dir", str(cwd / "runs")], cwd))
    for (args, cwd), result in zip(cases, run_each(cases, env=FAST, timeout=300)):
        assert_one_line_error(result, "sample (num_envs*num_steps/num_minibatches")
        assert "has no std to normalise its advantages" in result.stderr, args
        assert not (cwd / "runs").exists(), args


@pytest.fixture(scope="module")
def diverged_runs(tmp_path_factory) -> dict[str, tuple[Path, list[subprocess.CompletedProcess[str]]]]:
    """Per script: a copy whose advantages turn NaN from the third iteration on, run with a checkpoint every
    iteration and --save-model; a copy of what it left in its run folder; a resume of its kept checkpoint with the
    script as it is. One forked child each (see `run_each`). Per script: the copied folder and the three results."""
    root = tmp_path_factory.mktemp("diverged")
    cases = []
    for name, (script, *flags) in SCRIPTS.items():
        cwd = root / name
        cwd.mkdir()
        source = (REPO_ROOT / script).read_text()
        assert source.count(NAN_LINE) == 1, "the line this test breaks has changed: update the test"
        copy = cwd / f"{name}_nan.py"
        copy.write_text(source.replace(NAN_LINE, NAN_FROM_3))
        envs = ["--local-num-envs" if "multigpu" in name else "--num-envs", "2"]
        run = [*flags, *envs, *"--num-steps 32 --num-minibatches 2 --update-epochs 1 --no-progress-bar".split()]
        run += ["--checkpoint-interval", "1", "--run-name", "nan", "--runs-dir", str(cwd / "runs"), "--save-model"]
        cases += [
            ([str(copy), *run, "--total-timesteps", "640"], cwd),
            (
                [
                    "-c",
                    "import shutil, sys; shutil.copytree(*sys.argv[1:])",
                    str(cwd / "runs" / "nan"),
                    str(cwd / "left"),
                ],
                cwd,
            ),
            ([script, *run, "--total-timesteps", "256", "--resume"], cwd),
        ]
    results = run_each(cases, env=FAST, timeout=600, train=True)
    return {name: (root / name / "left", results[3 * i : 3 * i + 3]) for i, name in enumerate(SCRIPTS)}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SCRIPTS))
def test_a_diverged_run_stops_at_once_and_keeps_its_last_good_checkpoint(diverged_runs, name):
    left, (result, copied, resumed) = diverged_runs[name]
    assert copied.returncode == 0, copied.stderr
    assert_one_line_error(result, "the run diverged at iteration 3: value_loss, policy_loss")
    assert "its last checkpoint (global step 128) is kept" in result.stderr
    assert "a smaller --learning-rate or --max-grad-norm" in result.stderr
    ckpt = torch.load(left / "checkpoint.pt", weights_only=True)
    assert ckpt["iteration"] == 2 and all(t.isfinite().all() for t in ckpt["state"]["agent"].values())
    assert not list(left.glob("*.cleanrl_model"))  # no model from the bad state
    # the kept checkpoint resumes (with the script as it is: without the injected NaN it trains on)
    assert resumed.returncode == 0 and "resuming from iteration 2" in resumed.stdout, resumed.stderr[-2000:]
