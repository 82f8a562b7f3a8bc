"""Sampling and training throughput of the PPO Atari stack, in one run (driven by benchmark/throughput.sh).

Measures on this machine: the physical bound (raw emulator frames/s on one core x usable cores / frame skip 4, and
the share of it one preprocessing thread delivers); env-only steps/s of every backend; the Nature CNN's inference and
training samples/s per form (memory format, bf16, compile), whose fastest forms give the compute bound of PPO,
``1 / (1/inference + epochs/training)``; end-to-end SPS of ``cleanrl/ppo_atari.py`` per backend with its time split,
CPU, GPU and memory use, then repeated runs of the fastest backend between fresh measurements of the bound, --bf16
against float32, and spinning OpenMP workers and a loaded machine; 1 vs 2 torchrun ranks. Everything runs as the
scripts run (their OpenMP policy, allocator settings and threads). Writes ``{out_dir}/throughput_{tag}.md``, its
JSON and PNGs; the network is timed in a child process (``--network-only``), so this one never initialises CUDA.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import cleanrl_utils  # noqa: F401  (first: sets the OpenMP thread policy before torch loads)
import numpy as np
import psutil
import torch
import tyro

from benchmark.lab.measured import cpu_name, failed_row, file_tag, md_table, repo_env, run_measured, visible_gpus
from cleanrl_utils.cpu import keep_freed_memory
from benchmark.lab.placement import plan_threads, usable_cores, use_threads
from cleanrl_utils.plot import RunCurve, load_run
from cleanrl_utils.vector_envs import FRAME_SKIP, ale_game, envpool_available, make_atari_vector_env

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "cleanrl" / "ppo_atari.py"
MULTIGPU_SCRIPT = REPO / "cleanrl" / "ppo_atari_multigpu.py"
TARGET = 0.85
SLICED_FORM = "channels_last+slices"  # a form no longer timed, shown where an older JSON has it (--report-only)


@dataclass
class Args:
    out_dir: str = "docs/benchmarks"
    """where the markdown table and the PNG plots go"""
    tag: Optional[str] = None
    """name of this machine in the file names (default: cpu{cores} or the GPU's name)"""
    env_id: str = "BreakoutNoFrameskip-v4"
    """the game"""
    env_counts: list[int] = field(default_factory=lambda: [8, 16, 32])
    """env counts of the env-only measurement"""
    backends: list[str] = field(default_factory=lambda: ["sync", "async", "ale", "envpool"])
    """vector env backends to measure (envpool is left out when not installed)"""
    seconds: float = 2.0
    """length of each env-only and network measurement"""
    num_envs: int = 8
    """envs of the end-to-end runs and batch of the inference measurement (ppo_atari.py's default)"""
    update_epochs: int = 4
    """PPO epochs for the compute bound (ppo_atari.py's default)"""
    e2e_iterations: int = 6
    """PPO iterations of each end-to-end run (of num_envs x 128 steps); the steady-state SPS leaves out the first"""
    compile: bool = True
    """also time torch.compile'd forms of the network"""
    multigpu: bool = True
    """also run ppo_atari_multigpu.py with 1 and 2 torchrun ranks"""
    network_only: bool = False
    """only time the network forms (on cuda when there is a GPU) and print them as one JSON line"""
    report_only: bool = False
    """measure nothing: rewrite the report and plots of ``--tag`` from its JSON in ``--out-dir``"""
    forms: list[str] = field(default_factory=list)
    """time only these network forms (default: all)"""
    e2e_repeats: int = 5
    """runs of the fastest plain backend, each between two fresh measurements of the combined bound (the target is
    judged on the median of their ratios)"""
    bf16: bool = True
    """also run the fastest plain configuration with and without --bf16, in turns (the learning phase compared)"""
    loaded: bool = True
    """also run the fastest plain configuration with spinning OpenMP workers, and both with one busy process per core"""


# ---------------------------------------------------------------- machine


def machine() -> dict[str, Any]:
    import ale_py
    import gymnasium

    info = {
        "cpu": cpu_name(),
        "cores": usable_cores(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "ale-py": ale_py.__version__,
        "gymnasium": gymnasium.__version__,
        "gpu": ", ".join(gpu.name for gpu in visible_gpus()) or "none",
        "instruction set": instruction_set(),
        "load_average_at_start": os.getloadavg(),
    }
    if envpool_available():
        import envpool

        info["envpool"] = envpool.__version__
    return info


def instruction_set() -> str:
    """The CPU's vector instruction set as torch dispatches to it, and whether it has native bfloat16 (--bf16)."""
    native = ["AMX"] if torch.cpu._is_amx_tile_supported() else []
    native += ["AVX512-BF16"] if torch.cpu._is_avx512_bf16_supported() else []
    bf16 = ", ".join(native) or "none (--bf16 is emulated here)"
    return f"{torch.backends.cpu.get_cpu_capability()}; native bfloat16: {bf16}"


def timed_rate(fn: Callable[[], int], seconds: float, warmup: float = 0.5) -> float:
    """Items per second of repeated ``fn()`` calls (each returns how many items it did) over ``seconds``."""
    end = time.perf_counter() + warmup
    while time.perf_counter() < end:
        fn()
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        done += fn()
    return done / (time.perf_counter() - start)


# ---------------------------------------------------------------- environments


def emulator_frames_per_second(env_id: str, seconds: float) -> float:
    """Raw emulator frames/s on one core: ALEInterface.act with random actions, no preprocessing; a game that ends
    goes back to the saved state of its start (the bound leaves resets out)."""
    import ale_py
    from ale_py import roms

    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    ale = ale_py.ALEInterface()
    ale.setInt("random_seed", 0)
    ale.loadROM(roms.get_rom_path(ale_game(env_id)))
    actions = ale.getMinimalActionSet()
    rng = np.random.default_rng(0)
    choice = [actions[i] for i in rng.integers(0, len(actions), 4096)]
    start = ale.cloneState()

    def run() -> int:
        for action in choice[:256]:
            ale.act(action)
            if ale.game_over():
                ale.restoreState(start)
        choice.append(choice.pop(0))
        return 256

    return timed_rate(run, seconds)


def env_steps_per_second(
    backend: str, env_id: str, num_envs: int, seconds: float, env_threads: Optional[int] = None
) -> float:
    """Agent steps/s of a backend with random actions; a native pool gets ``env_threads`` stepping threads
    (default: as the scripts size it)."""
    if env_threads is None:
        env_threads = plan_threads(num_envs).env_threads
    envs = make_atari_vector_env(backend, env_id, num_envs, env_threads=env_threads)
    try:
        envs.reset(seed=0)
        actions = np.random.default_rng(0).integers(0, envs.single_action_space.n, (64, num_envs))
        step = [0]

        def run() -> int:
            envs.step(actions[step[0] % 64])
            step[0] += 1
            return num_envs

        return timed_rate(run, seconds)
    finally:
        envs.close()


# ---------------------------------------------------------------- network


def script_module(name: str):
    """ppo_atari.py loaded as a module under `name` (its main part does not run)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_agent_class():
    return script_module("ppo_atari_for_throughput").Agent


class _Spaces:  # what Agent reads from the vector env
    class single_action_space:  # noqa: N801
        n = 4


def in_memory_format(agent: torch.nn.Module, memory_format: torch.memory_format) -> torch.nn.Module:
    """The script's ``agent`` with its convolutions and float input in ``memory_format`` (channels_last: as it is)."""
    if memory_format == torch.channels_last:
        return agent
    agent.to(memory_format=memory_format)
    network = agent.network

    def hidden(x: torch.Tensor) -> torch.Tensor:  # as the script's: a float copy, scaled in place
        return network(x.to(torch.float32, memory_format=memory_format, copy=True).div_(255.0))

    agent.hidden = hidden
    return agent


def network_forms(
    num_envs: int, try_compile: bool, only: Sequence[str] = ()
) -> list[tuple[str, Callable[[], int], Callable[[], int], float]]:
    """(name, inference step, training step, seconds of the first calls) per form (``only`` these, if given);
    failed forms as errors."""
    agent_class = load_agent_class()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    specs = [("default", torch.contiguous_format, False), ("channels_last", torch.channels_last, False)]
    specs += [(BF16_FORM, torch.channels_last, False)] + [
        ("channels_last+compile", torch.channels_last, True)
    ] * try_compile
    specs = [spec for spec in specs if not only or spec[0] in only]
    rng = np.random.default_rng(0)
    frames_nchw = torch.as_tensor(rng.integers(0, 255, (num_envs, 4, 84, 84), dtype=np.uint8))
    batch_nchw = torch.as_tensor(rng.integers(0, 255, (256, 4, 84, 84), dtype=np.uint8), device=device)
    batch_actions = torch.as_tensor(rng.integers(0, 4, 256), device=device)
    forms = []
    for name, memory_format, compiled in specs:
        torch.manual_seed(0)
        agent = in_memory_format(agent_class(_Spaces, bf16=name == BF16_FORM), memory_format).to(device)
        # as the scripts compile it: one graph per batch shape
        forward = torch.compile(agent.get_action_and_value, dynamic=False) if compiled else agent.get_action_and_value
        optimizer = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5, fused=True)  # as in the script

        # every form gets the frames as the script's rollout and minibatches feed them, plain NCHW uint8: the
        # conversion to the form's float layout is part of each form's forward, as it is of the script's
        def infer(forward=forward) -> int:  # as in the rollout: frames up, actions back
            with torch.inference_mode():
                action, _, _, _ = forward(frames_nchw.to(device))
                action.cpu()
            return num_envs

        def train(forward=forward, agent=agent, optimizer=optimizer) -> int:
            _, logprob, entropy, value = forward(batch_nchw, batch_actions)
            loss = -logprob.mean() - 0.01 * entropy.mean() + 0.5 * (value**2).mean()
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
            optimizer.step()
            sync()
            return 256

        start = time.perf_counter()
        try:
            infer()  # compile (if any) happens here
            use_threads(plan_threads(num_envs).torch_threads)
            train()
        except Exception as exc:  # compile needs a C compiler and may fail on some machines: report, go on
            forms.append((name, None, None, repr(exc)[:200]))
            continue
        forms.append((name, infer, train, time.perf_counter() - start))
    return forms


def threads_text(row: dict[str, Any]) -> str:
    """A network row's threads in words (the sliced form of older reports: one torch thread per slice)."""
    if row["form"] == SLICED_FORM:
        return f"{row['threads']} slices of 1 thread"
    return f"{row['threads']} thread(s)"


def network_rates(
    num_envs: int, seconds: float, try_compile: bool, rounds: int = 3, only: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Inference and training samples/s of the Nature CNN per form and torch thread count, the forms timed in turns
    ``rounds`` times each."""
    cores = plan_threads(num_envs).cores
    forms = network_forms(num_envs, try_compile, only)
    done: dict[tuple[str, int], list[float]] = {}
    for _ in range(rounds):
        for name, infer, train, _ in forms:
            for threads in sorted({1, cores}) if infer is not None else ():
                rates = done.setdefault((name, threads), [0.0, 0.0])
                use_threads(threads)
                rates[0] += timed_rate(infer, seconds / rounds, warmup=0.1) / rounds
                rates[1] += timed_rate(train, seconds / rounds, warmup=0.1) / rounds
    use_threads(cores)
    rows = []
    for name, infer, _, first in forms:
        if infer is None:
            rows.append({"form": name, "threads": 0, "inference": 0.0, "training": 0.0, "error": first})
            continue
        for threads in sorted({1, cores}):
            inference, training = done[(name, threads)]
            rows.append({"form": name, "threads": threads, "inference": inference, "training": training})
            rows[-1]["warmup_s"] = first
    return rows


# ---------------------------------------------------------------- end to end


PHASES = ("env", "inference", "learn")  # the scripts' perf/<phase>_seconds scalars


def _logged(runs_dir: str, tag: str = "charts/SPS") -> Optional[RunCurve]:
    """``tag`` of the first run under ``runs_dir`` that logged ``charts/SPS`` (only rank 0 logs), or None."""
    for run_dir in sorted(p for p in Path(runs_dir).glob("*") if p.is_dir()):
        if isinstance(load_run(str(run_dir), "charts/SPS"), RunCurve):
            curve = load_run(str(run_dir), tag)
            return curve if isinstance(curve, RunCurve) else None
    return None


def logged_sps(runs_dir: str) -> tuple[Optional[float], Optional[float]]:
    """(SPS, steady-state SPS) of the run logged under ``runs_dir``: the last ``charts/SPS`` value, and the steps/s
    after the first iteration from the events' wall times (the one-off start left out)."""
    sps = _logged(runs_dir)
    if sps is None:
        return None, None
    steady = None
    if len(sps.steps) >= 2 and sps.times[-1] > sps.times[0]:
        steady = float((sps.steps[-1] - sps.steps[0]) / (sps.times[-1] - sps.times[0]))
    return float(sps.values[-1]), steady


def logged_phases(runs_dir: str, skip: int = 0) -> Optional[tuple[int, dict[str, float]]]:
    """(steps, seconds per phase) of the logged iterations after the first ``skip`` (1: those of the steady SPS), from
    the run's ``perf/<phase>_seconds`` events. None without more than ``skip`` logged iterations."""
    sps = _logged(runs_dir)
    phases = {phase: _logged(runs_dir, f"perf/{phase}_seconds") for phase in PHASES}
    if sps is None or len(sps.steps) <= skip or None in phases.values():
        return None
    sums = {phase: float(curve.values[skip:].sum()) for phase, curve in phases.items()}
    return int(sps.steps[-1] - (sps.steps[skip - 1] if skip else 0)), sums


def measured_run(
    command: list[str], workdir: str, timeout: float = 300, env: Optional[dict[str, str]] = None
) -> tuple[str, Any]:
    """Output and measurements of one run (a failed run's output is printed)."""
    m = run_measured(command, workdir, timeout=timeout, env=env)
    if m.returncode != 0:
        print(f"  failed ({m.returncode}): {' '.join(command)}\n{m.output[-1500:]}")
    return m.output, m


def bounds_of(physical: float, network: list[dict[str, Any]], epochs: int) -> dict[str, Any]:
    """The compute bound of PPO from the fastest network forms (one inference and ``epochs`` training passes per
    agent step), and the combined bound: the physical env bound and the compute bound one after the other."""
    ok = [r for r in network if "error" not in r and r["form"] != BF16_FORM]  # the bounds of CleanRL's float32
    best_inf = max(ok, key=lambda r: r["inference"])
    best_train = max((r for r in ok if r["training"] is not None), key=lambda r: r["training"])
    compute = 1 / (1 / best_inf["inference"] + epochs / best_train["training"])
    return {
        "physical": physical,
        "inference": best_inf["inference"],
        "inference_form": f"{best_inf['form']}, {threads_text(best_inf)}",
        "training": best_train["training"],
        "training_form": f"{best_train['form']}, {threads_text(best_train)}",
        "forms": sorted({best_inf["form"], best_train["form"]}),
        "compute": compute,
        "combined": 1 / (1 / physical + 1 / compute),
    }


def bounds_now(args: Args, forms: Sequence[str], cores: int) -> dict[str, Any]:
    """The combined bound measured again: raw emulation on one core and the network's fastest ``forms``."""
    physical = emulator_frames_per_second(args.env_id, args.seconds) * cores / FRAME_SKIP
    network = network_rates_apart(args, forms)
    return dict(bounds_of(physical, network, args.update_epochs), network=network)


def script_form(num_envs: int, cores: int) -> tuple[str, int]:
    """The form and thread count of the scripts' rollout inference on CPU: eager channels_last, the whole batch on
    the torch threads of their plan (all ``cores``)."""
    return "channels_last", plan_threads(num_envs, cores=cores).torch_threads


def script_form_rate(network: list[dict[str, Any]], args: Args, cores: int) -> Optional[float]:
    """Inference samples/s of the scripts' own form (``script_form``), if timed."""
    form = script_form(args.num_envs, cores)
    return next((r["inference"] for r in network if "error" not in r and (r["form"], r["threads"]) == form), None)


def repeated_end_to_end(backend: str, args: Args, workdir: str, forms: Sequence[str]) -> list[dict[str, Any]]:
    """``backend`` run ``args.e2e_repeats`` times, each between two fresh measurements of the combined bound: each
    row gets its bound (the mean of the two) and, per phase, ms per agent step in the loop and alone."""
    cores = usable_cores()
    bounds = [bounds_now(args, forms, cores)]
    rows = []
    for k in range(args.e2e_repeats):
        row = end_to_end(backend, args, workdir, label=f"repeat {k + 1}")
        row["configuration"] = backend
        bounds.append(bounds_now(args, forms, cores))
        print(f"repeat {row} between bounds {bounds[-2]['combined']:,.0f} and {bounds[-1]['combined']:,.0f}")
        if "sps" not in row:
            rows.append(row)
            continue
        around = bounds[-2:]
        row["bound"] = float(np.mean([b["combined"] for b in around]))
        row["bounds"] = [b["combined"] for b in around]
        row["alone_ms"] = {
            "env": 1e3 * float(np.mean([1 / b["physical"] for b in around])),
            "inference": 1e3 * float(np.mean([1 / b["inference"] for b in around])),
            "learn": 1e3 * float(np.mean([args.update_epochs / b["training"] for b in around])),
        }
        steps, seconds = row.get("steady_phases") or (row["steps"], row)  # the whole run if not logged
        row["loop_ms"] = {phase: 1e3 * seconds[phase] / steps for phase in ("env", "inference", "learn")}
        own = [script_form_rate(b["network"], args, cores) for b in around]
        if all(own):  # the inference target compares the loop with the form it runs
            row["alone_ms"]["inference_script_form"] = 1e3 * float(np.mean([1 / rate for rate in own]))
        rows.append(row)
    return rows


def end_to_end(backend: str, args: Args, workdir: str, extra=(), label="", extra_env=None, attempt=1) -> dict[str, Any]:
    """One run of the script; ``extra`` flags go to it and ``extra_env`` to its environment; they and ``label``
    (e.g. "loaded") are appended to the row's name. Runs of the same name need each their ``attempt``."""
    steps = args.e2e_iterations * args.num_envs * 128
    settings = [f"{key}={value}" for key, value in (extra_env or {}).items()]
    name = " ".join(filter(None, [backend, *extra, *settings, label]))
    runs = os.path.join(workdir, "runs_" + re.sub(r"[^A-Za-z0-9]+", "_", name) + f"_{attempt}")
    command = ppo_command(SCRIPT, backend, args.num_envs, steps, args.env_id, runs, *extra)
    out, m = measured_run(command, workdir, 300 if not label else 900, extra_env)
    row: dict[str, Any] = {"backend": name, "wall_s": m.wall_s, "steps": steps}
    sps, steady_sps = logged_sps(runs)
    whole = logged_phases(runs)
    if m.returncode != 0 or not sps or whole is None:
        return dict(row, error=last_line(out))
    logged_steps, phases = whole
    # the training loop's wall time: the script logs SPS as its steps over the seconds since the loop started
    seconds = logged_steps / sps
    row.update(sps=float(sps), steady_sps=steady_sps, steady_phases=logged_phases(runs, skip=1), seconds=seconds)
    row.update({phase: phases.get(phase, 0.0) for phase in PHASES}, cpu_percent=machine_cpu(m))
    row.update(gpu_percent=m.gpu_percent, peak_rss_mib=m.peak_rss_mib)
    row["other"] = max(0.0, seconds - row["env"] - row["inference"] - row["learn"])
    return row


def bf16_rows(backend: str, args: Args, workdir: str) -> list[dict[str, Any]]:
    """``backend`` with and without ``--bf16``, ``BF16_ROUNDS`` times in turns: each row the mean of its runs, with
    the learning phase's seconds per iteration after the first."""
    variants = {"float32": (), "--bf16": ("--bf16",)}
    runs = in_turns(
        variants,
        BF16_ROUNDS,
        lambda name, k: end_to_end(backend, args, workdir, variants[name], label="bf16 pair", attempt=k),
    )
    rows = []
    for name, done in runs.items():
        row = dict(mean_row(done), variant=name)
        if "sps" in row:
            phases = [r["steady_phases"] for r in done if r.get("steady_phases")]
            row["learn_s_per_iteration"] = float(np.mean([p[1]["learn"] * args.num_envs * 128 / p[0] for p in phases]))
        rows.append(row)
    return rows


@contextlib.contextmanager
def busy_cores(n: int) -> Iterator[None]:
    """``n`` processes that spin in Python while the block runs: one busy process per core is the loaded case."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


BF16_FORM = "channels_last+bf16"  # the scripts' --bf16: the trunk under bfloat16 autocast
BF16_ROUNDS = 3  # runs of each of float32 and --bf16, in turns
SPIN = {"GOMP_SPINCOUNT": "10000"}
"""a bounded spin of torch's OpenMP workers (libgomp), for comparison with the scripts' sleeping workers"""


LOADED_ROUNDS = 4  # rounds of the loaded runs


def in_turns(names: Sequence[str], rounds: int, run: Callable[[str, int], dict]) -> dict[str, list[dict[str, Any]]]:
    """``run(name, attempt)`` for every name, ``rounds`` times in turns, every other round in reverse order, so that a
    change of the machine's speed hits every variant alike."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for attempt in range(1, rounds + 1):
        for name in list(names)[:: 1 if attempt % 2 else -1]:
            runs[name].append(run(name, attempt))
    return runs


def loaded_rows(backend: str, args: Args, workdir: str) -> list[dict[str, Any]]:
    """``backend`` (already run with the defaults) with spinning workers (``SPIN``), then the defaults and the spin
    with one busy process per core alongside (this process's session, ``run_measured``), ``LOADED_ROUNDS`` times in
    turns: each loaded row is the mean of its runs (their steady SPS under ``steady_runs``)."""
    variants = {"defaults": {}, "spin": {"extra_env": SPIN}}
    rows = [end_to_end(backend, args, workdir, extra_env=SPIN)]
    with busy_cores(plan_threads(args.num_envs).cores):
        runs = in_turns(
            variants,
            LOADED_ROUNDS,
            lambda name, k: end_to_end(backend, args, workdir, label="loaded", attempt=k, **variants[name]),
        )
    return rows + [mean_row(done) for done in runs.values()]


def mean_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs of one configuration as one row: their mean figures (peak RSS: the largest), or the first failure."""
    failed = [r for r in runs if "sps" not in r]
    if failed:
        return failed[0]
    row = dict(runs[0], steady_runs=[steady(r) for r in runs], peak_rss_mib=max(r["peak_rss_mib"] for r in runs))
    for key in ("sps", "seconds", "env", "inference", "learn", "other", "cpu_percent", "wall_s"):
        if all(key in r for r in runs):
            row[key] = float(np.mean([r[key] for r in runs]))
    row["steady_sps"] = float(np.mean(row["steady_runs"]))
    return row


def ppo_command(script: Path, backend: str, num_envs: int, steps: int, env_id: str, runs: str, *extra: str):
    """A run of a training script (after the interpreter or torchrun's arguments)."""
    return [
        *(sys.executable, str(script), "--vector-env", backend, "--num-envs", str(num_envs)),
        *("--total-timesteps", str(steps), "--no-progress-bar", "--runs-dir", runs, "--env-id", env_id, *extra),
    ]


def ranks_command(ranks: int, backend: str, num_envs: int, steps: int, env_id: str, runs: str) -> list[str]:
    """ppo_atari_multigpu.py on ``ranks`` torchrun ranks, ``num_envs`` envs in all (also the seed claims' ranks)."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
    return (
        torchrun
        + ppo_command(MULTIGPU_SCRIPT, backend, num_envs, steps, env_id, runs, "--checkpoint-interval", "0")[1:]
    )


def machine_cpu(m: Any) -> float:
    return m.machine_cpu_percent if m.machine_cpu_percent is not None else float("nan")


def last_line(output: str) -> str:
    return output.strip().splitlines()[-1][:200] if output.strip() else "no output"


def multigpu_sps(ranks: int, backend: str, args: Args, workdir: str) -> dict[str, Any]:
    runs = os.path.join(workdir, f"runs_multigpu_{ranks}")
    steps = args.e2e_iterations * args.num_envs * 128
    out, m = measured_run(ranks_command(ranks, backend, args.num_envs, steps, args.env_id, runs), workdir)
    row = dict(ranks=ranks, backend=backend, wall_s=m.wall_s, gpu_percent=m.gpu_percent, cpu_percent=machine_cpu(m))
    sps, steady = logged_sps(runs)
    return dict(row, sps=sps, steady_sps=steady) if sps is not None else dict(row, error=last_line(out))


# ---------------------------------------------------------------- report


def preprocessing_share(physical: dict[str, float]) -> float:
    """Share of one core's raw emulation that one preprocessing thread delivers (see ``main``)."""
    return physical["preprocessed_per_thread"] * FRAME_SKIP / physical["frames_per_second"]


def fastest_plain(rows: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """The fastest end-to-end row of a backend with the scripts' defaults (not a variant: those have settings or
    labels after the backend's name), or None."""
    plain = [r for r in rows if "sps" in r and " " not in r["backend"]]
    return max(plain, key=steady) if plain else None


def repeated_backend(results: dict[str, Any], num_envs: int) -> Optional[str]:
    """The plain backend that the repeated, loaded and torchrun runs use: of the backends whose end-to-end row ran,
    the fastest in the env-only measurement at the end-to-end runs' env count (else the fastest end-to-end row). The
    backends differ end to end by their env phase, and one end-to-end row each moves with the machine's drift: in one
    report the Python backends' rows came out ahead of the native ones, whose env-only rates were 1.3-1.6x theirs."""
    ran = {r["backend"] for r in results["e2e"] if "sps" in r and " " not in r["backend"]}
    env_only = {
        b: rates[str(num_envs)] for b, rates in results.get("env", {}).items() if b in ran and rates.get(str(num_envs))
    }
    if env_only:
        return max(env_only, key=env_only.get)
    plain = fastest_plain(results["e2e"])
    return plain["backend"] if plain else None


def steady(row: dict[str, Any]) -> float:
    """A run's steady-state SPS (after its first iteration); its overall SPS if it logged too little to tell."""
    return row.get("steady_sps") or row["sps"]


def fmt(x: Optional[float], digits: int = 0) -> str:
    return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:,.{digits}f}"


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def write_report(results: dict[str, Any], args: Args, out_dir: Path, tag: str) -> Path:
    m = results["machine"]
    lines = [
        f"# Throughput on `{tag}`",
        "",
        f"Written by `benchmark/throughput.sh` ({results['written']}), "
        f"game {args.env_id}, {results['duration_s']:.0f} s in all.",
        "",
    ]
    lines += md_table(
        ["machine", ""],
        [[k, ", ".join(f"{x:.2f}" for x in v) if k.startswith("load_average") else v] for k, v in m.items()],
    )
    phys = results["physical"]
    lines += [
        "",
        "## Physical bound",
        "",
        "Raw emulator, one core, random actions, no preprocessing, no resets (a game that ends goes back to the "
        f"saved state of its start): **{phys['frames_per_second']:,.0f} frames/s** = "
        f"{phys['frames_per_second'] / FRAME_SKIP:,.0f} agent steps/s per core; x {m['cores']} cores / frame skip "
        f"{FRAME_SKIP} = **{phys['bound']:,.0f} agent steps/s**.",
        "",
    ]
    if "preprocessed_per_thread" in phys:
        share = preprocessing_share(phys)
        lines += [
            f"With the standard preprocessing (EnvPool's pool, 16 envs on ONE stepping thread, nothing else running): "
            f"{phys['preprocessed_per_thread']:,.0f} agent steps/s = **{share:.0%} of raw emulation per core**. The "
            "screen work of an agent step (two gray grabs, max-pool, resize to 84x84, frame stack) costs the rest, "
            "before any cost of running threads in parallel: a backend with this preprocessing can't be expected to "
            "reach a larger share of the physical bound.",
            "",
        ]
    lines += ["## Env only (agent steps/s, random actions)", ""]
    env_rows = [[b, *(fmt(rates.get(str(n))) for n in args.env_counts)] for b, rates in results["env"].items()]
    lines += md_table(["backend", *(f"{n} envs" for n in args.env_counts)], env_rows)
    lines += ["", f"## Network (Nature CNN; inference batch {args.num_envs}, training minibatch 256)", ""]
    lines += md_table(
        ["form", "torch threads", "inference samples/s", "training samples/s", "first call (s)"],
        [
            [r["form"], "-", f"failed: {r['error']}", "", ""]
            if "error" in r
            else [r["form"], threads_text(r), fmt(r["inference"]), fmt(r["training"]), f"{r['warmup_s']:.1f}"]
            for r in results["network"]
        ],
    )
    b = results["bounds"]
    form, threads = script_form(args.num_envs, results["machine"]["cores"])
    lines += [
        "",
        f"The scripts' form on CPU: {form} (eager), the whole batch on {threads} torch thread(s), all the "
        "cores the process may use, with sleeping OpenMP workers (`OMP_WAIT_POLICY=PASSIVE`) and glibc keeping "
        "freed memory, as every form here.",
    ]
    if any(row["form"] == SLICED_FORM for row in results["network"]):
        lines += [
            "",
            f"{SLICED_FORM}, for comparison (the scripts do not use it, and the lab no longer times it: "
            "[notes.md](../notes.md)): the batch in slices of at least 4 frames, one per core, each on one torch thread; it "
            "trains as channels_last does (the whole minibatch), which is not timed twice.",
        ]
    lines += [
        "",
        f"Fastest: inference {fmt(b['inference'])} samples/s ({b['inference_form']}), training "
        f"{fmt(b['training'])} samples/s ({b['training_form']}). Compute bound of PPO at {args.update_epochs} "
        f"epochs (one inference and {args.update_epochs} training passes per agent step): **{fmt(b['compute'])} "
        f"SPS**. Combined with the physical env bound, one after the other: **{fmt(b['combined'])} SPS**.",
        "",
        f"## End to end: `ppo_atari.py`, {args.num_envs} envs, default hyperparameters, "
        f"{args.e2e_iterations} iterations",
        "",
        "SPS: steps / seconds since the start, as the script logs it (`charts/SPS`, includes building the envs' first "
        "reset and the network's first calls); steady SPS: steps/s after the first iteration (from the wall times of "
        "the logged events), what a long run gets and what the bound describes. Seconds: whole run.",
        "",
    ]
    head = ["configuration", "SPS", "steady SPS", "steady, % of combined bound", "env s", "inference s"]
    head += ["learning s", "other s", "CPU %", "GPU %", "peak RSS MiB"]
    lines += md_table(
        head,
        [
            failed_row(len(head), r["backend"], r["error"])
            if "error" in r
            else [r["backend"], fmt(r["sps"]), fmt(r.get("steady_sps")), f"{100 * steady(r) / b['combined']:.0f}%"]
            + [f"{r[k]:.1f}" for k in ("env", "inference", "learn", "other")]
            + [fmt(r["cpu_percent"]), fmt(r["gpu_percent"]), fmt(r["peak_rss_mib"])]
            for r in results["e2e"]
        ],
    )
    repeats = results.get("repeats", [])
    if repeats:
        lines += [
            "",
            f"## End to end against the bound of the same minutes: `{repeats[0].get('configuration', '')}`, "
            f"{len(repeats)} runs",
            "",
            "A cloud VM's speed can drift 2x within minutes, so one run against a bound measured minutes earlier "
            "says little. Each run below sits between two fresh measurements of the combined bound (raw emulation, "
            f"and the network forms {', '.join(results.get('repeat_forms', []))}) and is judged against their mean; "
            "the end-to-end verdict is the median. Per phase, ms per agent step: in the loop (after the first iteration, "
            "as the steady SPS) / alone (the "
            "bound's part: raw emulation on all cores, the fastest inference, "
            f"{args.update_epochs} passes of the fastest training).",
            "",
        ]
        head = ["run", "bound before / after", "steady SPS", "% of bound", "env ms: loop / bound"]
        head += ["inference ms: loop / alone", "learning ms: loop / alone", "inference ms alone in the scripts' form"]
        rows = []
        for k, row in enumerate(repeats, 1):
            if "bound" not in row:
                rows.append(failed_row(len(head), k, row.get("error", "")))
                continue
            loop, alone = row["loop_ms"], row["alone_ms"]
            own = alone.get("inference_script_form")
            rows.append(
                [k, f"{fmt(row['bounds'][0])} / {fmt(row['bounds'][1])}", fmt(steady(row))]
                + [f"{100 * steady(row) / row['bound']:.0f}%"]
                + [f"{loop[p]:.3f} / {alone[p]:.3f} ({loop[p] / alone[p]:.2f}x)" for p in PHASES]
                + [f"{own:.3f} (loop: {loop['inference'] / own:.2f}x)" if own else "-"]
            )
        lines += md_table(head, rows)
    pair = results.get("bf16", [])
    if pair:
        lines += [
            "",
            f"## bfloat16: `{pair[0]['backend'].split(' ')[0]}` with and without `--bf16`, {BF16_ROUNDS} runs each in "
            "turns",
            "",
            f"Instruction set: {m.get('instruction set', 'unknown')}. Each row is the mean of its runs; learning s per "
            "iteration: the update's seconds per iteration after the first (`perf/learn_seconds`).",
            "",
        ]
        head = ["variant", "steady SPS per run", "steady SPS, mean", "vs float32", "learning s per iteration"]
        base, learn = pair[0], "learn_s_per_iteration"
        lines += md_table(
            [*head, "vs float32"],
            [
                failed_row(6, r["variant"], r.get("error", ""))
                if "sps" not in r
                else [r["variant"], " / ".join(fmt(v) for v in r["steady_runs"]), fmt(r["steady_sps"])]
                + [
                    f"{r['steady_sps'] / base['steady_sps']:.2f}x",
                    f"{r[learn]:.2f}",
                    f"{base[learn] / r[learn]:.2f}x faster",
                ]
                for r in pair
            ],
        )
    lines += ["", "## torchrun ranks: `ppo_atari_multigpu.py`", ""]
    if results["multigpu"]:
        lines += [f"{args.num_envs} envs in all (split over the ranks), same batch; the repeated runs' backend.", ""]
        lines += md_table(
            ["ranks", "backend", "SPS (all ranks)", "steady SPS", "CPU %", "GPU % (all visible)", "wall s"],
            [
                [r["ranks"], r["backend"], fmt(r.get("sps")) if "sps" in r else "failed: " + r["error"]]
                + [fmt(r.get("steady_sps")), fmt(r["cpu_percent"]), fmt(r.get("gpu_percent")), f"{r['wall_s']:.0f}"]
                for r in results["multigpu"]
            ],
        )
    else:
        lines.append("Not measured (`cleanrl/ppo_atari_multigpu.py` missing or `--no-multigpu`).")
    lines += ["", "## Targets (ratios within this run)", ""]
    lines += md_table(
        ["target", "measured", "verdict"],
        [[name, measured, verdict(ok) if ok is not None else "n/a"] for name, measured, ok in results["targets"]],
    )
    lines += ["", f"Load average at the end: {', '.join(f'{v:.2f}' for v in results['load_average_at_end'])}.", ""]
    lines += [f"![env-only steps/s](throughput_{tag}_env.png)", "", f"![end-to-end SPS](throughput_{tag}_e2e.png)", ""]
    path = out_dir / f"throughput_{tag}.md"
    path.write_text("\n".join(lines))
    (out_dir / f"throughput_{tag}.json").write_text(json.dumps(results, indent=1, default=str))
    return path


def plot(results: dict[str, Any], args: Args, out_dir: Path, tag: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    backends = list(results["env"])
    width = 0.8 / max(1, len(args.env_counts))
    for k, n in enumerate(args.env_counts):
        values = [results["env"][b].get(str(n), 0) or 0 for b in backends]
        ax.bar(np.arange(len(backends)) + k * width, values, width, label=f"{n} envs")
    ax.axhline(results["physical"]["bound"], color="k", ls="--", lw=1, label="physical bound")
    ax.set_xticks(np.arange(len(backends)) + width * (len(args.env_counts) - 1) / 2, backends)
    ax.set_ylabel("agent steps/s (env only)")
    ax.set_title(f"Env-only throughput, {args.env_id}, {tag}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / f"throughput_{tag}_env.png", dpi=110)
    plt.close(fig)

    rows = [r for r in results["e2e"] if "sps" in r]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4.6))
    names = [r["backend"] for r in rows]
    ax1.barh(names, [steady(r) for r in rows], color="tab:blue", label="steady SPS")
    ax1.plot([r["sps"] for r in rows], names, "k|", ms=12, label="SPS incl. start")
    ax1.axvline(results["bounds"]["combined"], color="k", ls="--", lw=1, label="combined bound")
    ax1.axvline(TARGET * results["bounds"]["combined"], color="r", ls=":", lw=1, label="85% of it")
    ax1.set_xlabel("agent steps/s (end to end)")
    ax1.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=2, frameon=False)
    left = np.zeros(len(rows))
    for key, color in (
        ("env", "tab:green"),
        ("inference", "tab:orange"),
        ("learn", "tab:purple"),
        ("other", "tab:gray"),
    ):
        share = np.array([r[key] / r["seconds"] for r in rows])
        ax2.barh(names, share, left=left, color=color, label=key)
        left += share
    ax2.set_xlabel("share of wall time")
    ax2.set_yticks([])
    ax2.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=4, frameon=False)
    fig.suptitle(f"ppo_atari.py, {args.num_envs} envs, {tag}")
    fig.tight_layout()
    fig.savefig(out_dir / f"throughput_{tag}_e2e.png", dpi=110)
    plt.close(fig)


def targets(results: dict[str, Any], args: Args) -> list[tuple[str, str, Optional[bool]]]:
    phys = results["physical"]["bound"]
    at16 = {b: r.get("16") for b, r in results["env"].items() if r.get("16")}
    out: list[tuple[str, str, Optional[bool]]] = []
    if at16:
        best = max(at16, key=at16.get)
        measured = f"{best}: {at16[best]:,.0f} = {at16[best] / phys:.0%} of {phys:,.0f}"
        if "preprocessed_per_thread" in results["physical"]:
            share = preprocessing_share(results["physical"])
            measured += f" (one preprocessing thread alone: {share:.0%} of raw emulation)"
        out.append(
            (
                f"env only, best backend at 16 envs >= {TARGET:.0%} of the physical bound",
                measured,
                at16[best] >= TARGET * phys,
            )
        )
        if "sync" in at16:
            out.append(
                (
                    "env only, best backend at 16 envs >= 2x sync",
                    f"{at16[best] / at16['sync']:.1f}x",
                    at16[best] >= 2 * at16["sync"],
                )
            )
    rows = [r for r in results["e2e"] if "sps" in r]
    if rows:
        best = max(rows, key=steady)
        combined = results["bounds"]["combined"]

        def single(row: dict[str, Any]) -> str:
            return (
                f"steady {steady(row):,.0f} = {steady(row) / combined:.0%} of {combined:,.0f} (with the start: "
                f"{row['sps']:,.0f} = {row['sps'] / combined:.0%})"
            )

        repeats = [r for r in results.get("repeats", []) if "bound" in r]
        if repeats:  # the verdict: runs judged against the machine of their own minutes
            ratios = [steady(r) / r["bound"] for r in repeats]
            median = float(np.median(ratios))
            config = repeats[0]["configuration"]
            first = next((r for r in rows if r["backend"] == config), None)
            measured = (
                f"{config}: median of {len(ratios)} runs, each against the bound measured around it: "
                f"**{median:.0%}** ({', '.join(f'{x:.0%}' for x in ratios)})"
            )
            if first:
                measured += f"; its row in the table above: {single(first)}"
            out.append(
                (f"end to end, fastest configuration >= {TARGET:.0%} of the combined bound", measured, median >= TARGET)
            )
            ceiling = reachable(results, args, config)
            if ceiling:
                out.append(("end to end, for comparison: every part of the loop at its speed alone", ceiling, None))
        else:
            out.append(
                (
                    f"end to end, fastest configuration >= {TARGET:.0%} of the combined bound",
                    f"{best['backend']}: {single(best)}",
                    steady(best) >= TARGET * combined,
                )
            )
        out += loop_targets(results, args)
        default = next((r for r in rows if r["backend"] == results["default_backend"]), None)
        if default:
            out.append(
                (
                    "rollout observations uint8; peak RSS of a default run",
                    f"{default['peak_rss_mib']:,.0f} MiB ({results['default_backend']})",
                    None,
                )
            )
        if results["machine"].get("gpu", "none") != "none":
            out.append(
                ("GPU, 16 cores: >= 10,000 SPS end to end", f"steady {steady(best):,.0f}", steady(best) >= 10_000)
            )
    return out


def reachable(results: dict[str, Any], args: Args, backend: str) -> Optional[str]:
    """What the loop would reach against the combined bound if each of its parts ran as fast as alone: ``backend``'s
    env-only rate at the runs' env count (the standard observation and the game's rules included, which the bound's
    raw emulation leaves out), the fastest inference and ``update_epochs`` passes of the fastest training. The gap
    from there to the bound is the env's preprocessing; the gap below it is the loop's own."""
    env_rate = results["env"].get(backend, {}).get(str(args.num_envs))
    bounds = results["bounds"]
    if not env_rate:
        return None
    step = 1 / env_rate + 1 / bounds["inference"] + args.update_epochs / bounds["training"]
    return (
        f"{backend}: env only at {args.num_envs} envs {env_rate:,.0f} + inference {bounds['inference']:,.0f} + "
        f"{args.update_epochs} x training {bounds['training']:,.0f} samples/s = {1e3 * step:.3f} ms per step, "
        f"**{1 / step / bounds['combined']:.0%}** of the combined bound {bounds['combined']:,.0f}"
    )


def loop_targets(results: dict[str, Any], args: Args) -> list[tuple[str, str, Optional[bool]]]:
    """Inference in the loop against inference alone (the script's form and thread count), and the loaded rows."""
    rows = {r["backend"]: r for r in results["e2e"] if "sps" in r}
    out: list[tuple[str, str, Optional[bool]]] = []
    alone = {(r["form"], r["threads"]): r["inference"] for r in results["network"] if "error" not in r}
    form = script_form(args.num_envs, results["machine"]["cores"])
    name = f"inference in the loop within 1.3x of alone (batch {args.num_envs}, {form[0]}, {form[1]} thread(s))"
    best = fastest_plain(results["e2e"]) or {}
    repeats = [r for r in results.get("repeats", []) if "inference_script_form" in r.get("alone_ms", {})]
    if repeats:  # as the end-to-end target: each run against the network timed around it, the median
        ratios = [r["loop_ms"]["inference"] / r["alone_ms"]["inference_script_form"] for r in repeats]
        median = float(np.median(ratios))
        out.append(
            (
                name,
                f"{repeats[0]['configuration']}: median of {len(ratios)} runs, each against its form timed "
                f"around it: {median:.2f}x ({', '.join(f'{x:.2f}x' for x in ratios)})",
                median <= 1.3,
            )
        )
    elif "steps" in best and form in alone:  # rows without their step count: no verdict
        in_loop = best["inference"] / (best["steps"] / args.num_envs)  # seconds per batch of num_envs frames
        by_itself = args.num_envs / alone[form]
        out.append(
            (
                name,
                f"{best['backend']}: {in_loop * 1e3:.2f} ms vs {by_itself * 1e3:.2f} ms = {in_loop / by_itself:.2f}x",
                in_loop <= 1.3 * by_itself,
            )
        )
    loaded = [r for name, r in rows.items() if name.endswith(" loaded")]
    defaults = [r for r in loaded if r["backend"].count(" ") == 1]
    for other in [r for r in loaded if r["backend"].count(" ") > 1] if defaults else []:  # another policy (a spin)
        measured = f"mean steady {with_runs(defaults[0])} vs {with_runs(other)} SPS"
        out.append(
            (
                f"loaded (one busy process per core), for comparison: the defaults against `{other['backend']}`",
                measured,
                None,
            )
        )
    return out


def with_runs(row: dict[str, Any]) -> str:
    """A row's steady SPS, and those of its runs when it is the mean of several."""
    runs = f" (runs {' / '.join(f'{x:,.0f}' for x in row['steady_runs'])})" if "steady_runs" in row else ""
    return f"{steady(row):,.0f}{runs}"


def default_backend() -> str:
    return script_module("ppo_atari_defaults").Args().vector_env


def network_rates_apart(args: Args, forms: Sequence[str] = ()) -> list[dict[str, Any]]:
    """network_rates (of ``forms`` only, if given) in a child process (`--network-only`): its CUDA context and
    models end with it."""
    command = [sys.executable, "-m", "benchmark.lab.throughput", "--network-only", "--num-envs", str(args.num_envs)]
    command += ["--seconds", str(args.seconds), "--compile" if args.compile else "--no-compile"]
    command += ["--forms", *forms] if forms else []
    result = subprocess.run(command, cwd=REPO, env=repo_env(), capture_output=True, text=True, timeout=1800)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise SystemExit(f"error: timing the network failed ({result.returncode}): {result.stderr.strip()[-1500:]}")
    return json.loads(lines[-1])


def physical_bound(env_id: str, seconds: float, cores: int) -> dict[str, float]:
    """The emulator's physical bound on `cores` cores and, where envpool is installed, the preprocessing ceiling:
    EnvPool's pool of 16 envs on ONE stepping thread, nothing else running (without envpool: left out)."""
    fps = emulator_frames_per_second(env_id, seconds)
    physical = {"frames_per_second": fps, "bound": fps * cores / FRAME_SKIP}
    ceiling = "envpool is not installed: no preprocessing ceiling"
    if envpool_available():
        one_thread = env_steps_per_second("envpool", env_id, 16, seconds, env_threads=1)
        physical["preprocessed_per_thread"] = one_thread
        ceiling = f"preprocessed, one thread: {one_thread:,.0f} steps/s"
    print(f"physical: {fps:,.0f} frames/s on one core -> bound {physical['bound']:,.0f} steps/s; {ceiling}")
    return physical


def main(args: Args) -> None:
    sys.stdout.reconfigure(line_buffering=True)  # progress lines as they come
    keep_freed_memory()  # the network is timed with the allocator settings the scripts use
    if args.network_only:
        print(json.dumps(network_rates(args.num_envs, args.seconds, args.compile, only=args.forms)))
        return
    if args.report_only:
        path = Path(args.out_dir) / f"throughput_{args.tag or f'cpu{usable_cores()}'}.json"
        results = json.loads(path.read_text())
        plot(results, args, path.parent, path.stem.removeprefix("throughput_"))
        print(f"wrote {write_report(results, args, path.parent, path.stem.removeprefix('throughput_'))}")
        return
    start = time.perf_counter()
    cores = usable_cores()
    gpus = visible_gpus()
    tag = args.tag or (file_tag(gpus[0].name) + f"_cpu{cores}" if gpus else f"cpu{cores}")
    out_dir = REPO / args.out_dir if not os.path.isabs(args.out_dir) else Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    backends = [b for b in args.backends if b != "envpool" or envpool_available()]
    results: dict[str, Any] = {"machine": machine(), "default_backend": default_backend()}
    print(f"machine: {results['machine']}")

    results["physical"] = physical_bound(args.env_id, args.seconds, cores)

    results["env"] = {}
    for backend in backends:
        results["env"][backend] = {}
        for n in args.env_counts:
            rate = env_steps_per_second(backend, args.env_id, n, args.seconds)
            results["env"][backend][str(n)] = rate
            print(f"env {backend:8s} {n:3d} envs: {rate:8,.0f} steps/s")

    results["network"] = network_rates_apart(args)
    results["bounds"] = bounds_of(results["physical"]["bound"], results["network"], args.update_epochs)
    for row in results["network"]:
        print(f"network {row}")
    print(f"bounds: {results['bounds']}")

    with tempfile.TemporaryDirectory() as workdir:
        results["e2e"] = []
        for backend in backends:
            row = end_to_end(backend, args, workdir)
            results["e2e"].append(row)
            print(f"e2e {row}")
        plain = repeated_backend(results, args.num_envs)
        if args.e2e_repeats and plain:
            forms = sorted({*results["bounds"]["forms"], script_form(args.num_envs, cores)[0]})  # and the scripts'
            results["repeat_forms"] = forms
            results["repeats"] = repeated_end_to_end(plain, args, workdir, forms)
        if args.bf16 and plain:
            results["bf16"] = bf16_rows(plain, args, workdir)
            for row in results["bf16"]:
                print(f"bf16 {row}")
        if args.loaded and plain:
            for row in loaded_rows(plain, args, workdir):
                results["e2e"].append(row)
                print(f"e2e {row}")
        results["multigpu"] = []
        if args.multigpu and MULTIGPU_SCRIPT.exists():
            backend = plain or "sync"
            for ranks in (1, 2):
                row = multigpu_sps(ranks, backend, args, workdir)
                results["multigpu"].append(row)
                print(f"multigpu {row}")
    results["targets"] = targets(results, args)
    results["load_average_at_end"] = os.getloadavg()
    results["duration_s"] = time.perf_counter() - start
    results["written"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    path = write_report(results, args, out_dir, tag)
    plot(results, args, out_dir, tag)
    print(f"wrote {path} and its plots in {results['duration_s']:.0f} s")


if __name__ == "__main__":
    main(tyro.cli(Args))
