"""No poisoned checkpoint: a minibatch of one sample (whose std is NaN) is refused before any work, and a run whose
losses turn non-finite stops at that iteration with one line, keeping its last good checkpoint, which resumes."""

from __future__ import annotations

import pytest
import torch
from helpers import REPO_ROOT, assert_one_line_error, run_script

FAST = {"OMP_NUM_THREADS": "1"}
SCRIPTS = {
    "ppo_atari": ["cleanrl/ppo_atari.py", "--torch-threads", "1"],
    "ppo_atari_multigpu": ["cleanrl/ppo_atari_multigpu.py", "--torch-threads", "1"],
    "ppo": ["cleanrl/ppo.py"],
}
# the advantages of the minibatches turn NaN from the third iteration on, as a diverged run's do
NAN_LINE = "mb_advantages = b_advantages[mb_inds]\n"
NAN_FROM_3 = 'mb_advantages = b_advantages[mb_inds] * (float("nan") if global_step > 2 * args.batch_size else 1.0)\n'


@pytest.mark.parametrize("name", list(SCRIPTS))
@pytest.mark.parametrize(
    "sizes", [["--num-steps", "1", "--num-envs", "4"], ["--num-steps", "32", "--num-minibatches", "64"]]
)
def test_a_minibatch_of_one_sample_is_refused_before_any_work(tmp_path, name, sizes):
    envs = ["--num-envs", "2"] if "--num-envs" not in sizes else []
    if name == "ppo_atari_multigpu":
        sizes = [s.replace("--num-envs", "--local-num-envs") for s in sizes]
    result = run_script([*SCRIPTS[name], *envs, *sizes, "--runs-dir", str(tmp_path / "runs")], tmp_path, 120, FAST)
    assert_one_line_error(result, "sample (num_envs*num_steps/num_minibatches")
    assert "has no std to normalise its advantages" in result.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SCRIPTS))
def test_a_diverged_run_stops_at_once_and_keeps_its_last_good_checkpoint(tmp_path, name):
    script, *flags = SCRIPTS[name]
    source = (REPO_ROOT / script).read_text()
    assert source.count(NAN_LINE) == 1, "the line this test breaks has changed: update the test"
    copy = tmp_path / f"{name}_nan.py"
    copy.write_text(source.replace(NAN_LINE, NAN_FROM_3))
    envs = ["--local-num-envs" if "multigpu" in name else "--num-envs", "2"]
    run = [*flags, *envs, "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1", "--no-progress-bar"]
    run += ["--checkpoint-interval", "1", "--run-name", "nan", "--runs-dir", str(tmp_path / "runs"), "--save-model"]
    result = run_script([str(copy), *run, "--total-timesteps", "640"], tmp_path, 300, FAST)
    assert_one_line_error(result, "the run diverged at iteration 3: value_loss, policy_loss")
    assert "its last checkpoint (global step 128) is kept" in result.stderr
    assert "a smaller --learning-rate or --max-grad-norm" in result.stderr
    run_dir = tmp_path / "runs" / "nan"
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert ckpt["iteration"] == 2 and all(t.isfinite().all() for t in ckpt["state"]["agent"].values())
    assert not list(run_dir.glob("*.cleanrl_model"))  # no model from the bad state
    # the kept checkpoint resumes (with the script as it is: without the injected NaN it trains on)
    resumed = run_script([script, *run, "--total-timesteps", "256", "--resume"], tmp_path, 300, FAST)
    assert resumed.returncode == 0 and "resuming from iteration 2" in resumed.stdout, resumed.stderr[-2000:]
