"""One run that checks a GPU machine (driven by benchmark/gpu_check.sh): the correctness steps first, then the
throughput steps, each within its time limit (``LIMITS``) and all within ``--budget`` seconds. Prints one PASS/FAIL
line per step and writes ``gpu_<GPU name>.md`` and ``.json`` to ``--out``, also when stopped (SIGTERM, SIGINT: exit
128 + the signal's number). ``--cpu`` runs every step on CPU with tiny sizes: a check of this tool, not a measurement,
so no step there is judged by its time (a busy machine is slow, not wrong): each only has a limit that stops a hang.
Every step runs in child processes: this one never initialises CUDA.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import psutil
import tyro

from benchmark.lab.measured import DEVICES_EXPR, REPO, Gpu, Measured, gpus_from, repo_env, run_measured
from cleanrl_utils.launch.processes import start_logged, stop_process_groups
from cleanrl_utils.atari_wrappers import MAX_FRAMES
from cleanrl_utils.vector_envs import FRAME_SKIP

SCRIPT = "cleanrl/ppo_atari.py"
MULTIGPU_SCRIPT = "cleanrl/ppo_atari_multigpu.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
MULTIGPU_MODEL = "ppo_atari_multigpu.cleanrl_model"
"""what --save-model writes in the run folder (the default --exp-name is the script's name)"""
HOST_SYNCS = re.compile(r"host syncs: rollout step ([\d.]+), minibatch ([\d.]+), iteration rest ([\d.]+) \((.+)\)")

BUDGET_S = 310.0
"""the default --budget (benchmark/gpu_check.sh allows 20 s more: 330 s in all)"""
LIMITS: dict[str, float] = {
    # correctness
    "versions": 15,
    "train": 18,
    "stop": 15,
    "resume": 14,
    "resume_cpu": 15,
    "eval": 12,
    "host_syncs": 14,
    "torchrun_1": 16,
    "torchrun_2": 18,
    "elastic": 30,
    "stop_ranks": 30,
    # throughput
    "network": 10,
    "backends": 21,
    "compile": 42,
    "many_envs": 11,
    "bf16": 28,
    "gpu_use": 1,
}
"""each step's time limit in seconds on a GPU at the default budget (another --budget scales them all); within
BUDGET_S together, so that every step gets its whole limit; a step past it is stopped and fails"""
CPU_HANG_S = 600.0
"""with --cpu, each step's limit: it only stops a step that hangs (and a --budget, when given, applies as well)"""
STOP_GRACE_S = 3.0
"""seconds a run gets between SIGTERM and SIGKILL when its step stops it (inside the step's limit)"""
EVAL_MAX_STEPS = MAX_FRAMES // FRAME_SKIP
"""the eval's agent steps: an episode's cap, so that any game ends in time (a random policy's can be long)"""


@dataclass
class Args:
    cpu: bool = False
    """run every step on CPU with gloo and tiny sizes (a check of this tool; its report is no measurement)"""
    out: Optional[str] = None
    """folder of the report (required on a GPU; with --cpu default: a new temporary folder)"""
    budget: Optional[float] = None
    """seconds for all steps together (unset: 310 on a GPU, each step's limit scaled by budget / 310; none with
    --cpu, whose steps are stopped only when they hang)"""
    env_id: str = "BreakoutNoFrameskip-v4"
    """the game of every run"""


@dataclass(frozen=True)
class Sizes:
    num_envs: int
    num_steps: int
    num_minibatches: int
    update_epochs: int
    sps_iterations: int
    """iterations of each throughput run (its steady SPS leaves out the first)"""
    many_envs: tuple[int, ...]
    """the larger env counts timed on the fastest backend"""
    long_iterations: int
    """iterations of a run that is stopped or killed after its first checkpoint"""
    network_seconds: float


GPU_SIZES = Sizes(8, 128, 4, 4, 3, (64,), 12, 0.6)
CPU_SIZES = Sizes(2, 16, 2, 1, 2, (8,), 8, 0.1)
BF16_RUNS = (("float32_before", ()), ("bf16", ("--bf16",)), ("float32_after", ()))
"""the bf16 step's runs of one configuration, in this order: --bf16 is judged against the mean of the float32 runs
around it, so that a drift of the machine's speed cancels"""


class StepFailed(Exception):
    """A step's check did not hold (the message says which)."""


class Stopped(BaseException):
    """SIGTERM or SIGINT reached this process: the check stops and writes what it has."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stop(signum: int, frame: Any) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):  # the first signal stops the check; the stop itself runs to its end
        signal.signal(sig, signal.SIG_IGN)
    raise Stopped(signum)


def last_line(output: str) -> str:
    """The last line of an output that says something (not the frame of a box that tyro draws around its errors)."""
    lines = [line.strip(" │┃|") for line in output.splitlines() if re.search(r"[A-Za-z0-9]", line)]
    stopped = lines.pop() if lines and lines[-1].startswith("(stopped after") else ""  # run_measured's note
    errors = [line for line in lines if re.search(r"(?i)error|unrecognized", line)]
    last = (errors or lines or ["no output"])[-1]
    return (f"{stopped[1:-1]}, its limit; before: {last}" if stopped else last)[:300]


def expect(ok: bool, why: str) -> None:
    if not ok:
        raise StepFailed(why)


def envpool_installed() -> bool:
    return importlib.util.find_spec("envpool") is not None


def wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float) -> None:
    """Wait until the output file `path` of `proc` contains `text`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            why = last_line(path.read_text())
            raise StepFailed(f"the run ended ({proc.returncode}) before printing {text!r}: {why}")
        time.sleep(0.2)
    raise StepFailed(f"{text!r} not printed within {timeout:.0f} s")


class Check:
    """The steps, their PASS/FAIL lines and the figures for the report."""

    def __init__(self, args: Args, start: Optional[float] = None):
        self.args = args
        self.sizes = CPU_SIZES if args.cpu else GPU_SIZES
        self.budget = args.budget or (float("inf") if args.cpu else BUDGET_S)
        self.scale = self.budget / BUDGET_S
        self.gpus: tuple[Gpu, ...] = ()  # the versions step asks torch
        self.workdir = Path(tempfile.mkdtemp(prefix="gpu_check_"))
        self.start = time.monotonic() if start is None else start
        self.deadline = self.start + self.budget
        self.steps: list[dict[str, Any]] = []
        self.figures: dict[str, Any] = {}
        self.live: list[subprocess.Popen] = []
        """the runs of the step under way (a stop stops them)"""
        self.stopped: Optional[str] = None
        # --cpu: compile would take minutes on a small CPU machine; the flag's path runs, torch.compile is a no-op
        self.env = {"OMP_NUM_THREADS": "1", "TORCH_COMPILE_DISABLE": "1"} if args.cpu else {}

    # ------------------------------------------------------------ running things

    def plan(self) -> list[tuple[str, str, Callable[[float], str]]]:
        """(name, key of LIMITS, function of the step's deadline) of every step, in the order run."""
        device = "cpu" if self.args.cpu else "cuda"
        steps = [
            ("versions", "versions", self.versions),
            (f"ppo_atari.py on {device}: 2 iterations, --save-model", "train", self.train_and_save),
            ("ppo_atari.py: SIGTERM stop (143, checkpoint)", "stop", self.stop_resume),
            (f"ppo_atari.py: --resume on {device}", "resume", lambda end: self.resume("stop", self.device_flag(), end)),
            ("ppo_atari.py: cuda checkpoint resumed with --no-cuda", "resume_cpu", self.resume_cpu),
            (f"eval CLI on {device}", "eval", self.evaluate),
            ("host syncs per rollout step and minibatch", "host_syncs", self.host_syncs),
            (
                f"torchrun: 1 rank{'' if self.args.cpu else ' (nccl)'}",
                "torchrun_1",
                lambda end: self.torchrun_ranks(1, end),
            ),
            ("torchrun: 2 ranks on one device", "torchrun_2", lambda end: self.torchrun_ranks(2, end)),
            ("torchrun: elastic restart after a killed worker", "elastic", self.killed_worker),
            ("torchrun: SIGTERM stop and resume of 2 ranks", "stop_ranks", self.stop_resume_ranks),
            (f"network on {device}: NCHW vs channels_last", "network", self.memory_formats),
            ("steady SPS: sync, ale, envpool", "backends", self.backends),
            ("steady SPS: --compile", "compile", self.compiled),
            ("steady SPS: more envs on the fastest backend", "many_envs", self.many_envs),
            ("steady SPS: --bf16 vs float32 on the fastest eager run", "bf16", self.bf16),
            ("GPU utilisation during the fastest run", "gpu_use", self.gpu_use),
        ]
        # with --cpu the resume step already resumed with --no-cuda
        return [step for step in steps if not (self.args.cpu and step[1] == "resume_cpu")]

    def all_steps(self) -> None:
        for name, key, fn in self.plan():
            self.step(name, CPU_HANG_S if self.args.cpu else LIMITS[key] * self.scale, fn)
            if name == "versions" and not self.args.cpu and not self.gpus:
                return  # the other steps need the GPU

    def step(self, name: str, limit: float, fn: Callable[[float], str]) -> None:
        """Run `fn` with the deadline of its `limit` seconds (or of what the budget has left)."""
        left = self.deadline - time.monotonic()
        if limit < 1.0 or left < min(limit, 20.0):
            why = (
                f"its limit at a {self.budget:.0f} s budget is {limit:.1f} s"
                if limit < 1.0
                else f"{left:.0f} s of the {self.budget:.0f} s budget left"
            )
            self.record(name, False, f"not run: {why}", 0.0, limit)
            return
        started = time.monotonic()
        try:
            ok, summary = True, fn(started + min(limit, left))
        except StepFailed as exc:
            ok, summary = False, str(exc)
        except Stopped as exc:
            self.stopped, seconds = str(exc), time.monotonic() - started
            self.record(name, False, f"stopped by {exc} after {seconds:.0f} s", seconds, limit)
            raise
        except Exception as exc:  # a bug of this tool or a surprise of the machine: this step fails, the rest run
            ok, summary = False, f"{type(exc).__name__}: {str(exc)[:300]}"
        self.stop_runs()  # a run the step did not wait for
        self.record(name, ok, summary, time.monotonic() - started, limit)

    def record(self, name: str, ok: bool, summary: str, seconds: float, limit: float) -> None:
        self.steps.append(
            {"step": name, "ok": ok, "summary": summary, "seconds": round(seconds, 1), "limit_s": round(limit, 1)}
        )
        print(f"{'PASS' if ok else 'FAIL'} {name} ({seconds:.0f} s): {summary}", flush=True)

    def stop_runs(self) -> None:
        """Stop the runs of the step under way (after a stop interrupted it wherever it was)."""
        stop_process_groups([proc for proc in self.live if proc.poll() is None], grace=STOP_GRACE_S)
        self.live.clear()

    @staticmethod
    def share(end: float, parts: int = 1) -> float:
        """Seconds a run may take before it is stopped: of the time left until `end` (less the grace of the last
        stop), an equal part for each of the `parts` runs still to come, this one included."""
        return max((end - time.monotonic() - STOP_GRACE_S) / parts, 1.0)

    def run(self, command: list[str], end: float, parts: int = 1) -> Measured:
        """`command` measured, stopped when its share of the time until `end` is up."""
        gpus = [gpu.uuid for gpu in self.gpus]
        timeout = self.share(end, parts)
        return run_measured(
            command, str(self.workdir), timeout, gpus=gpus, env=self.env, grace=STOP_GRACE_S, started=self.live
        )

    def start_logged(self, command: list[str], log: Path) -> subprocess.Popen:
        proc = start_logged(command, str(log), repo_env(self.env), cwd=self.workdir)
        self.live.append(proc)
        return proc

    def finish(self, proc: subprocess.Popen, timeout: float) -> int:
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_process_groups([proc], grace=STOP_GRACE_S)
            raise StepFailed(f"still running after {timeout:.0f} s") from None

    def stop_logged(self, proc: subprocess.Popen, end: float) -> int:
        """SIGTERM `proc` (a run or torchrun, which passes it on to its ranks) and its exit code by `end`."""
        proc.send_signal(signal.SIGTERM)
        return self.finish(proc, self.share(end))

    @property
    def long_steps(self) -> int:
        """steps per env of the runs that are stopped, killed or resumed: short iterations"""
        return min(32, self.sizes.num_steps)

    def device_flag(self) -> str:
        return "--no-cuda" if self.args.cpu else "--cuda"

    def ppo(self, runs: str, iterations: int, *extra: str, script: str = SCRIPT, num_envs=None, num_steps=None):
        """Arguments of a script run (after the interpreter or torchrun)."""
        s = self.sizes
        num_envs, num_steps = num_envs or s.num_envs, num_steps or s.num_steps
        return [
            *(str(REPO / script), "--env-id", self.args.env_id, "--num-envs", str(num_envs)),
            *("--num-steps", str(num_steps), "--num-minibatches", str(s.num_minibatches)),
            *("--update-epochs", str(s.update_epochs), "--total-timesteps", str(iterations * num_envs * num_steps)),
            *("--no-progress-bar", "--runs-dir", str(self.workdir / runs), *extra),
        ]

    def torchrun(self, ranks: int, *launcher: str) -> list[str]:
        return [*TORCHRUN, "--nnodes=1", f"--nproc_per_node={ranks}", *launcher]

    # ------------------------------------------------------------ correctness

    def versions(self, end: float) -> str:
        probe = (
            "import json, torch; c = torch.cuda.is_available(); print(json.dumps({'torch': torch.__version__, "
            "'cuda': torch.version.cuda, 'cuda_available': c, 'nccl': '.'.join(map(str, torch.cuda.nccl.version())) "
            "if c else None, 'cudnn': torch.backends.cudnn.version() if c else None, 'gloo': "
            f"torch.distributed.is_gloo_available(), 'devices': {DEVICES_EXPR}}}))"
        )
        m = self.run([sys.executable, "-c", probe], end)
        expect(m.returncode == 0, f"torch does not load: {last_line(m.output)}")
        found = json.loads(m.output.strip().splitlines()[-1])
        try:
            smi = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=self.share(end)).stdout
        except (OSError, subprocess.TimeoutExpired) as exc:
            smi = f"(nvidia-smi: {type(exc).__name__})"
        self.figures["versions"], self.figures["nvidia_smi"] = found, smi
        self.gpus = gpus_from(found["devices"])
        expect(self.args.cpu or bool(self.gpus), "torch sees no CUDA device: the other steps need one")
        names = [name for name, _ in found["devices"]]
        return (
            f"torch {found['torch']}, CUDA {found['cuda']}, NCCL {found['nccl']}, cuDNN {found['cudnn']}, "
            f"devices {names or 'none'}"
        )

    def train_and_save(self, end: float) -> str:
        m = self.run(
            [sys.executable, *self.ppo("runs_train", 2, self.device_flag(), "--save-model", "--run-name", "train")], end
        )
        expect(m.returncode == 0, f"exit {m.returncode}: {last_line(m.output)}")
        model = self.workdir / "runs_train" / "train" / "ppo_atari.cleanrl_model"
        expect(model.exists(), f"no model at {model.name}")
        expect((model.parent / "checkpoint.pt").exists(), "no checkpoint.pt")
        self.figures["train_output_head"] = m.output.strip().splitlines()[:3]
        return f"2 iterations, model and checkpoint saved, {m.wall_s:.0f} s"

    def stop_resume(self, end: float) -> str:
        """SIGTERM after the first checkpoint: exit 143 with a checkpoint; the run is resumed below on the device
        and, on a GPU, a copy of it with --no-cuda."""
        log = self.workdir / "stop.log"
        flags = (self.device_flag(), "--run-name", "stop", "--checkpoint-interval", "1")
        args = self.ppo("runs_stop", self.sizes.long_iterations, *flags, num_steps=self.long_steps)
        proc = self.start_logged([sys.executable, *args], log)
        try:
            wait_for(log, "checkpoint: iteration 1,", proc, self.share(end) - 3)  # 3 s for the stop
            code = self.stop_logged(proc, end)
        finally:
            stop_process_groups([proc], grace=STOP_GRACE_S)
        out = log.read_text()
        expect(code == 143, f"exit {code} after SIGTERM, not 143: {last_line(out)}")
        stopped = re.findall(r"checkpoint: iteration (\d+),", out)
        expect(int(stopped[-1]) < self.sizes.long_iterations, "the run ended before the stop reached it")
        run = self.workdir / "runs_stop" / "stop"
        expect((run / "checkpoint.pt").exists(), "no checkpoint after the stop")
        if not self.args.cpu:
            shutil.copytree(run, self.workdir / "runs_stop" / "stop_cpu")
        self.figures["stopped_at_iteration"] = int(stopped[-1])
        return f"exit 143 after iteration {stopped[-1]} of {self.sizes.long_iterations}, checkpoint written"

    def resume_cpu(self, end: float) -> str:
        return self.resume("stop_cpu", "--no-cuda", end)

    def resume(self, name: str, device_flag: str, end: float) -> str:
        flags = (device_flag, "--run-name", name, "--resume", "--checkpoint-interval", "0")
        args = self.ppo("runs_stop", self.sizes.long_iterations, *flags, num_steps=self.long_steps)
        m = self.run([sys.executable, *args], end)
        expect(m.returncode == 0, f"exit {m.returncode}: {last_line(m.output)}")
        resumed = re.search(r"resuming from iteration (\d+)", m.output)
        expect(resumed is not None, "no 'resuming from iteration' line")
        return f"resumed at iteration {resumed[1]} {device_flag}, ran to the end in {m.wall_s:.0f} s"

    def evaluate(self, end: float) -> str:
        model = self.workdir / "runs_train" / "train" / "ppo_atari.cleanrl_model"
        expect(model.exists(), "no model (the training step failed)")
        command = [sys.executable, "-m", "cleanrl_utils.evals.ppo_eval", "--model-path", str(model)]
        command += ["--eval-episodes", "1", "--max-steps", str(EVAL_MAX_STEPS), self.device_flag()]
        m = self.run(command, end)
        expect(m.returncode == 0, f"exit {m.returncode}: {last_line(m.output)}")
        return last_line(m.output)

    def host_syncs(self, end: float) -> str:
        syncs = self.ppo("runs_syncs", 2, self.device_flag(), num_steps=self.long_steps)
        command = [sys.executable, "-m", "benchmark.lab.host_syncs", *syncs]
        m = self.run(command, end)
        found = HOST_SYNCS.findall(m.output)
        expect(m.returncode == 0 and bool(found), f"exit {m.returncode}: {last_line(m.output)}")
        rows = [
            {"rollout_step": float(a), "minibatch": float(b), "iteration_rest": float(c), "how": how}
            for a, b, c, how in found
        ]
        self.figures["host_syncs"] = rows
        return "; ".join(
            f"{r['rollout_step']:g} per rollout step, {r['minibatch']:g} per minibatch, "
            f"{r['iteration_rest']:g} per iteration besides ({r['how']})"
            for r in rows
        )

    def torchrun_ranks(self, ranks: int, end: float) -> str:
        """The multi-GPU script under torchrun with --save-model, each rank run by `rank_params`, which hashes the
        parameters the rank ended with (and rank 0 the saved model): one model on all ranks, and the one saved."""
        from benchmark.lab.rank_params import MODEL_HASH, rank_hashes
        from benchmark.lab.throughput import logged_sps

        backend = ["--no-cuda"] if self.args.cpu else (["--backend", "nccl"] if ranks == 1 else [])
        runs = f"runs_torchrun{ranks}"
        flags = (*backend, "--save-model", "--run-name", "torchrun")
        args = self.ppo(runs, self.sizes.sps_iterations, *flags, script=MULTIGPU_SCRIPT, num_steps=self.long_steps)
        hashes, model = self.workdir / f"params_torchrun{ranks}", self.workdir / runs / "torchrun" / MULTIGPU_MODEL
        m = self.run(
            self.torchrun(ranks, "-m", "benchmark.lab.rank_params", str(hashes), "--model", str(model)) + args, end
        )
        expect(m.returncode == 0, f"exit {m.returncode}: {last_line(m.output)}")
        world = re.search(r"world size (\d+) \((\w+), (\w+)\)", m.output)
        expect(world is not None, "no 'world size' line")
        found = rank_hashes(hashes)
        expect(sorted(found) == list(range(ranks)), f"parameter hashes of ranks {sorted(found)}, not of all {ranks}")
        expect(len(set(found.values())) == 1, f"the ranks' parameters differ: {found}")
        saved = (hashes / MODEL_HASH).read_text().strip() if (hashes / MODEL_HASH).exists() else None
        expect(saved == found[0], f"the saved model ({saved}) is not what the ranks ended with ({found[0]})")
        sps, steady = logged_sps(str(self.workdir / runs))
        self.figures[f"torchrun_{ranks}"] = dict(backend=world[2], device=world[3], sps=sps, steady_sps=steady)
        self.figures[f"torchrun_{ranks}"].update(gpu_percent=m.gpu_percent, params_sha256=found[0])
        note = re.search(r"^note: local ranks.*$", m.output, re.M)
        same = "the saved model is the rank's" if ranks == 1 else f"the {ranks} ranks' parameters identical, as saved"
        return f"{ranks} rank(s), {world[2]} on {world[3]}, {steady or sps or 0:,.0f} steady SPS, {same}" + (
            f"; {note[0]}" if note else ""
        )

    def killed_worker(self, end: float) -> str:
        log = self.workdir / "elastic.log"
        flags = ["--no-cuda"] if self.args.cpu else []
        flags += ["--checkpoint-interval", "1"]
        args = self.ppo(
            "runs_elastic", self.sizes.long_iterations, *flags, script=MULTIGPU_SCRIPT, num_steps=self.long_steps
        )
        proc = self.start_logged(self.torchrun(2, "--max-restarts=1") + args, log)
        try:
            wait_for(log, "checkpoint: iteration 1,", proc, self.share(end, 2))  # the restart's start takes as long
            workers = [p for p in psutil.Process(proc.pid).children(recursive=True) if p.environ().get("RANK") == "1"]
            expect(len(workers) >= 1, "no worker of rank 1 found")
            workers[0].send_signal(signal.SIGKILL)
            code = self.finish(proc, self.share(end))
        finally:
            stop_process_groups([proc], grace=STOP_GRACE_S)
        out = log.read_text()
        resumed = re.search(r"resuming from iteration (\d+) .*\(torchrun restart 1\)", out)
        expect(code == 0 and resumed is not None, f"exit {code}: {last_line(out)}")
        return f"rank 1 killed; torchrun restarted the ranks, resumed at iteration {resumed[1]}, finished"

    def stop_resume_ranks(self, end: float) -> str:
        log = self.workdir / "stop2.log"
        flags = ["--no-cuda"] if self.args.cpu else []
        flags += ["--run-name", "stop2", "--checkpoint-interval", "1"]
        args = self.ppo(
            "runs_stop2", self.sizes.long_iterations, *flags, script=MULTIGPU_SCRIPT, num_steps=self.long_steps
        )
        proc = self.start_logged(self.torchrun(2) + args, log)
        try:
            wait_for(log, "checkpoint: iteration 1,", proc, self.share(end, 2))  # the resume's start takes as long
            stop_s = float("inf") if self.args.cpu else STOP_GRACE_S + 10  # 10 s for torchrun's stop on a GPU
            code = self.stop_logged(proc, min(end, time.monotonic() + stop_s))
        finally:
            stop_process_groups([proc], grace=STOP_GRACE_S)
        stopped = re.search(r"stopped at global step (\d+)", log.read_text())
        expect(
            code != 0 and stopped is not None, f"exit {code}, no 'stopped at global step': {last_line(log.read_text())}"
        )
        m = self.run(self.torchrun(2) + args + ["--resume"], end)
        expect(
            m.returncode == 0 and "resuming from iteration" in m.output, f"exit {m.returncode}: {last_line(m.output)}"
        )
        return f"2 ranks stopped at global step {stopped[1]} (torchrun exit {code}), resumed and finished"

    # ------------------------------------------------------------ throughput

    def memory_formats(self, end: float) -> str:
        command = [sys.executable, "-m", "benchmark.lab.throughput", "--network-only", "--no-compile"]
        command += ["--num-envs", str(self.sizes.num_envs), "--seconds", str(self.sizes.network_seconds)]
        command += ["--forms", "default", "channels_last"]
        m = self.run(command, end)
        expect(m.returncode == 0, f"exit {m.returncode}: {last_line(m.output)}")
        rows = [r for r in json.loads(m.output.strip().splitlines()[-1]) if "error" not in r]
        best = {}
        for row in rows:
            if row["training"] > best.get(row["form"], {}).get("training", 0.0):
                best[row["form"]] = row
        self.figures["network"] = rows
        expect({"default", "channels_last"} <= set(best), f"forms measured: {sorted(best)}")
        return ", ".join(
            f"{form}: inference {r['inference']:,.0f}, training {r['training']:,.0f} samples/s"
            for form, r in best.items()
        )

    def sps_run(self, name: str, end: float, parts: int, *extra: str, num_envs: Optional[int] = None) -> dict[str, Any]:
        """A throughput run, the first of `parts` runs still to come before `end`."""
        from benchmark.lab.throughput import logged_sps

        runs = f"runs_sps_{name}"
        args = self.ppo(runs, self.sizes.sps_iterations, self.device_flag(), *extra, num_envs=num_envs)
        m = self.run([sys.executable, *args], end, parts)
        sps, steady = logged_sps(str(self.workdir / runs))
        expect(m.returncode == 0 and sps is not None, f"{name}: exit {m.returncode}: {last_line(m.output)}")
        row = dict(config=name, sps=sps, steady_sps=steady or sps, gpu_percent=m.gpu_percent)
        row.update(gpu_percents=m.gpu_percents, cpu_percent=m.machine_cpu_percent, wall_s=m.wall_s, flags=list(extra))
        row["num_envs"] = num_envs or self.sizes.num_envs
        self.figures.setdefault("sps", []).append(row)
        return row

    def backend_flags(self, backend: str) -> list[str]:
        return ["--vector-env", backend] + (
            ["--env-threads", "2" if self.args.cpu else "16"] if backend == "envpool" else []
        )

    def backends(self, end: float) -> str:
        """sync and ale, and envpool where it is installed (an optional extra: skipped with a note, not failed)."""
        backends = ["sync", "ale"] + (["envpool"] if envpool_installed() else [])
        rows = [self.sps_run(b, end, len(backends) - i, *self.backend_flags(b)) for i, b in enumerate(backends)]
        fastest = max(rows, key=lambda r: r["steady_sps"])
        self.figures["fastest_backend"] = fastest["config"]
        note = "" if "envpool" in backends else "; envpool not installed: skipped"
        self.figures["skipped_backends"] = [] if "envpool" in backends else ["envpool"]
        return ", ".join(f"{r['config']} {r['steady_sps']:,.0f}" for r in rows) + " steady SPS" + note

    def compiled(self, end: float) -> str:
        backend = self.figures.get("fastest_backend", "ale")
        row = self.sps_run(f"{backend}_compile", end, 1, *self.backend_flags(backend), "--compile")
        eager = next((r for r in self.figures.get("sps", []) if r["config"] == backend), None)
        than = f" (eager {eager['steady_sps']:,.0f})" if eager else ""
        return f"{backend} --compile {row['steady_sps']:,.0f} steady SPS{than}"

    def many_envs(self, end: float) -> str:
        backend = self.figures.get("fastest_backend", "ale")
        counts = self.sizes.many_envs
        rows = [
            self.sps_run(f"{backend}_{n}envs", end, len(counts) - i, *self.backend_flags(backend), num_envs=n)
            for i, n in enumerate(counts)
        ]
        return ", ".join(f"{r['config']} {r['steady_sps']:,.0f}" for r in rows) + " steady SPS"

    def bf16(self, end: float) -> str:
        """The fastest eager run so far again, as float32, with --bf16 and as float32 (``BF16_RUNS``). Eager: a
        --compile run would spend most of the step compiling, three times."""
        rows = list(self.figures.get("sps", []))
        eager = [r for r in rows if "--compile" not in r["flags"]]
        expect(bool(eager), "no eager throughput run to take the configuration from")
        fastest = max(eager, key=lambda r: r["steady_sps"])
        compiled = [r for r in rows if "--compile" in r["flags"] and r["steady_sps"] > fastest["steady_sps"]]
        config, flags, num_envs = fastest["config"], fastest["flags"], fastest["num_envs"]
        runs = {
            arm: self.sps_run(f"{config}_{arm}", end, len(BF16_RUNS) - i, *flags, *extra, num_envs=num_envs)
            for i, (arm, extra) in enumerate(BF16_RUNS)
        }
        float32 = [runs[arm]["steady_sps"] for arm in ("float32_before", "float32_after")]
        bf16 = runs["bf16"]["steady_sps"]
        ratio = bf16 / (sum(float32) / 2)
        self.figures["bf16"] = {
            "config": config,
            "flags": flags,
            "num_envs": num_envs,
            "rows": list(runs),
            "float32_steady_sps": float32,
            "bf16_steady_sps": bf16,
            "ratio": ratio,
        }
        note = f"; {compiled[0]['config']} was faster, eager runs are timed" if compiled else ""
        return (
            f"{config}: float32 {float32[0]:,.0f}, --bf16 {bf16:,.0f}, float32 {float32[1]:,.0f} steady SPS: "
            f"--bf16 {ratio:.2f}x float32{note}"
        )

    def gpu_use(self, end: float) -> str:
        rows = self.figures.get("sps", [])
        expect(bool(rows), "no throughput run to read it from")
        fastest = max(rows, key=lambda r: r["steady_sps"])
        self.figures["gpu_use_of_fastest"] = {
            "config": fastest["config"],
            "gpu_percent": fastest["gpu_percent"],
            "gpu_percents": fastest["gpu_percents"],
        }
        if self.args.cpu:
            return f"no GPU in --cpu mode (fastest run: {fastest['config']})"
        expect(fastest["gpu_percent"] is not None, "no GPU sample during the fastest run")
        return f"{fastest['gpu_percent']:.0f}% during {fastest['config']} (mean of nvidia-smi samples every 0.5 s)"

    # ------------------------------------------------------------ report

    def write(self, out_dir: Path) -> Path:
        name = (
            re.sub(r"[^A-Za-z0-9]+", "-", self.gpus[0].name).strip("-")
            if self.gpus
            else ("cpu" if self.args.cpu else "unknown")
        )
        out_dir.mkdir(parents=True, exist_ok=True)
        results = {
            "mode": "cpu" if self.args.cpu else "gpu",
            "gpus": [gpu.__dict__ for gpu in self.gpus],
            "budget_s": self.args.budget or (None if self.args.cpu else BUDGET_S),
            "duration_s": round(time.monotonic() - self.start, 1),
            "stopped_by": self.stopped,
            "steps": self.steps,
            "figures": self.figures,
            "sizes": self.sizes.__dict__,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        }
        (out_dir / f"gpu_{name}.json").write_text(json.dumps(results, indent=1, default=str))
        passed = sum(s["ok"] for s in self.steps)
        planned = len(self.plan())
        lines = [
            f"# GPU check: `{name}`",
            "",
            f"Written by `bash benchmark/gpu_check.sh{' --cpu' if self.args.cpu else ''}` on {results['date']}, "
            f"{results['duration_s']:.0f} s{f' of a {self.budget:.0f} s budget' if self.budget < float('inf') else ''}; "
            f"{passed} of {planned} steps "
            f"passed. Sizes: {self.sizes.num_envs} envs x {self.sizes.num_steps} steps, throughput runs of "
            f"{self.sizes.sps_iterations} iterations (steady SPS: after the first). Figures in "
            f"`gpu_{name}.json`.",
            "",
        ]
        if self.stopped:
            lines += [
                f"**Stopped by {self.stopped}: {planned - len(self.steps)} of the {planned} steps did not run.**",
                "",
            ]
        elif len(self.steps) < planned:
            lines += [
                f"**{planned - len(self.steps)} of the {planned} steps did not run: they need a CUDA device.**",
                "",
            ]
        if self.args.cpu:
            lines += [
                "**`--cpu` mode: every step on CPU with tiny sizes and `torch.compile` disabled; a check of the "
                "tool, not a measurement.**",
                "",
            ]
        lines += ["| step | result | s | limit s | |", "|---|---|---|---|---|"]
        lines += [
            f"| {s['step']} | {'PASS' if s['ok'] else 'FAIL'} | {s['seconds']:.0f} | {s['limit_s']:.0f} | "
            f"{s['summary'].replace('|', '/')} |"
            for s in self.steps
        ]
        if self.figures.get("sps"):
            lines += ["", "| throughput run | SPS | steady SPS | GPU % | CPU % (machine) |", "|---|---|---|---|---|"]
            for r in self.figures["sps"]:
                gpu = "-" if r["gpu_percent"] is None else f"{r['gpu_percent']:.0f}"
                cpu = "-" if r["cpu_percent"] is None else f"{r['cpu_percent']:.0f}"
                lines.append(f"| {r['config']} | {r['sps']:,.0f} | {r['steady_sps']:,.0f} | {gpu} | {cpu} |")
        if self.figures.get("bf16"):
            b = self.figures["bf16"]
            rows = ", ".join(f"`{b['config']}_{arm}`" for arm in b["rows"])
            lines += [
                "",
                f"bf16 against float32 on `{b['config']}` ({b['num_envs']} envs), the rows {rows} run in "
                f"that order: --bf16 gave {b['ratio']:.2f}x the steady SPS of the float32 runs' mean.",
            ]
        lines += ["", "```", self.figures.get("nvidia_smi", "").strip() or "(no nvidia-smi)", "```", ""]
        path = out_dir / f"gpu_{name}.md"
        path.write_text("\n".join(lines))
        return path


def main(args: Args) -> int:
    if args.budget is not None and args.budget <= 0:
        raise SystemExit(f"error: --budget must be positive, got {args.budget}")
    if not args.cpu and not args.out:
        raise SystemExit("error: --out FOLDER is required: the folder the report goes to")
    if not args.cpu and shutil.which("nvidia-smi") is None:
        raise SystemExit(
            "error: torch sees no CUDA device here (no nvidia-smi); `--cpu` checks this tool on CPU instead"
        )
    out_dir = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="gpu_check_report_"))
    check = Check(args)
    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        check.all_steps()
    except Stopped as exc:
        check.stopped = str(exc)
        check.stop_runs()
    finally:
        for sig in previous:  # the report is written whatever comes now
            signal.signal(sig, signal.SIG_IGN)
        path = check.write(out_dir)
        shutil.rmtree(check.workdir, ignore_errors=True)
    failed = [s["step"] for s in check.steps if not s["ok"]]
    print(
        f"wrote {path} ({len(check.steps) - len(failed)} of {len(check.plan())} steps passed, "
        f"{time.monotonic() - check.start:.0f} s)",
        flush=True,
    )
    if check.stopped:
        return 128 + signal.Signals[check.stopped]
    return 1 if failed or len(check.steps) < len(check.plan()) else 0


if __name__ == "__main__":
    sys.exit(main(tyro.cli(Args)))
