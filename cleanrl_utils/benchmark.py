"""Run a script over a grid of env ids x seeds, locally N at a time or as a Slurm job array; a script that continues
runs gets a run name and `--resume auto`, so a grid started again skips or continues its runs (docs/cluster.md)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field

import tyro

from cleanrl_utils.cpu import usable_cores
from cleanrl_utils.launch import slurm
from cleanrl_utils.launch.cleanrl_flags import RUNNER, refuse_secrets, translated
from cleanrl_utils.launch.nodes import is_python
from cleanrl_utils.launch.processes import log_tail, start_logged, stop_process_groups
from cleanrl_utils.launch.runs import SWEEP_FLAGS, check_command, check_positive, make_dir, print_table, sweep_run_of
from cleanrl_utils.progress import Progress
from cleanrl_utils.validation import check_name, fail

LOG_TAIL_LINES = 15  # of a failed run's log
POLL_S = 0.1


@dataclass
class Args:
    env_ids: list[str] = field(default_factory=list)
    """the environment ids to run, e.g. `--env-ids CartPole-v1 Acrobot-v1`"""
    command: str = ""
    """the command of one run, without `--env-id` and `--seed` (the runner appends them)"""
    num_seeds: int = 3
    """the number of seeds per environment"""
    start_seed: int = 1
    """the first seed; the seeds are start_seed, start_seed+1, ..."""
    workers: int = 0
    """runs at a time; 0 only prints the commands (or, with a Slurm template, only writes the sbatch script)"""
    log_dir: str = "benchmark_logs"
    """where each run's output (stdout and stderr) goes, one file per run; also where the sbatch script goes"""
    slurm_template_path: str | None = None
    """an sbatch template (e.g. `benchmark/slurm_gpu.template`): run the grid as a Slurm job array instead"""
    slurm_gpus_per_task: int = 1
    """GPUs per array task (per node for the multi-node template); 0 requests none"""
    slurm_cpus_per_task: int | None = None
    """CPUs per array task (per node for the multi-node template); unset leaves Slurm's default"""
    slurm_nodes: int | None = None
    """nodes per array task (the multi-node template needs it); unset leaves the line out"""
    slurm_ntasks: int = 1
    """Slurm tasks per array task for the one-GPU template (each runs the command); the multi-node template
    starts one torchrun per node instead"""
    slurm_partition: str | None = None
    """the Slurm partition; unset uses the cluster's default partition"""
    slurm_job_name: str | None = None
    """the Slurm job name; default: the script's name, e.g. `ppo`"""
    slurm_script_path: str | None = None
    """where the rendered sbatch script is written; default `{log_dir}/{job_name}_{time}.sbatch`"""
    slurm_time: int | None = None
    """the time limit of an array task in minutes; its run gets a signal before it, checkpoints and is requeued
    (unset: the partition's limit)"""
    slurm_wait: bool = False
    """submit with `sbatch --wait`: block until every array task ends and exit with the highest task exit code"""


@dataclass
class Run:
    """One cell of the grid."""

    env_id: str
    seed: int
    command: str
    log_path: str
    process: subprocess.Popen | None = None
    started: float = 0.0
    duration: float = 0.0
    returncode: int | None = None
    stopped: bool = False  # stopped by the runner on Ctrl-C / SIGTERM

    @property
    def name(self) -> str:
        return f"{self.env_id} seed {self.seed}"


def script_name(command: str) -> str:
    """The program a command runs, e.g. `ppo` for `python cleanrl/ppo.py --x 1` (`-m` a module's last part)."""
    tokens = shlex.split(command)
    for token in tokens:
        if token.endswith(".py"):
            return os.path.splitext(os.path.basename(token))[0]
    if "-m" in tokens[:-1]:
        return tokens[tokens.index("-m") + 1].rsplit(".", 1)[-1]
    words = [t for t in tokens if "=" not in t]
    return os.path.basename(words[0]) if words else "run"


def grid(args: Args) -> list[tuple[str, int]]:
    """The (env id, seed) pairs in the order the runner and the Slurm array index use: env-major."""
    seeds = range(args.start_seed, args.start_seed + args.num_seeds)
    return [(env_id, seed) for env_id in args.env_ids for seed in seeds]


def run_command(command: str, env_id: str, seed: int) -> str:
    run_name = sweep_run_of(shlex.split(command), env_id, seed)
    resume = f" --run-name {shlex.quote(run_name)} --resume auto" if run_name else ""
    return f"{command} --env-id {shlex.quote(env_id)} --seed {seed}{resume}"


def check_args(args: Args) -> None:
    if not args.env_ids:
        fail("no environment ids: pass at least one, e.g. --env-ids CartPole-v1 Acrobot-v1")
    if not args.command.strip():
        fail('no command: pass the run to repeat, e.g. --command "python cleanrl/ppo.py"')
    try:
        tokens = shlex.split(args.command)
    except ValueError as exc:
        fail(f"--command is not valid shell syntax ({exc}): {args.command}")
    added = {"--env-id": "the env ids come from --env-ids", "--seed": SWEEP_FLAGS["--seed"]}
    if sweep_run_of(tokens, args.env_ids[0], args.start_seed) is not None:
        added = {**added, **SWEEP_FLAGS}  # the runner names the runs and continues them too
    check_command(tokens, added)
    if args.slurm_job_name is not None:
        check_name("--slurm-job-name", args.slurm_job_name, "it names the sbatch script inside --log-dir")
    check_positive(num_seeds=args.num_seeds)
    if args.workers < 0:
        fail(f"--workers must be 0 (print the commands) or positive, got {args.workers}")
    if len(set(args.env_ids)) != len(args.env_ids):
        fail(f"--env-ids lists an environment twice: {' '.join(args.env_ids)}")
    if args.slurm_template_path is not None:
        if not os.path.isfile(args.slurm_template_path):
            fail(f"Slurm template {args.slurm_template_path!r} not found (the shipped ones are in benchmark/)")
        if args.slurm_gpus_per_task < 0:
            fail(f"--slurm-gpus-per-task must be 0 or positive, got {args.slurm_gpus_per_task}")
        counts = ("slurm_cpus_per_task", "slurm_nodes", "slurm_ntasks", "slurm_time")
        check_positive(**{name: getattr(args, name) for name in counts if getattr(args, name) is not None})


def slurm_job(args: Args, job_name: str) -> slurm.ArrayJob:
    """The grid as a Slurm job array; a `python SCRIPT ...` command runs under torchrun as that python's module."""
    tokens = shlex.split(args.command)
    python = tokens[0] if tokens and is_python(tokens[0]) else None
    return slurm.ArrayJob(
        name=job_name,
        run=shlex.join(tokens[1:]) if python else args.command,
        python=python,
        torchrun=True,
        seeds=range(args.start_seed, args.start_seed + args.num_seeds),
        env_ids=tuple(args.env_ids),
        nodes=args.slurm_nodes,
        nproc_per_node=max(args.slurm_gpus_per_task, 1),
        gpus_per_node=args.slurm_gpus_per_task,
        cpus_per_task=args.slurm_cpus_per_task,
        partition=args.slurm_partition,
        log_dir=args.log_dir,
        time_minutes=args.slurm_time,
        run_names=tuple(n for n in (sweep_run_of(tokens, e, s) for e, s in grid(args)) if n),
    )


def run_slurm(args: Args) -> int:
    """The grid as a job array; the one-GPU template runs the command as typed in `--slurm-ntasks` tasks."""
    job_name = args.slurm_job_name or script_name(args.command)
    values = {
        **slurm.template_values(slurm_job(args, job_name)),
        "command": args.command,
        "ntasks": str(args.slurm_ntasks),
    }
    path = args.slurm_script_path or os.path.join(args.log_dir, f"{job_name}_{int(time.time())}.sbatch")
    what = f"a job array of {len(grid(args))} tasks ({len(args.env_ids)} envs x {args.num_seeds} seeds)"
    return slurm.submit_array(
        args.slurm_template_path, values, path, args.log_dir, what, args.workers > 0, args.slurm_wait
    )


def run_env(workers: int) -> dict[str, str]:
    """Unbuffered output (live logs) and, unless set, OMP_NUM_THREADS: the usable cores shared between the runs."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.setdefault("OMP_NUM_THREADS", str(max(1, usable_cores() // workers)))
    return env


def finish(run: Run, returncode: int) -> None:
    run.returncode = returncode
    run.duration = time.monotonic() - run.started


def exit_code_text(run: Run) -> str:
    if run.process is None:
        return "not started"
    if run.returncode < 0:
        text = f"{run.returncode} ({signal.Signals(-run.returncode).name})"
    else:
        text = str(run.returncode)
    return text + (" stopped" if run.stopped else "")


def print_summary(runs: list[Run]) -> None:
    ran = {r.name: (f"{r.duration:.1f}s", r.log_path) for r in runs if r.process is not None}
    rows = [(r.name, exit_code_text(r), *ran.get(r.name, ("", ""))) for r in runs]
    print_table(("run", "exit code", "duration", "log"), rows)


def run_all(runs: list[Run], workers: int) -> bool:
    """Run `runs`, `workers` at a time, until all end or Ctrl-C / SIGTERM stops them (then True)."""
    pending, running, env = deque(runs), [], run_env(workers)
    done = failed = 0
    progress = Progress(len(runs), out=sys.stderr, unit="run")

    def report(event: str) -> None:  # a bar on a terminal, else a line per change
        progress.advance(done - progress.steps, {"running": len(running), "failed": failed})
        progress.write(f"[{done}/{len(runs)} done, {len(running)} running, {failed} failed] {event}")

    # Ctrl-C and SIGTERM stop the grid; SIGINT too is set: a shell starts background jobs with it ignored
    previous = {s: signal.signal(s, signal.default_int_handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while pending or running:
            while pending and len(running) < workers:
                run = pending.popleft()
                run.started, run.process = time.monotonic(), start_logged(run.command, run.log_path, env)
                running.append(run)
                report(f"started {run.name}: {run.command}")
            time.sleep(POLL_S)
            progress.bar.refresh()  # the elapsed time moves while nothing changes (runs can take hours)
            for run in [r for r in running if r.process.poll() is not None]:
                finish(run, run.process.returncode)
                running.remove(run)
                done, failed = done + 1, failed + (run.returncode != 0)
                outcome = "finished" if run.returncode == 0 else f"FAILED (exit code {run.returncode})"
                report(f"{outcome} {run.name} in {run.duration:.1f}s")
        return False
    except KeyboardInterrupt:
        for signum in previous:  # a second Ctrl-C must not abort the clean-up
            signal.signal(signum, signal.SIG_IGN)
        print(f"\ninterrupted: stopping {len(running)} running run(s)", file=sys.stderr, flush=True)
        for run, returncode in zip(running, stop_process_groups([run.process for run in running])):
            finish(run, returncode)  # stopped with everything it started: SIGTERM to its group, later SIGKILL
            run.stopped = True
        return True
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        progress.close()


def run_local(args: Args) -> int:
    make_dir(args.log_dir, "--log-dir")
    prefix = script_name(args.command)
    runs = [
        Run(
            env_id,
            seed,
            run_command(args.command, env_id, seed),
            os.path.join(args.log_dir, f"{prefix}__{env_id.replace('/', '_')}__{seed}.log"),
        )
        for env_id, seed in grid(args)
    ]
    interrupted = run_all(runs, args.workers)
    print_summary(runs)
    failures = [r for r in runs if r.returncode not in (None, 0) and not r.stopped]
    for run in failures:
        print(f"\nFAILED {run.name} (exit code {run.returncode}): {run.command}", file=sys.stderr)
        print(f"last lines of {run.log_path}:", file=sys.stderr)
        for line in log_tail(run.log_path, LOG_TAIL_LINES):
            print(f"    {line}", file=sys.stderr)
    if interrupted:
        stopped = ", ".join(r.name for r in runs if r.stopped)
        print(f"error: interrupted; stopped {stopped or 'no running run'}", file=sys.stderr)
        return 130
    if failures:
        names = ", ".join(r.name for r in failures)
        print(f"error: {len(failures)} of {len(runs)} runs failed: {names}", file=sys.stderr)
        return 1
    print(f"all {len(runs)} runs succeeded; logs in {args.log_dir}/")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    refuse_secrets(argv, "put it in the environment instead (W&B reads WANDB_API_KEY; or run `wandb login` once)")
    args = tyro.cli(Args, args=translated(argv, RUNNER))  # CleanRL's own command lines too
    check_args(args)
    if args.slurm_template_path is not None:
        return run_slurm(args)
    if args.workers == 0:
        for env_id, seed in grid(args):
            print(run_command(args.command, env_id, seed))
        return 0
    return run_local(args)


if __name__ == "__main__":
    sys.exit(main())
