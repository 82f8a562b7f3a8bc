"""cleanrl_utils/benchmark.py: the local grid runner, its failure and Ctrl-C paths, and the Slurm job arrays
(rendered scripts executed with stand-in srun/scontrol, and a real job array on the throwaway Slurm cluster)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import REPO_ROOT, assert_one_line_error, read_scalars, run_script, start_script

BENCHMARK = "cleanrl_utils/benchmark.py"
PPO = f"{sys.executable} {REPO_ROOT / 'cleanrl' / 'ppo.py'}"
TINY = "--total-timesteps 512 --num-envs 2 --num-steps 64 --no-progress-bar"


def summary_rows(stdout: str) -> dict[str, list[str]]:
    """The runner's summary table as {run: [exit code, duration, log]}."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 4 and cells[0] != "run":
            rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.slow
def test_runs_grid_two_at_a_time_with_logs_and_summary(tmp_path):
    command = f"{PPO} {TINY} --runs-dir runs"
    res = run_script(
        [
            BENCHMARK,
            "--env-ids",
            "CartPole-v1",
            "Acrobot-v1",
            "--num-seeds",
            "2",
            "--workers",
            "2",
            "--command",
            command,
        ],
        cwd=tmp_path,
        timeout=400,
    )
    assert res.returncode == 0, res.stderr

    rows = summary_rows(res.stdout)
    assert set(rows) == {f"{env} seed {seed}" for env in ("CartPole-v1", "Acrobot-v1") for seed in (1, 2)}
    for env in ("CartPole-v1", "Acrobot-v1"):
        for seed in (1, 2):
            code, duration, log = rows[f"{env} seed {seed}"]
            assert code == "0" and re.fullmatch(r"\d+\.\ds", duration)
            assert log == f"benchmark_logs/ppo__{env}__{seed}.log"
            text = (tmp_path / log).read_text()
            # each log holds its own run's command and output, nothing of the others; ppo.py continues runs, so
            # each run has a fixed name (started again, the grid resumes it)
            run_name = f"{env}__ppo__{seed}"
            assert text.splitlines()[0] == (
                f"$ {command} --env-id {env} --seed {seed} --run-name {run_name} --resume auto"
            )
            assert "global_step=512" in text
            assert (tmp_path / "runs" / run_name / "checkpoint.pt").is_file(), f"no checkpoint for {log}"
    assert len(list((tmp_path / "runs").iterdir())) == 4

    # progress (stderr is not a terminal: one status line per change): never more than 2 at a time
    running = [int(n) for n in re.findall(r"\[\d+/4 done, (\d+) running, \d+ failed\]", res.stderr)]
    assert max(running) == 2
    assert "[4/4 done, 0 running, 0 failed]" in res.stderr
    assert "all 4 runs succeeded" in res.stdout


@pytest.mark.slow
def test_failing_run_makes_runner_exit_nonzero_and_names_it(tmp_path):
    res = run_script(
        [
            BENCHMARK,
            "--env-ids",
            "CartPole-v1",
            "NoSuchEnv-v0",
            "--num-seeds",
            "1",
            "--workers",
            "2",
            "--command",
            f"{PPO} --total-timesteps 128 --num-envs 2 --num-steps 64 --no-progress-bar",
        ],
        cwd=tmp_path,
        timeout=300,
    )
    assert res.returncode != 0
    rows = summary_rows(res.stdout)
    assert rows["CartPole-v1 seed 1"][0] == "0"
    assert rows["NoSuchEnv-v0 seed 1"][0] == "1"
    # the failure is named with its exit code and the tail of its log (where the script's own error is)
    failure = res.stderr[res.stderr.index("FAILED NoSuchEnv-v0 seed 1 (exit code 1)") :]
    assert "last lines of benchmark_logs/ppo__NoSuchEnv-v0__1.log" in failure
    assert "error: unknown environment id 'NoSuchEnv-v0'" in failure
    assert res.stderr.strip().splitlines()[-1] == "error: 1 of 2 runs failed: NoSuchEnv-v0 seed 1"
    assert "CartPole-v1 seed 1 (exit" not in res.stderr


def test_workers_zero_prints_the_exact_commands(tmp_path):
    res = run_script(
        [
            BENCHMARK,
            "--env-ids",
            "CartPole-v1",
            "ALE/Breakout-v5",
            "--num-seeds",
            "2",
            "--start-seed",
            "7",
            "--command",
            "python cleanrl/ppo.py --num-envs 4",
        ],
        cwd=tmp_path,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    resume = "--run-name {}__ppo__{} --resume auto"  # ppo.py continues runs: a fixed run name ("/" left out)
    assert res.stdout.splitlines() == [
        "python cleanrl/ppo.py --num-envs 4 --env-id CartPole-v1 --seed 7 " + resume.format("CartPole-v1", 7),
        "python cleanrl/ppo.py --num-envs 4 --env-id CartPole-v1 --seed 8 " + resume.format("CartPole-v1", 8),
        "python cleanrl/ppo.py --num-envs 4 --env-id ALE/Breakout-v5 --seed 7 " + resume.format("ALE-Breakout-v5", 7),
        "python cleanrl/ppo.py --num-envs 4 --env-id ALE/Breakout-v5 --seed 8 " + resume.format("ALE-Breakout-v5", 8),
    ]
    assert not (tmp_path / "benchmark_logs").exists()  # printing runs nothing


@pytest.mark.slow
def test_bad_input_gives_one_line_errors(tmp_path):
    cases = [
        (["--command", "python cleanrl/ppo.py"], "no environment ids"),
        (["--env-ids", "CartPole-v1", "--command", "x", "--num-seeds", "0"], "--num-seeds must be positive"),
        (["--env-ids", "CartPole-v1", "--command", "python 'cleanrl/ppo.py"], "--command is not valid shell syntax"),
        (
            ["--env-ids", "CartPole-v1", "--command", "x", "--slurm-template-path", "nope.template"],
            "Slurm template 'nope.template' not found",
        ),
        (
            ["--env-ids", "CartPole-v1", "--command", "x", "--workers", "1", "--log-dir", "/etc/hostname/logs"],
            "cannot create --log-dir '/etc/hostname/logs'",
        ),
    ]
    for argv, message in cases:
        assert_one_line_error(run_script([BENCHMARK, *argv], cwd=tmp_path, timeout=300), message)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--command", f"{PPO} --exp-name a/b"], "--exp-name 'a/b' is not a folder name: a run is one folder inside"),
        (["--command", f"{PPO} --exp-name=../x"], "--exp-name '../x' is not a folder name"),
        (["--command", f"{PPO} --exp-name .."], "--exp-name '..' is not a folder name"),
        (["--command", f"{PPO} --run-name x"], "--command must not set --run-name: each run is named"),
        (["--command", f"{PPO} --seed 3"], "--command must not set --seed"),
        (
            ["--command", f"{PPO} --env-id=Acrobot-v1"],
            "--command must not set --env-id: the env ids come from --env-ids",
        ),
        (["--command", "./train.sh --run-name ../../x"], "--run-name '../../x' is not a folder name"),
        (
            [
                "--command",
                PPO,
                "--slurm-template-path",
                str(REPO_ROOT / "benchmark" / "slurm_gpu.template"),
                "--slurm-job-name",
                "../../x",
            ],
            "--slurm-job-name '../../x' is not a folder name: it names the sbatch script",
        ),
    ],
)
def test_names_are_one_folder_name_before_anything_starts(tmp_path, argv, message):
    """The runner applies the scripts' name rule itself, to the names its runs and files are named after (the
    command's --exp-name and --run-name, the Slurm job name), and refuses the flags it adds to every run: one line,
    and nothing is run or written."""
    for workers in ("0", "1"):
        res = run_script(
            [BENCHMARK, "--env-ids", "CartPole-v1", "--num-seeds", "1", "--workers", workers, *argv],
            cwd=tmp_path,
            timeout=300,
        )
        assert_one_line_error(res, message)
        assert not res.stdout and list(tmp_path.iterdir()) == []


def test_an_exp_name_given_as_flag_equals_value_names_the_runs(tmp_path):
    res = run_script(
        [
            BENCHMARK,
            "--env-ids",
            "ALE/Breakout-v5",
            "--num-seeds",
            "1",
            "--command",
            "python cleanrl/ppo_atari.py --exp-name=wide",
        ],
        cwd=tmp_path,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("--run-name ")[1].split()[0] == "ALE-Breakout-v5__wide__1"


def test_ctrl_c_stops_every_run_and_exits_nonzero(tmp_path):
    # each run records its pid and torch thread count, then sleeps far longer than the test
    sleeper = (
        f"{sys.executable} -c \"import os,sys,time; open('pid_'+sys.argv[-1],'w').write("
        f"str(os.getpid())+' '+os.environ['OMP_NUM_THREADS']); time.sleep(300)\""
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    proc = subprocess.Popen(
        [
            sys.executable,
            str(REPO_ROOT / BENCHMARK),
            "--env-ids",
            "A",
            "--num-seeds",
            "3",
            "--workers",
            "2",
            "--command",
            sleeper,
        ],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pid_files = [tmp_path / "pid_1", tmp_path / "pid_2"]
    deadline = time.monotonic() + 60
    while not all(p.exists() and p.read_text() for p in pid_files):
        assert time.monotonic() < deadline and proc.poll() is None, "the runs did not start"
        time.sleep(0.2)
    pids = [int(p.read_text().split()[0]) for p in pid_files]
    # the CPUs are shared out between the parallel runs
    assert {p.read_text().split()[1] for p in pid_files} == {str(max(1, os.cpu_count() // 2))}
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)

    assert proc.returncode == 130
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    rows = summary_rows(stdout)
    assert rows["A seed 1"][0].endswith("stopped") and rows["A seed 2"][0].endswith("stopped")
    assert rows["A seed 3"][0] == "not started" and not (tmp_path / "pid_3").exists()
    assert stderr.strip().splitlines()[-1] == "error: interrupted; stopped A seed 1, A seed 2"


# ------------------------------------------------------------------------------------------------- Slurm


def render(tmp_path: Path, template: str, *extra: str) -> str:
    script = tmp_path / "job.sbatch"
    res = run_script(
        [
            BENCHMARK,
            "--slurm-template-path",
            str(REPO_ROOT / "benchmark" / template),
            "--slurm-script-path",
            str(script),
            "--log-dir",
            str(tmp_path / "logs"),
            *extra,
        ],
        cwd=tmp_path,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert f"submit it with: sbatch {script}" in res.stdout  # --workers 0: written, not submitted
    return script.read_text()


def fake_bin(tmp_path: Path, **programs: str) -> dict[str, str]:
    """Stand-in Slurm commands (shell snippets) on PATH, for running a rendered script outside Slurm."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in programs.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


@pytest.mark.slow
def test_gpu_template_maps_array_index_to_the_runner_commands(tmp_path):
    grid = [
        "--env-ids",
        "CartPole-v1",
        "ALE/Breakout-v5",
        "--num-seeds",
        "3",
        "--start-seed",
        "5",
        "--command",
        "python cleanrl/ppo_atari.py --num-envs 8",
    ]
    text = render(tmp_path, "slurm_gpu.template", *grid, "--slurm-cpus-per-task", "6", "--slurm-partition", "gpu")
    sbatch = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert sbatch == [
        "#SBATCH --job-name=ppo_atari",
        "#SBATCH --partition=gpu",
        "#SBATCH --array=0-5",
        "#SBATCH --ntasks=1",
        "#SBATCH --gpus-per-task=1",
        "#SBATCH --cpus-per-task=6",
        f"#SBATCH --output={tmp_path / 'logs'}/%x_%A_%a.log",
        "#SBATCH --open-mode=append",  # every attempt of a requeued task in one log
        "#SBATCH --requeue",
    ]
    assert "env_ids=(CartPole-v1 ALE/Breakout-v5)" in text and "seeds=(5 6 7)" in text

    # every array index runs exactly the command the local runner would run for that cell
    expected = run_script([BENCHMARK, *grid], cwd=tmp_path, timeout=300).stdout.splitlines()
    env = fake_bin(tmp_path, srun='echo "$@"')
    for index, command in enumerate(expected):
        res = subprocess.run(
            ["bash", "-c", text],
            env={**env, "SLURM_ARRAY_TASK_ID": str(index)},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert res.returncode == 0, res.stderr
        assert res.stdout.splitlines()[-1] == command

    # optional settings: 0 GPUs drops the GPU request, nodes appear only when asked for
    text = render(tmp_path, "slurm_gpu.template", *grid, "--slurm-gpus-per-task", "0", "--slurm-nodes", "1")
    assert "--gpus-per-task" not in text and "#SBATCH --nodes=1" in text and "--partition" not in text
    # a time limit: the warning that checkpoints and requeues comes 5 minutes before it
    text = render(tmp_path, "slurm_gpu.template", *grid, "--slurm-time", "60")
    assert "#SBATCH --time=60" in text.splitlines() and "#SBATCH --signal=B:USR1@300" in text.splitlines()


@pytest.mark.slow
def test_started_again_the_grid_skips_complete_runs_and_resumes_cut_ones(tmp_path):
    """Seed 1 finishes, seed 2 is cut (the runner stopped, as a scheduler does); the same command again: seed 1 is
    complete at once, seed 2 continues from its checkpoint; each ends with one run folder, every step once."""
    command = (
        f"{sys.executable} {REPO_ROOT / 'cleanrl' / 'ppo_atari.py'} --num-envs 2 --num-steps 16 "
        "--num-minibatches 2 --update-epochs 1 --vector-env sync --no-progress-bar --checkpoint-interval 1 "
        "--total-timesteps 640 --runs-dir runs"
    )
    argv = [
        BENCHMARK,
        "--env-ids",
        "BreakoutNoFrameskip-v4",
        "--num-seeds",
        "2",
        "--workers",
        "1",
        "--command",
        command,
    ]
    log = tmp_path / "benchmark_logs" / "ppo_atari__BreakoutNoFrameskip-v4__2.log"
    runner = start_script(argv, tmp_path, tmp_path / "first.log", env={"OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 300
        while "checkpoint: iteration 2," not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline and runner.poll() is None, (tmp_path / "first.log").read_text()
            time.sleep(0.2)
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=120) == 130
    finally:
        if runner.poll() is None:
            runner.kill()
    assert "stopped at global step" in log.read_text()

    res = run_script(argv, cwd=tmp_path, timeout=400, env={"OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr
    first = (tmp_path / "benchmark_logs" / "ppo_atari__BreakoutNoFrameskip-v4__1.log").read_text()
    assert "run BreakoutNoFrameskip-v4__ppo_atari__1 is complete: global step 640" in first
    assert "in a cleanrl_utils.benchmark sweep, another --exp-name" in first  # how a sweep gets new runs instead
    second = log.read_text()
    assert second.count("$ ") == 2 and second.splitlines()[0].endswith(
        "--seed 2 --run-name BreakoutNoFrameskip-v4__ppo_atari__2 --resume auto"
    )
    assert re.search(r"resuming from iteration ([2-9]|1\d) ", second), second
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [
        "BreakoutNoFrameskip-v4__ppo_atari__1",
        "BreakoutNoFrameskip-v4__ppo_atari__2",
    ]
    for run in (tmp_path / "runs").iterdir():
        assert [step for step, _ in read_scalars(run, "charts/learning_rate")] == [32 * i for i in range(1, 21)]


def slurm_nodes_bin(tmp_path: Path) -> dict[str, str]:
    """Stand-ins for a multi-node allocation: srun runs its command once per node (SLURM_NODEID, SLURMD_NODENAME
    set as on node gpu-N, whose NodeAddr is 10.1.2.N), and `python` prints its arguments instead of training."""
    return fake_bin(
        tmp_path,
        srun='shift\nfor n in $(seq 0 $((SLURM_NNODES - 1))); do SLURM_NODEID=$n SLURMD_NODENAME=gpu-$n "$@" || exit; done',
        scontrol='case "$2" in hostnames) seq 0 $((SLURM_NNODES - 1)) | sed s/^/gpu-/;; '
        'node) echo "NodeName=$3 Arch=x86_64 NodeAddr=10.1.2.${3#gpu-} NodeHostName=$3";; esac',
        python='echo "$@"',
    )


def run_array_task(text: str, env: dict[str, str], index: int, nodes: int) -> list[str]:
    """Run one array task of a rendered multi-node script under the stand-ins: its banner, then each node's launch."""
    res = subprocess.run(
        ["bash", "-c", text],
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **env,
            "SLURM_ARRAY_TASK_ID": str(index),
            "SLURM_JOB_ID": "1234",
            "SLURM_NNODES": str(nodes),
            "SLURM_JOB_NUM_NODES": str(nodes),
            "SLURM_JOB_NODELIST": f"gpu-[0-{nodes - 1}]",
        },
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


def test_multinode_template_runs_torchrun_on_every_node(tmp_path):
    text = render(
        tmp_path,
        "slurm_multinode.template",
        "--env-ids",
        "BreakoutNoFrameskip-v4",
        "PongNoFrameskip-v4",
        "--num-seeds",
        "2",
        "--command",
        "python cleanrl/ppo_atari_multigpu.py --num-envs 16",
        "--slurm-nodes",
        "4",
        "--slurm-gpus-per-task",
        "8",
    )
    for line in (
        "#SBATCH --array=0-3",
        "#SBATCH --nodes=4",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=8",
    ):
        assert line in text.splitlines()
    # array task 2 = Pong seed 1: every node starts torchrun, rendezvous on the first node's address
    banner, *launches = run_array_task(text, slurm_nodes_bin(tmp_path), index=2, nodes=4)
    assert banner.startswith("seed 1 env PongNoFrameskip-v4: array task 2 on 4 node(s)")
    assert launches == [
        f"-m torch.distributed.run --nnodes=4 --node-rank={n} --nproc-per-node=8 --rdzv-backend=c10d "
        f"--rdzv-endpoint=10.1.2.0:21234 --rdzv-id=1234 --local-addr=10.1.2.{n} cleanrl/ppo_atari_multigpu.py "
        "--num-envs 16 --env-id PongNoFrameskip-v4 --seed 1 --run-name PongNoFrameskip-v4__ppo_atari_multigpu__1 "
        "--resume auto"
        for n in range(4)
    ]


def test_runner_and_submit_exp_render_the_same_multinode_job(tmp_path):
    """The same job (2 seeds of a 2-node, 4-GPU run on Pong) from both entry points: the same resources and, for
    every array task, the same launch on every node."""
    common = ["--start-seed", "5", "--num-seeds", "2"]
    runner = render(
        tmp_path,
        "slurm_multinode.template",
        *common,
        "--env-ids",
        "PongNoFrameskip-v4",
        "--command",
        "python cleanrl/ppo_atari_multigpu.py --num-envs 16",
        "--slurm-nodes",
        "2",
        "--slurm-gpus-per-task",
        "4",
        "--slurm-cpus-per-task",
        "8",
        "--slurm-partition",
        "gpu",
    )
    res = run_script(
        [
            "cleanrl_utils/submit_exp.py",
            "--provider",
            "slurm",
            *common,
            "--num-nodes",
            "2",
            "--gpus",
            "4",
            "--vcpus",
            "8",
            "--memory",
            "16000",
            "--partition",
            "gpu",
            "--python",
            "python",
            "--command",
            "python cleanrl/ppo_atari_multigpu.py --num-envs 16 --env-id PongNoFrameskip-v4",
            "--dry-run",
        ],
        cwd=tmp_path,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    submitted = res.stdout

    def resources(text: str) -> list[str]:
        return [
            line
            for line in text.splitlines()
            if line.split("=")[0]
            in (
                "#SBATCH --array",
                "#SBATCH --nodes",
                "#SBATCH --ntasks-per-node",
                "#SBATCH --gpus-per-node",
                "#SBATCH --cpus-per-task",
                "#SBATCH --partition",
            )
        ]

    assert resources(runner) == resources(submitted) and len(resources(runner)) == 6
    env = slurm_nodes_bin(tmp_path)
    for index, seed in enumerate((5, 6)):
        launches = run_array_task(runner, env, index, nodes=2)[1:]
        assert launches == run_array_task(submitted, env, index, nodes=2)[1:]
        assert [line.split()[3] for line in launches] == ["--node-rank=0", "--node-rank=1"]
        assert all(
            line.endswith(
                f"--env-id PongNoFrameskip-v4 --seed {seed} --run-name "
                f"PongNoFrameskip-v4__ppo_atari_multigpu__{seed} --resume auto"
            )
            for line in launches
        )


@pytest.mark.slow
@pytest.mark.slurm
def test_job_array_runs_to_completion_on_a_real_slurm_cluster(slurm_cluster, tmp_path):
    submit = [
        BENCHMARK,
        "--slurm-template-path",
        str(REPO_ROOT / "benchmark" / "slurm_gpu.template"),
        "--slurm-gpus-per-task",
        "0",
        "--slurm-cpus-per-task",
        "1",
        "--log-dir",
        "logs",
        "--workers",
        "1",
        "--slurm-wait",
    ]
    cluster_env = {"SLURM_CONF": slurm_cluster.env["SLURM_CONF"]}
    res = run_script(
        [
            *submit,
            "--env-ids",
            "CartPole-v1",
            "Acrobot-v1",
            "--num-seeds",
            "2",
            "--command",
            f"{PPO} {TINY} --runs-dir {tmp_path / 'runs'}",
        ],
        cwd=tmp_path,
        env=cluster_env,
        timeout=500,
    )
    assert res.returncode == 0, res.stdout + res.stderr + slurm_cluster.logs()
    assert "a job array of 4 tasks (2 envs x 2 seeds)" in res.stdout
    job_id = re.search(r"Submitted batch job (\d+)", res.stdout).group(1)
    cells = [(env, seed) for env in ("CartPole-v1", "Acrobot-v1") for seed in (1, 2)]
    for index, (env, seed) in enumerate(cells):
        text = (tmp_path / "logs" / f"ppo_{job_id}_{index}.log").read_text()
        assert f"array task {index} on " in text and f"env {env} seed {seed}" in text
        assert "global_step=512" in text, text
        assert (tmp_path / "runs" / f"{env}__ppo__{seed}" / "checkpoint.pt").is_file(), text
    assert len(list((tmp_path / "runs").iterdir())) == 4

    # a failing task: sbatch --wait, and so the runner, exit with the task's code; its log says why
    res = run_script(
        [*submit, "--env-ids", "NoSuchEnv-v0", "--num-seeds", "1", "--command", f"{PPO} {TINY}"],
        cwd=tmp_path,
        env=cluster_env,
        timeout=300,
    )
    assert res.returncode == 1, res.stdout + res.stderr
    assert "sbatch exited with 1; task logs are in logs/" in res.stderr
    job_id = re.search(r"Submitted batch job (\d+)", res.stdout).group(1)
    assert "error: unknown environment id 'NoSuchEnv-v0'" in (tmp_path / "logs" / f"ppo_{job_id}_0.log").read_text()


def test_cleanrls_own_slurm_line_runs_with_its_renamed_flags(tmp_path):
    """CleanRL's benchmark/ppo.sh Atari line: --slurm-total-cpus (CPUs of an array task) is each Slurm task's share
    of them here; --no-auto-tag (what this runner does anyway) is taken, --auto-tag is one line."""
    grid = ["--env-ids", "PongNoFrameskip-v4", "--num-seeds", "3", "--command", "python cleanrl/ppo_atari.py --track"]
    cleanrl = ["--slurm-gpus-per-task", "1", "--slurm-ntasks", "1", "--slurm-total-cpus", "10", "--no-auto-tag"]
    assert "#SBATCH --cpus-per-task=10" in render(tmp_path, "slurm_gpu.template", *grid, *cleanrl).splitlines()
    two = ["--slurm-ntasks", "2", "--slurm-total-cpus=10"]
    assert "#SBATCH --cpus-per-task=5" in render(tmp_path, "slurm_gpu.template", *grid, *two).splitlines()
    res = run_script([BENCHMARK, *grid, "--auto-tag"], cwd=tmp_path, timeout=300)
    assert_one_line_error(res, "--auto-tag is not a flag of this tool: this runner does not tag runs")


@pytest.mark.parametrize("flag", ["--wandb-key", "--wandb_key", "--hf-token"])
def test_a_secret_on_the_command_line_is_refused_without_showing_it(tmp_path, flag):
    secret = "s3cr3t-value-9d8e7f"
    for argv in ([flag, secret], [f"{flag}={secret}"], ["--command", f"python cleanrl/ppo.py {flag} {secret}"]):
        res = run_script([BENCHMARK, "--env-ids", "CartPole-v1", *argv], cwd=tmp_path, timeout=300)
        assert_one_line_error(res, f"{flag.replace('_', '-')} would put a secret on the command line")
        assert secret not in res.stdout + res.stderr and "WANDB_API_KEY" in res.stderr
