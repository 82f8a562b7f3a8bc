"""benchmark/lab/measured.py: the process-tree sampler (CPU of a tree of processes, its memory), the GPUs it samples
(selected by UUID, with a timeout), and a measured run."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from benchmark.lab import measured

# burns `cpu` seconds of CPU, prints its own CPU time, then idles so that the sampler sees all of it
BUSY = textwrap.dedent("""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[1]]) if sys.argv[2:] else None
    while time.process_time() < 0.8:
        pass
    if child:
        child.wait()
    print(time.process_time(), flush=True)
    time.sleep(0.6)
""")


def test_tree_sampler_counts_a_busy_child_and_its_grandchild():
    # a process that starts a busy grandchild and is busy itself: the tree used about the CPU time both report
    # (grandchild's lines: the part BUSY prints for the child it started; it prints last)
    proc = subprocess.Popen([sys.executable, "-c", BUSY, BUSY, "spawn"], stdout=subprocess.PIPE, text=True)
    with measured.TreeSampler(proc.pid, interval=0.1, cores=2) as tree:
        out, _ = proc.communicate(timeout=300)
    reported = sum(float(x) for x in out.split())
    assert len(out.split()) == 2 and reported >= 1.6
    assert tree.cpu_seconds == pytest.approx(reported, rel=0.15)
    assert 0 < tree.mean_busy <= 1.05
    assert len(tree.busy) >= 5


# a launcher in the manner of torchrun: itself idle, two workers with RANK set; rank 1 starts a busy child of its own,
# which inherits its RANK
LAUNCHER = textwrap.dedent("""
    import os, subprocess, sys
    workers = [subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[1], *(["spawn"] if rank else [])],
                                env=dict(os.environ, RANK=str(rank)), stdout=subprocess.PIPE, text=True)
               for rank in (0, 1)]
    for worker in workers:
        print(sum(float(x) for x in worker.communicate()[0].split()), flush=True)
""")


def test_tree_sampler_counts_the_cpu_of_each_rank_with_the_processes_it_started():
    proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, BUSY], stdout=subprocess.PIPE, text=True)
    with measured.TreeSampler(proc.pid, interval=0.1, cores=2) as tree:
        out, _ = proc.communicate(timeout=300)
    reported = [float(x) for x in out.split()]  # each rank's CPU seconds, its child's included
    assert len(reported) == 2 and reported[1] >= 1.6 > reported[0] >= 0.8
    assert sorted(tree.rank_cpu_seconds) == [0, 1]
    for rank in (0, 1):
        assert tree.rank_cpu_seconds[rank] == pytest.approx(reported[rank], rel=0.15)
    assert tree.rank_cores_busy[1] == pytest.approx(tree.rank_cpu_seconds[1] / (tree._wall - tree._start))


# a launcher that forks a worker which execs only later (as torchrun's workers do, in a shorter window): until the
# exec the worker has the launcher's environment, without RANK
LATE_EXEC = textwrap.dedent("""
    import os, sys, time
    pid = os.fork()
    if pid == 0:
        time.sleep(0.5)
        os.execve(sys.executable, [sys.executable, "-c", sys.argv[1]], dict(os.environ, RANK="0"))
    os.waitpid(pid, 0)
""")


def test_tree_sampler_finds_a_rank_it_first_saw_before_the_worker_exec():
    proc = subprocess.Popen([sys.executable, "-c", LATE_EXEC, BUSY], stdout=subprocess.PIPE, text=True)
    with measured.TreeSampler(proc.pid, interval=0.1, cores=2) as tree:
        out, _ = proc.communicate(timeout=300)
    assert sorted(tree.rank_cpu_seconds) == [0]
    assert tree.rank_cpu_seconds[0] == pytest.approx(float(out), rel=0.15)


def test_tree_sampler_of_an_idle_process_is_near_zero():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    with measured.TreeSampler(proc.pid, interval=0.1, cores=2) as tree:
        proc.wait(timeout=300)
    assert tree.cpu_seconds < 0.3  # the interpreter's start-up only
    assert tree.mean_busy < 0.15


def test_tree_sampler_leaves_out_what_the_tree_used_before():
    # this test process spends a second of CPU first; a sampler of it counts only from its start on
    start = time.process_time()
    while time.process_time() < start + 1.0:
        pass
    assert psutil.Process().cpu_times().user > 1.0
    with measured.TreeSampler(os.getpid(), interval=0.1, cores=2) as tree:
        time.sleep(0.6)
    assert tree.cpu_seconds < 0.2
    assert tree.mean_busy < 0.15


def fake_nvidia_smi(tmp_path, monkeypatch, body: str) -> None:
    """An `nvidia-smi` first on PATH that runs `body` (Python)."""
    path = tmp_path / "nvidia-smi"
    path.write_text(f"#!{sys.executable}\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


THREE_GPUS = textwrap.dedent("""
    import sys
    assert sys.argv[1:] == ["--query-gpu=uuid,utilization.gpu", "--format=csv,noheader,nounits"], sys.argv
    print("GPU-aaaa, 10")
    print("GPU-bbbb, 55")
    print("GPU-cccc, [N/A]")
""")


def test_gpu_utilisation_of_the_visible_gpus_by_uuid(tmp_path, monkeypatch):
    # CUDA sees the 2nd and 3rd GPU of the machine (e.g. CUDA_VISIBLE_DEVICES=1,2): GPU 0 is not theirs
    fake_nvidia_smi(tmp_path, monkeypatch, THREE_GPUS)
    assert measured.gpu_utilisation(["GPU-bbbb", "GPU-cccc"]) == {"GPU-bbbb": 55.0}


def test_a_hung_nvidia_smi_stops_the_gpu_samples_not_the_run(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, "import time; time.sleep(30)")
    start = time.perf_counter()
    assert measured.gpu_utilisation(["GPU-aaaa"], timeout=0.5) is None
    assert time.perf_counter() - start < 5
    monkeypatch.setattr(measured, "GPU_QUERY_TIMEOUT_S", 0.5)
    result = measured.run_measured(
        [sys.executable, "-c", "import time; time.sleep(1.5)"], str(tmp_path), 60, interval=0.2, gpus=["GPU-aaaa"]
    )
    assert result.returncode == 0 and result.gpu_percent is None and result.wall_s < 10


def test_a_measured_run_reports_its_gpus_and_cpu(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, THREE_GPUS)
    command = [sys.executable, "-c", "import time\nwhile time.process_time() < 0.6: pass\nprint('done')"]
    result = measured.run_measured(command, str(tmp_path), 60, interval=0.1, gpus=["GPU-aaaa", "GPU-bbbb"])
    assert result.returncode == 0 and result.output.strip() == "done"
    assert result.gpu_percents == {"GPU-aaaa": 10.0, "GPU-bbbb": 55.0} and result.gpu_percent == 32.5
    assert result.tree_busy > 0 and result.peak_rss_mib > 1
    assert result.rank_cores_busy == {}  # no torchrun ranks in it


def test_a_measured_run_leads_its_group_in_this_session_and_a_timeout_stops_all_of_it(tmp_path):
    """The run shares this session (where the kernel groups tasks by session, the benchmark's busy processes and the
    run then compete thread for thread) and leads a process group, which a timeout stops whole."""
    show = "import os; print(os.getsid(0), os.getpgrp(), os.getpid())"
    result = measured.run_measured([sys.executable, "-c", show], str(tmp_path), 60, gpus=[])
    sid, pgrp, pid = map(int, result.output.split())
    assert sid == os.getsid(0) and pgrp == pid != os.getpgrp()
    spawn = (
        "import subprocess, sys, time; child = subprocess.Popen([sys.executable, '-c', 'import time; "
        "time.sleep(60)']); print(child.pid, flush=True); time.sleep(60)"
    )
    result = measured.run_measured([sys.executable, "-c", spawn], str(tmp_path), 2, gpus=[])
    assert "stopped after 2 s" in result.output and result.returncode != 0
    grandchild = int(result.output.split()[0])
    assert not psutil.pid_exists(grandchild) or psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE
