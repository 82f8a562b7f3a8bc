"""cleanrl_utils/cpu.py, the CPU set-up of the scripts and the lab: a thread setting of the user, the runner or the
scheduler wins over the script's own sizing, and the start line says where the number came from; two runs side by
side under the runner's environment each use their share."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
from helpers import run_script, start_script

from cleanrl_utils.cpu import thread_plan
from cleanrl_utils.benchmark import run_env


@pytest.fixture
def bare(monkeypatch):
    for name in ("OMP_NUM_THREADS", "SLURM_CPUS_PER_TASK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_flags_then_omp_then_slurm_then_the_cores(bare):
    assert thread_plan(0, 0, 8, cores=16) == (16, 8, 16, "its cores")
    assert thread_plan(0, 0, 8, local_ranks=2, cores=16) == (8, 8, 8, "its cores")  # a rank's share
    assert thread_plan(0, 0, 8, local_ranks=4, cores=2)[:3] == (1, 1, 1)  # at least one each
    bare.setenv("SLURM_CPUS_PER_TASK", "4")
    assert thread_plan(0, 0, 8, local_ranks=2, cores=16) == (8, 2, 2, "SLURM_CPUS_PER_TASK")  # the task's, shared
    bare.setenv("OMP_NUM_THREADS", "3")
    assert thread_plan(0, 0, 8, cores=16) == (16, 3, 3, "OMP_NUM_THREADS")
    assert thread_plan(5, 2, 8, cores=16) == (16, 5, 2, "OMP_NUM_THREADS")  # flags win (setup_cpu names them)
    assert thread_plan(0, 0, 2, cores=16)[1] == 2  # never more env threads than envs


def test_the_1_torchrun_sets_for_several_ranks_is_not_a_choice(bare):
    bare.setenv("OMP_NUM_THREADS", "1")
    bare.setenv("TORCHELASTIC_RUN_ID", "job")
    assert thread_plan(0, 0, 8, local_ranks=2, cores=16) == (8, 8, 8, "its cores")
    assert thread_plan(0, 0, 8, local_ranks=1, cores=16) == (16, 1, 1, "OMP_NUM_THREADS")


@pytest.mark.parametrize("value", ["0", "abc", "1.5", "-2"])
def test_an_omp_num_threads_that_is_no_count_is_named_in_a_note(bare, capsys, value):
    """libgomp ignores it after a warning of its own; the note says which variable and value, and the run sizes its
    threads as if it were unset."""
    bare.setenv("OMP_NUM_THREADS", value)
    assert thread_plan(0, 0, 8, cores=4) == (4, 4, 4, "its cores")
    note = f"note: OMP_NUM_THREADS={value!r} is not a positive whole number: ignored (unset it, or give a count)"
    assert capsys.readouterr().out.splitlines() == [note]


def test_omp_num_threads_above_the_cores_is_capped_with_the_flags_note(bare, capsys):
    bare.setenv("OMP_NUM_THREADS", "64")
    assert thread_plan(0, 0, 8, cores=2) == (2, 2, 2, "OMP_NUM_THREADS")
    why = "(more threads than cores only wait for each other)"
    assert capsys.readouterr().out.splitlines() == [
        f"note: OMP_NUM_THREADS 64 is more than the 2 cores this process may use: using 2 {why}"
    ]
    assert thread_plan(1, 1, 8, cores=2)[1:3] == (1, 1) and capsys.readouterr().out == ""  # the flags decide


@pytest.mark.slow
def test_a_run_under_omp_num_threads_above_its_cores_starts_as_many_torch_threads_as_cores(tmp_path, bare):
    """64 torch threads on 2 cores ran at a thirtieth of the speed: the start line shows the capped count."""
    cores = len(os.sched_getaffinity(0))
    run = ["cleanrl/ppo_atari.py", "--num-envs", "2", "--num-steps", "32", "--total-timesteps", "64"]
    res = run_script([*run, "--no-progress-bar", "--runs-dir", str(tmp_path)], tmp_path, 300, {"OMP_NUM_THREADS": "64"})
    assert res.returncode == 0, res.stderr[-3000:]
    assert "note: OMP_NUM_THREADS 64 is more than the" in res.stdout
    assert f" {cores} torch threads (OMP_NUM_THREADS)" in res.stdout, res.stdout


@pytest.mark.slow
def test_the_start_line_of_a_one_core_run_says_1_core(tmp_path, bare):
    run = [
        "cleanrl/ppo_atari.py",
        "--num-envs",
        "2",
        "--num-steps",
        "32",
        "--total-timesteps",
        "64",
        "--no-progress-bar",
    ]
    res = run_script(["-c", RUN_ON_CORE_0, *run, "--runs-dir", str(tmp_path)], tmp_path, 300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert ", 1 core: 1 torch threads (its cores)" in res.stdout, res.stdout


# `python -c RUN_ON_CORE_0 SCRIPT ARGS...`: the script on the first core this process may use, alone
RUN_ON_CORE_0 = (
    "import os, runpy, sys; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); sys.argv = sys.argv[1:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def threads_of(pid: int) -> int:
    return int(re.search(r"Threads:\s+(\d+)", open(f"/proc/{pid}/status").read()).group(1))


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
def test_two_runs_side_by_side_each_use_their_share(tmp_path, bare):
    env = {key: value for key, value in run_env(workers=2).items() if key in ("OMP_NUM_THREADS", "PYTHONUNBUFFERED")}
    share = int(env["OMP_NUM_THREADS"])
    assert share == max(1, len(os.sched_getaffinity(0)) // 2)
    run = ["cleanrl/ppo_atari.py", "--num-envs", "2", "--num-steps", "32", "--total-timesteps", "100000"]
    procs = {}
    for name, extra in (("a", env), ("b", env), ("alone", {})):
        args = [*run, "--no-progress-bar", "--run-name", name, "--runs-dir", str(tmp_path / "runs")]
        procs[name] = start_script(args, tmp_path, tmp_path / f"{name}.txt", env=extra)
    counts = {}
    try:
        # each run's threads once it has trained an iteration, the run then held still (SIGSTOP: it makes no thread
        # while it waits for the others, and takes no CPU from them)
        deadline = time.monotonic() + 300
        while len(counts) < len(procs) and time.monotonic() < deadline:
            for name, proc in procs.items():
                if name not in counts and "global_step=" in (tmp_path / f"{name}.txt").read_text(errors="replace"):
                    proc.send_signal(signal.SIGSTOP)
                    counts[name] = threads_of(proc.pid)
                assert proc.poll() is None, (tmp_path / f"{name}.txt").read_text()[-3000:]
            time.sleep(0.2)
        assert len(counts) == len(procs), f"no iteration within 300 s: {sorted(set(procs) - set(counts))}"
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
    for name in ("a", "b"):
        assert f" {share} torch threads (OMP_NUM_THREADS)" in (tmp_path / f"{name}.txt").read_text()
    cores = len(os.sched_getaffinity(0))
    assert f"{cores} cores: {cores} torch threads (its cores)" in (tmp_path / "alone.txt").read_text()
    if share < cores:  # fewer torch threads, fewer OS threads than the run sized to all the cores
        assert counts["a"] == counts["b"] < counts["alone"], counts
