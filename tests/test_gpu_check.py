"""benchmark/gpu_check.sh and benchmark/gpu_wheels.sh: what travels to a GPU machine (the pinned wheels, their
size, what they cover), the time plan (the steps' limits within the budget, the budget within the 330 s of the
whole check), the whole check in its --cpu mode (every step on CPU with tiny sizes, the report in the folder
given), a stopped check's report, and what the tools say without a GPU or with bad input. Nothing here downloads."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import psutil
import pytest
from helpers import REPO_ROOT
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from benchmark.lab import gpu_check
from cleanrl_utils.evals import ppo_eval

STEPS = 17
CPU_STEPS = 16  # --cpu has no second device to resume a checkpoint on
WHOLE_CHECK_S = 330  # on the GPU machine: install, steps and report
# the tools call `python3`: this one
ENV = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
GPU_PYTHON = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "os_name": "posix",
    "extra": "",
}


def run_tool(*args: str, timeout: float = 60, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, env=env or ENV
    )


def pinned_wheels() -> tuple[dict[str, tuple[str, int]], set[str]]:
    """benchmark/gpu_wheels.txt: {name: (version, bytes)} and the names it takes as preinstalled."""
    wheels, preinstalled = {}, set()
    for line in (REPO_ROOT / "benchmark" / "gpu_wheels.txt").read_text().splitlines():
        if line.startswith("# preinstalled:"):
            preinstalled = {canonicalize_name(n) for n in line.split(":", 1)[1].split()}
        elif line.strip() and not line.startswith("#"):
            name, version, size = line.split()
            wheels[canonicalize_name(name)] = (version, int(size))
    return wheels, preinstalled


def test_the_pinned_wheels_fit_and_cover_what_the_gpu_machine_lacks():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    wheels, preinstalled = pinned_wheels()
    assert sum(size for _, size in wheels.values()) <= 16 * 2**20
    assert {"torch", "numpy"} <= preinstalled and not preinstalled & set(wheels)
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for requirement in map(Requirement, project):
        name = canonicalize_name(requirement.name)
        assert name in preinstalled or name in wheels, f"{name}: neither pinned nor preinstalled"
        if name in wheels:
            assert requirement.specifier.contains(wheels[name][0]), (requirement, wheels[name])
    # and the pinned wheels' own dependencies, from their metadata where this environment has the same version
    for name, (version, _) in wheels.items():
        try:
            if importlib.metadata.version(name) != version:
                continue
        except importlib.metadata.PackageNotFoundError:
            continue
        for requirement in map(Requirement, importlib.metadata.requires(name) or []):
            if requirement.marker is None or requirement.marker.evaluate(GPU_PYTHON):
                dep = canonicalize_name(requirement.name)
                assert dep in preinstalled or dep in wheels, f"{name} needs {dep}: neither pinned nor preinstalled"
                if dep in wheels:
                    assert requirement.specifier.contains(wheels[dep][0]), (name, requirement, wheels[dep])
    assert Marker('extra == "test"').evaluate(GPU_PYTHON) is False  # extras are left out


def test_the_wheels_dry_run_prints_the_list_and_downloads_nothing(tmp_path):
    wheels, _ = pinned_wheels()
    result = run_tool("benchmark/gpu_wheels.sh", "--dry-run", str(tmp_path / "wheels"))
    assert result.returncode == 0, result.stderr
    total = sum(size for _, size in wheels.values())
    assert f"{len(wheels)} wheels, {total} bytes" in result.stdout
    command = result.stdout.splitlines()[-1]
    assert "--python-version 3.12" in command and "--no-deps" in command and "--only-binary=:all:" in command
    assert all(f"=={version}" in command for version, _ in wheels.values())
    assert not (tmp_path / "wheels").exists()


def test_the_steps_limits_fit_the_budget_and_the_budget_the_whole_check():
    for cpu in (False, True):
        check = gpu_check.Check(gpu_check.Args(cpu=cpu))
        os.rmdir(check.workdir)
        keys = [key for _, key, _ in check.plan()]
        expected = set(gpu_check.LIMITS) - ({"resume_cpu"} if cpu else set())
        assert len(keys) == (CPU_STEPS if cpu else STEPS) == len(expected) and set(keys) == expected
    assert sum(gpu_check.LIMITS.values()) <= gpu_check.BUDGET_S  # on a GPU; --cpu has no budget of its own
    # the correctness steps first: they must not be the ones a slow machine loses
    assert list(gpu_check.LIMITS).index("stop_ranks") < list(gpu_check.LIMITS).index("network")
    script = (REPO_ROOT / "benchmark" / "gpu_check.sh").read_text()
    budget = int(re.search(r"\bbudget=(\d+)", script)[1])
    reserve = int(re.search(r"total=\$\(\(budget \+ (\d+)\)\)", script)[1])
    assert budget == gpu_check.BUDGET_S and budget + reserve <= WHOLE_CHECK_S
    # a step that overruns is stopped inside its limit, its runs' SIGKILL grace included
    assert all(gpu_check.STOP_GRACE_S < v for k, v in gpu_check.LIMITS.items() if k != "gpu_use")


def test_the_cpu_mode_judges_no_step_by_its_time():
    """A check of the tool on a busy machine is slow, not wrong: with --cpu every step gets the hang limit alone, and
    the whole check no budget (the versions step, torch's import, was stopped at 13 s on a loaded 2-core machine)."""
    check = gpu_check.Check(gpu_check.Args(cpu=True))
    os.rmdir(check.workdir)
    assert check.deadline == float("inf")
    limits = []
    check.step = lambda name, limit, fn: limits.append(limit)
    check.all_steps()
    assert limits == [gpu_check.CPU_HANG_S] * CPU_STEPS
    script = (REPO_ROOT / "benchmark" / "gpu_check.sh").read_text()
    assert 'exec "$py" -m benchmark.lab.gpu_check ${given_budget:+--budget "$budget"} "${args[@]}"' in script


def test_without_a_gpu_the_check_says_how_to_check_the_tool_instead(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "benchmark.lab.gpu_check", "--out", str(tmp_path / "report")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, TMPDIR=str(tmp_path)),
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        "error: torch sees no CUDA device here (no nvidia-smi); `--cpu` checks this tool on CPU instead"
    )
    assert list(tmp_path.iterdir()) == []  # no work folder, no report


def test_on_a_gpu_the_report_folder_must_be_named():
    result = subprocess.run(
        [sys.executable, "-m", "benchmark.lab.gpu_check"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1
    assert result.stderr.strip() == "error: --out FOLDER is required: the folder the report goes to"


def test_help_runs_nothing_from_any_folder(tmp_path):
    helps = {}
    for script in ("benchmark/gpu_check.sh", "benchmark/gpu_wheels.sh"):
        result = subprocess.run(
            ["bash", str(REPO_ROOT / script), "--help"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            env=ENV,
        )
        assert result.returncode == 0 and "gpu_check" in result.stdout, result.stderr
        helps[script] = result.stdout
    assert "--budget {None}|FLOAT" in helps["benchmark/gpu_check.sh"].partition("options")[2]  # the module's flags too
    assert not (REPO_ROOT / "wheels").exists() and list(tmp_path.iterdir()) == []


def test_a_missing_wheel_folder_is_a_one_line_error(tmp_path):
    result = run_tool("benchmark/gpu_check.sh", "--wheels", str(tmp_path / "nowhere"), "--cpu")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: no wheel folder {tmp_path / 'nowhere'}: make it with benchmark/gpu_wheels.sh"
    ]


def fake_wheel(folder: Path, name: str, version: str) -> None:
    """A wheel of `name` that holds only its metadata (the real package stays importable from this environment)."""
    dist = f"{name.replace('-', '_')}-{version}"
    with zipfile.ZipFile(folder / f"{dist}-py3-none-any.whl", "w") as whl:
        whl.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        whl.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"{dist}.dist-info/RECORD", "")


def test_the_wheels_are_installed_without_a_registry_and_put_on_the_path(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name, (version, _) in pinned_wheels()[0].items():
        fake_wheel(wheels, name, version)
    fake_wheel(wheels, "numpy", "0.1")  # a wheel of the folder that is not on the list is not installed
    env = {k: v for k, v in ENV.items() if not k.startswith("PIP_")} | {"TMPDIR": str(tmp_path)}
    # a budget too small for any step: the install, the start and the (empty) report only
    result = run_tool(
        "benchmark/gpu_check.sh",
        "--wheels",
        str(wheels),
        "--cpu",
        "--budget",
        "1",
        "--out",
        str(tmp_path / "report"),
        env=env,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith(("PASS ", "FAIL "))]
    assert result.returncode == 1 and len(lines) == CPU_STEPS and all(" not run: " in line for line in lines), (
        result.stdout + result.stderr
    )
    site = tmp_path / "gpu_check_site"
    assert sorted(p.name for p in site.glob("*.dist-info")) == sorted(
        f"{canonicalize_name(n).replace('-', '_')}-{v}.dist-info" for n, (v, _) in pinned_wheels()[0].items()
    )
    assert (tmp_path / "report" / "gpu_cpu.md").exists()


def test_the_reason_of_a_failed_step_is_its_error_line_not_a_box_frame():
    tyro_error = "╭─ Unrecognized options ─╮\n│ Unrecognized options: --cuda │\n"
    tyro_error += "│ For help: --help │\n╰────╯\n"
    assert gpu_check.last_line(tyro_error) == "Unrecognized options: --cuda"
    assert gpu_check.last_line("a\nb\n\n") == "b" and gpu_check.last_line("") == "no output"
    # a run stopped at its step's limit says so first
    stopped = 'File "x/errors/__init__.py", line 367\nstep 3\n\n(stopped after 9 s)'
    assert gpu_check.last_line(stopped) == 'stopped after 9 s, its limit; before: File "x/errors/__init__.py", line 367'


def test_without_envpool_its_run_is_skipped_with_a_note_not_failed(monkeypatch):
    check = gpu_check.Check(gpu_check.Args(cpu=True))
    os.rmdir(check.workdir)
    ran = []

    def sps_run(name, end, parts, *extra, num_envs=None):
        ran.append((name, extra))
        return {"config": name, "steady_sps": {"sync": 100.0, "ale": 300.0}.get(name, 50.0)}

    monkeypatch.setattr(gpu_check, "envpool_installed", lambda: False)
    monkeypatch.setattr(check, "sps_run", sps_run)
    summary = check.backends(time.monotonic() + 20)
    assert [name for name, _ in ran] == ["sync", "ale"] and summary.endswith("envpool not installed: skipped")
    assert check.figures["fastest_backend"] == "ale"
    check.many_envs(time.monotonic() + 20)
    assert [name for name, _ in ran[2:]] == ["ale_8envs"]
    assert all("envpool" not in extra for _, extra in ran)


def test_bf16_step_times_the_fastest_eager_run_in_turn_with_float32(monkeypatch, tmp_path):
    check = gpu_check.Check(gpu_check.Args(cpu=True))
    os.rmdir(check.workdir)
    rate = {"ale_8envs_float32_before": 400.0, "ale_8envs_bf16": 480.0, "ale_8envs_float32_after": 200.0}
    ran = []

    def sps_run(name, end, parts, *extra, num_envs=None):
        ran.append((name, parts, extra, num_envs))
        row = {
            "config": name,
            "sps": 1.0,
            "steady_sps": rate[name],
            "gpu_percent": None,
            "cpu_percent": None,
            "flags": list(extra),
            "num_envs": num_envs,
        }
        check.figures["sps"].append(row)
        return row

    fast = ["--vector-env", "ale"]
    check.figures["sps"] = [
        {"config": "sync", "steady_sps": 100.0, "flags": ["--vector-env", "sync"], "num_envs": 2},
        {"config": "ale_8envs", "steady_sps": 300.0, "flags": fast, "num_envs": 8},
        {"config": "ale_compile", "steady_sps": 900.0, "flags": [*fast, "--compile"], "num_envs": 2},
    ]
    monkeypatch.setattr(check, "sps_run", sps_run)
    summary = check.bf16(time.monotonic() + 20)
    # float32, --bf16, float32 of the fastest run without --compile, and nothing else changed
    assert ran == [
        ("ale_8envs_float32_before", 3, tuple(fast), 8),
        ("ale_8envs_bf16", 2, (*fast, "--bf16"), 8),
        ("ale_8envs_float32_after", 1, tuple(fast), 8),
    ]
    assert check.figures["bf16"]["ratio"] == pytest.approx(1.6)  # to the float32 runs' mean: a drift cancels
    assert summary == (
        "ale_8envs: float32 400, --bf16 480, float32 200 steady SPS: --bf16 1.60x float32; "
        "ale_compile was faster, eager runs are timed"
    )
    for row in check.figures["sps"]:
        row.update(sps=row["steady_sps"], gpu_percent=None, cpu_percent=None)
    text = check.write(tmp_path).read_text()
    assert "| ale_8envs_bf16 | 480 | 480 | - | - |" in text
    assert (
        "bf16 against float32 on `ale_8envs` (8 envs), the rows `ale_8envs_float32_before`, `ale_8envs_bf16`, "
        "`ale_8envs_float32_after` run in that order: --bf16 gave 1.60x the steady SPS of the float32 runs' "
        "mean."
    ) in text


@pytest.mark.slow
def test_a_stopped_check_stops_its_runs_and_writes_what_it_has(tmp_path):
    proc = subprocess.Popen(
        ["bash", "benchmark/gpu_check.sh", "--cpu", "--out", str(tmp_path)],
        cwd=REPO_ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    first = proc.stdout.readline()  # the versions step's line: the training step is under way
    assert first.startswith("PASS versions"), first
    time.sleep(1)
    children = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    assert children, "no run under way"
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=300)[0]  # (a hang's guard: a stop takes seconds)
    assert proc.returncode == 143, out
    report = json.loads((tmp_path / "gpu_cpu.json").read_text())
    assert report["stopped_by"] == "SIGTERM" and len(report["steps"]) == 2
    assert report["steps"][1]["summary"].startswith("stopped by SIGTERM")
    stopped = f"**Stopped by SIGTERM: {CPU_STEPS - 2} of the {CPU_STEPS} steps did not run.**"
    assert stopped in (tmp_path / "gpu_cpu.md").read_text()
    assert not [pid for pid in children if psutil.pid_exists(pid)], "runs left behind"


@pytest.mark.slow
@pytest.mark.torchrun
@pytest.mark.timeout(3600)  # no budget with --cpu: a loaded machine may take long, only a hang fails
def test_cpu_mode_runs_every_step_and_writes_its_report_where_asked(tmp_path):
    before = sorted((REPO_ROOT / "docs" / "benchmarks").glob("gpu_*"))
    result = run_tool("benchmark/gpu_check.sh", "--cpu", "--out", str(tmp_path), timeout=3000)
    output = result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith(("PASS ", "FAIL "))]
    assert len(lines) == CPU_STEPS, output
    report = json.loads((tmp_path / "gpu_cpu.json").read_text())
    for line, step in zip(lines, report["steps"]):  # the same steps, in the order run, with the same verdicts
        assert line.startswith(f"{'PASS' if step['ok'] else 'FAIL'} {step['step']} ("), (line, step)
    # steps on tools that this checkout may not have yet: they must pass where the tool is there
    missing = set()
    if importlib.util.find_spec("benchmark.lab.host_syncs") is None:
        missing.add("host syncs per rollout step and minibatch")
    if "cuda" not in {f.name for f in dataclasses.fields(ppo_eval.Args)}:
        missing.add("eval CLI on cpu")
    failed = {s["step"] for s in report["steps"] if not s["ok"]}
    assert failed == missing, output
    assert result.returncode == (1 if missing else 0)
    assert all(s["seconds"] <= s["limit_s"] + 1 for s in report["steps"]), report["steps"]
    # the torchrun stop step greps the multi-GPU script's output: it passes on what the stop and the resume printed
    (stop,) = [s["summary"] for s in report["steps"] if s["step"] == "torchrun: SIGTERM stop and resume of 2 ranks"]
    assert stop.startswith("2 ranks stopped at global step ") and "resumed and finished" in stop, stop
    text = (tmp_path / "gpu_cpu.md").read_text()
    assert "`--cpu` mode" in text and "| steady SPS: sync, ale, envpool | PASS |" in text
    backends = {"sync", "ale"} | ({"envpool"} if gpu_check.envpool_installed() else set())
    assert {row["config"] for row in report["figures"]["sps"]} >= backends
    assert report["figures"]["torchrun_2"]["backend"] == "gloo"
    # --bf16 against float32 on the fastest eager run, the path a GPU takes
    bf16 = report["figures"]["bf16"]
    assert bf16["config"] in {row["config"] for row in report["figures"]["sps"]} and bf16["ratio"] > 0
    timed = [row["config"] for row in report["figures"]["sps"]][-3:]
    assert timed == [f"{bf16['config']}_{arm}" for arm, _ in gpu_check.BF16_RUNS]
    assert "| steady SPS: --bf16 vs float32 on the fastest eager run | PASS |" in text
    assert f"| {bf16['config']}_bf16 |" in text and "bf16 against float32 on" in text
    assert sorted((REPO_ROOT / "docs" / "benchmarks").glob("gpu_*")) == before  # no GPU report touched


def test_where_torch_sees_no_gpu_the_check_stops_after_the_versions_and_says_why(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'a driver without a device'\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = dict(ENV, PATH=f"{bin_dir}{os.pathsep}{ENV['PATH']}", CUDA_VISIBLE_DEVICES="")
    result = run_tool("benchmark/gpu_check.sh", "--out", str(tmp_path / "report"), env=env, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith(("PASS ", "FAIL "))]
    assert len(lines) == 1 and lines[0].startswith("FAIL versions") and "torch sees no CUDA device" in lines[0]
    text = (tmp_path / "report" / "gpu_unknown.md").read_text()
    assert f"**{STEPS - 1} of the {STEPS} steps did not run: they need a CUDA device.**" in text
    assert "a driver without a device" in text
