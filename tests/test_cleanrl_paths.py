"""CleanRL's launch commands, typed as CleanRL's docs give them: `python cleanrl_utils/submit_exp.py ...` (a file run
by path, from the repository's root and from elsewhere), `python -m cleanrl_utils.benchmark ...` and
`python -m cleanrl_utils.plot ...`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers import REPO_ROOT, assert_one_line_error, run_script

SEED_SUBMIT = [
    "cleanrl_utils/submit_exp.py",
    "--command",
    "python cleanrl/ppo_atari_multigpu.py --env-id BeamRiderNoFrameskip-v4",
    "--num-seeds",
    "3",
    "--num-nodes",
    "4",
    "--instance-type",
    "c5.12xlarge",
]


def no_aws(tmp_path) -> dict[str, str]:
    """An environment with no AWS credentials or region anywhere (and no instance metadata to ask)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    missing = str(tmp_path / "none")
    env.update(HOME=str(tmp_path), AWS_CONFIG_FILE=missing, AWS_SHARED_CREDENTIALS_FILE=missing)
    env.update(AWS_EC2_METADATA_DISABLED="true", PYTHONPATH=str(REPO_ROOT))
    return env


def test_submit_exp_runs_by_path_as_cleanrl_documents_it(tmp_path):
    """The seed's command, from the repository's root as typed: the dry run prints the 3 jobs' requests; the real one
    without AWS credentials is one error line; from another folder, by absolute path, it runs too."""
    env = no_aws(tmp_path)
    dry = subprocess.run(
        [sys.executable, *SEED_SUBMIT, "--dry-run"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert dry.returncode == 0, dry.stderr
    requests = json.loads(dry.stdout)
    assert [r["operation"] for r in requests] == ["RegisterJobDefinition"] + ["SubmitJob"] * 3
    assert requests[0]["params"]["nodeProperties"]["numNodes"] == 4
    real = subprocess.run([sys.executable, *SEED_SUBMIT], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert_one_line_error(real, "nothing was submitted: missing AWS credentials")
    elsewhere = subprocess.run(
        [sys.executable, str(REPO_ROOT / SEED_SUBMIT[0]), "--help"], cwd=tmp_path, env=env, capture_output=True
    )
    assert elsewhere.returncode == 0 and b"--num-nodes" in elsewhere.stdout


def test_benchmark_and_plot_run_as_modules(tmp_path):
    """`python -m cleanrl_utils.benchmark` runs a tiny grid for real; `python -m cleanrl_utils.plot --help` works."""
    for module in ("cleanrl_utils.benchmark", "cleanrl_utils.plot"):
        res = run_script(["-m", module, "--help"], cwd=tmp_path, timeout=300)
        assert res.returncode == 0 and "usage:" in res.stdout, res.stderr
    tiny = "--total-timesteps 256 --num-envs 2 --num-steps 32 --no-progress-bar"
    command = f"{sys.executable} {REPO_ROOT / 'cleanrl' / 'ppo.py'} {tiny}"
    argv = ["--env-ids", "CartPole-v1", "--num-seeds", "1", "--workers", "1", "--command", command]
    res = run_script(["-m", "cleanrl_utils.benchmark", *argv], cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "runs" / "CartPole-v1__ppo__1" / "checkpoint.pt").exists()


def test_the_launchers_start_without_loading_torch():
    """The tools that only start, sweep or plot runs do not load torch (a second and more of CPU per start, paid by
    every job of a sweep and every `--help`)."""
    tools = ["cleanrl_utils.benchmark", "cleanrl_utils.submit_exp", "cleanrl_utils.tuner", "cleanrl_utils.plot"]
    code = f"import sys; import {', '.join(tools)}; print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stdout[-2000:] + result.stderr[-2000:]
