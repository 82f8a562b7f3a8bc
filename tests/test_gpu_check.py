"""benchmark/gpu_check.sh and benchmark/gpu_wheels.sh: the whole check in its --cpu mode (every step on CPU with
tiny sizes, the report in the folder given), and what the tools say without a GPU or with bad input."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT

from cleanrl_utils import gpu_check
from cleanrl_utils.evals import ppo_eval

STEPS = 16
# the tools call `python`: this one
ENV = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


def run_tool(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, env=ENV)


def test_without_a_gpu_the_check_says_how_to_check_the_tool_instead(tmp_path):
    result = subprocess.run([sys.executable, "-m", "cleanrl_utils.gpu_check"], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=120, env=dict(os.environ, TMPDIR=str(tmp_path)))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip() == "error: torch sees no CUDA device here; `--cpu` checks this tool on CPU instead"
    assert list(tmp_path.iterdir()) == []  # its work folder is gone too


def test_help_runs_nothing(tmp_path):
    for script in ("benchmark/gpu_check.sh", "benchmark/gpu_wheels.sh"):
        result = run_tool(script, "--help")
        assert result.returncode == 0 and "gpu_check" in result.stdout, result.stderr
    assert not (REPO_ROOT / "wheels").exists()


def test_a_missing_wheel_folder_is_a_one_line_error(tmp_path):
    result = run_tool("benchmark/gpu_check.sh", "--wheels", str(tmp_path / "nowhere"), "--cpu")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: no wheel folder {tmp_path / 'nowhere'}: make it with benchmark/gpu_wheels.sh"
    ]


def test_the_reason_of_a_failed_step_is_its_error_line_not_a_box_frame():
    tyro_error = "╭─ Unrecognized options ─╮\n│ Unrecognized options: --cuda │\n"
    tyro_error += "│ For help: --help │\n╰────╯\n"
    assert gpu_check.last_line(tyro_error) == "Unrecognized options: --cuda"
    assert gpu_check.last_line("a\nb\n\n") == "b" and gpu_check.last_line("") == "no output"


@pytest.mark.slow
@pytest.mark.torchrun
def test_cpu_mode_runs_every_step_and_writes_its_report_where_asked(tmp_path):
    before = sorted((REPO_ROOT / "docs" / "benchmarks").glob("gpu_*"))
    result = run_tool("benchmark/gpu_check.sh", "--cpu", "--out", str(tmp_path), timeout=600)
    output = result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith(("PASS ", "FAIL "))]
    assert len(lines) == STEPS, output
    report = json.loads((tmp_path / "gpu_cpu.json").read_text())
    for line, step in zip(lines, report["steps"]):  # the same steps, in the order run, with the same verdicts
        assert line.startswith(f"{'PASS' if step['ok'] else 'FAIL'} {step['step']} ("), (line, step)
    # steps on tools that this checkout may not have yet: they must pass where the tool is there
    missing = set()
    if importlib.util.find_spec("cleanrl_utils.host_syncs") is None:
        missing.add("host syncs per rollout step and minibatch")
    if "cuda" not in {f.name for f in dataclasses.fields(ppo_eval.Args)}:
        missing.add("eval CLI on cpu")
    failed = {s["step"] for s in report["steps"] if not s["ok"]}
    assert failed == missing, output
    assert result.returncode == (1 if missing else 0)
    text = (tmp_path / "gpu_cpu.md").read_text()
    assert "`--cpu` mode" in text and "| steady SPS: sync, ale, envpool | PASS |" in text
    assert {row["config"] for row in report["figures"]["sps"]} >= {"sync", "ale", "envpool"}
    assert report["figures"]["torchrun_2"]["backend"] == "gloo"
    assert sorted((REPO_ROOT / "docs" / "benchmarks").glob("gpu_*")) == before  # no GPU report touched


@pytest.mark.slow
@pytest.mark.torchrun
def test_the_torchrun_stop_step_reads_the_stop_line_the_script_prints(tmp_path):
    # the step greps the multi-GPU script's output: it must fail only when the stop or the resume does
    check = gpu_check.Check(gpu_check.Args(cpu=True))
    os.rmdir(check.workdir)
    check.workdir = tmp_path
    summary = check.stop_resume_ranks(120)
    assert summary.startswith("2 ranks stopped at global step ") and "resumed and finished" in summary, summary
