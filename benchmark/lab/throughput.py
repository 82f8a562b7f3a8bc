"""Sampling and training throughput of the PPO Atari stack, in one run (driven by benchmark/throughput.sh).

Measures, on the machine it runs on (CPU only or with a GPU, any number of cores):

1. the physical bound: raw emulator frames/s on one core (no preprocessing) x usable cores / frame skip 4, and
   how much of one core's emulation survives the standard preprocessing (EnvPool's pool on one thread);
2. env-only agent steps/s of every vector env backend at 8, 16 and 32 envs (random actions);
3. the Nature CNN of ``cleanrl/ppo_atari.py``: inference samples/s (a batch of ``num_envs`` frames, as in the
   rollout) and training samples/s (minibatch 256: forward, backward, clip, Adam) in each memory format, with and
   without ``torch.compile``; the fastest forms give the compute bound of PPO at ``--update-epochs`` epochs:
   ``1 / (1/inference + epochs/training)`` agent steps/s. The scripts' own form is eager ``channels_last`` with the
   whole batch on all the process's cores (``script_form``);
4. end-to-end SPS of ``cleanrl/ppo_atari.py`` (default hyperparameters) for each backend, overall and after the
   first iteration (steady state), its time split (env / inference / learning, from the ``perf/*`` scalars it logs),
   the average CPU utilisation of the machine, the utilisation of every visible GPU, and peak resident memory
   (process tree); then, for the fastest plain backend (the fastest env-only at the run's env count:
   ``repeated_backend``), ``--e2e-repeats`` more runs, each between two fresh measurements of the combined bound,
   which the end-to-end target is judged on, a run with OpenMP workers that spin briefly (``SPIN``), and both the
   defaults and the spin with one busy process per core alongside (the loaded rows: the mean of runs in turns);
5. 1 vs 2 torchrun ranks of ``cleanrl/ppo_atari_multigpu.py``.

Everything is timed as the scripts run: idle OpenMP workers sleep (``OMP_WAIT_POLICY=PASSIVE``, from
``cleanrl_utils/__init__.py``, unless the environment says otherwise), glibc keeps freed memory
(``cleanrl_utils/cpu.py``, the scripts' ``mallopt`` thresholds) and the threads are the scripts'
(``benchmark/lab/placement.py``).

Writes ``{out_dir}/throughput_{tag}.md`` and PNG plots next to it (matplotlib, the ``plot`` extra). The network is
timed in a child process (``--network-only``), so that its CUDA context and models are gone before the end-to-end
runs train on the same GPU; this process never initialises CUDA.
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

from benchmark.lab.measured import cpu_name, repo_env, run_measured, visible_gpus
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
    """runs of the fastest plain backend, each between two fresh measurements of the combined bound; the end-to-end
    target is judged on the median of their ratios (a cloud VM's speed can drift 2x within minutes)"""
    bf16: bool = True
    """also run the fastest plain configuration with and without --bf16, in turns (the learning phase compared)"""
    loaded: bool = True
    """also run the fastest plain configuration with OpenMP workers that spin briefly, and both it and the spin with
    one busy process per core alongside: how the scripts' sleeping workers fare on a loaded machine"""


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
    native = [
        name
        for name, has in (
            ("AMX", torch.cpu._is_amx_tile_supported()),
            ("AVX512-BF16", torch.cpu._is_avx512_bf16_supported()),
        )
        if has
    ]
    return (
        f"{torch.backends.cpu.get_cpu_capability()}; native bfloat16: "
        f"{', '.join(native) if native else 'none (--bf16 is emulated here)'}"
    )


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
    """Raw emulator frames/s on one core: ALEInterface.act with random actions, no preprocessing. A game that ends
    goes back to the saved state of its start: ALE's reset would run some 60 frames that no step counts, and resets
    are the game's rules, which the bound leaves out (docs/throughput.md)."""
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


def load_agent_class():
    import importlib.util

    spec = importlib.util.spec_from_file_location("ppo_atari_for_throughput", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Agent


class _Spaces:  # what Agent reads from the vector env
    class single_action_space:  # noqa: N801
        n = 4


def in_memory_format(agent: torch.nn.Module, memory_format: torch.memory_format) -> torch.nn.Module:
    """The script's ``agent`` with its convolutions in ``memory_format``: the script's own agent for channels_last
    (its layout), else its weights converted and its float input made in that layout (the script's ``hidden``, which
    converts to channels_last, replaced on this instance by the same conversion to ``memory_format``). The network's
    numbers are the same; only the layout the convolutions run in differs."""
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
    specs = [
        ("default", torch.contiguous_format, False),
        ("channels_last", torch.channels_last, False),
        (BF16_FORM, torch.channels_last, False),
    ]
    if try_compile:
        specs += [("channels_last+compile", torch.channels_last, True)]
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
    """Inference and training samples/s of the Nature CNN per form (layout, compile) and torch thread count.

    The forms are timed in turns, ``rounds`` times each, so that a change of the machine's load hits them alike.
    """
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
    """``tag`` of the first run under ``runs_dir`` that logged ``charts/SPS`` (only rank 0 logs), or None; read with
    the product's reader, ``cleanrl_utils.plot.load_run``."""
    for run_dir in sorted(p for p in Path(runs_dir).glob("*") if p.is_dir()):
        if isinstance(load_run(str(run_dir), "charts/SPS"), RunCurve):
            curve = load_run(str(run_dir), tag)
            return curve if isinstance(curve, RunCurve) else None
    return None


def logged_sps(runs_dir: str) -> tuple[Optional[float], Optional[float]]:
    """(SPS, steady-state SPS) of the run logged under ``runs_dir`` (only rank 0 logs), from its ``charts/SPS``
    events: the last value (steps / seconds since the start, as the script computes it) and the steps/s after the
    first iteration, from the events' wall times. The steady rate leaves out the one-off start (env construction and
    first reset, first calls of the network), which a long run does not feel but a run of a few iterations does."""
    sps = _logged(runs_dir)
    if sps is None:
        return None, None
    steady = None
    if len(sps.steps) >= 2 and sps.times[-1] > sps.times[0]:
        steady = float((sps.steps[-1] - sps.steps[0]) / (sps.times[-1] - sps.times[0]))
    return float(sps.values[-1]), steady


def _phase_sums(runs_dir: str, skip: int) -> Optional[tuple[int, dict[str, float]]]:
    """(steps, seconds per phase) of the logged iterations after the first ``skip``, from the run's
    ``perf/<phase>_seconds`` events (the wall seconds of each iteration spent in each phase, which the scripts log
    at every iteration's step). None without more than ``skip`` logged iterations."""
    sps = _logged(runs_dir)
    phases = {phase: _logged(runs_dir, f"perf/{phase}_seconds") for phase in PHASES}
    if sps is None or len(sps.steps) <= skip or None in phases.values():
        return None
    sums = {phase: float(curve.values[skip:].sum()) for phase, curve in phases.items()}
    return int(sps.steps[-1] - (sps.steps[skip - 1] if skip else 0)), sums


def logged_phases(runs_dir: str) -> Optional[tuple[int, dict[str, float]]]:
    """(steps, seconds per phase) of the whole run (a run from step 0), from its ``perf/<phase>_seconds`` events."""
    return _phase_sums(runs_dir, 0)


def logged_steady_phases(runs_dir: str) -> Optional[tuple[int, dict[str, float]]]:
    """(steps, seconds per phase) of the iterations after the first, from the run's ``perf/<phase>_seconds`` events:
    the phases of the steady-state SPS's iterations (the first one's first calls of the network and of the envs left
    out, as the parts timed alone leave out their warm-up). None without two logged iterations."""
    return _phase_sums(runs_dir, 1)


def measured_run(
    command: list[str], workdir: str, timeout: float = 300, env: Optional[dict[str, str]] = None
) -> tuple[str, Any]:
    """Output and measurements of one run (a failed run's output is printed)."""
    m = run_measured(command, workdir, timeout=timeout, env=env)
    if m.returncode != 0:
        print(f"  failed ({m.returncode}): {' '.join(command)}\n{m.output[-1500:]}", flush=True)
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
    """``backend`` run ``args.e2e_repeats`` times, each between two fresh measurements of the combined bound, so
    that every run is compared with the machine as fast as it was in the same minutes. Each row gets its bound (the
    mean of the two around it) and, per phase, seconds per agent step in the loop and alone (the bound's parts:
    raw emulation on all cores, the fastest inference, ``update_epochs`` passes of the fastest training)."""
    cores = usable_cores()
    bounds = [bounds_now(args, forms, cores)]
    rows = []
    for k in range(args.e2e_repeats):
        row = end_to_end(backend, args, workdir, label=f"repeat {k + 1}")
        row["configuration"] = backend
        bounds.append(bounds_now(args, forms, cores))
        print(
            f"repeat {row} between bounds {bounds[-2]['combined']:,.0f} and {bounds[-1]['combined']:,.0f}", flush=True
        )
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


def end_to_end(
    backend: str,
    args: Args,
    workdir: str,
    extra: tuple[str, ...] = (),
    label: str = "",
    extra_env: Optional[dict[str, str]] = None,
    attempt: int = 1,
) -> dict[str, Any]:
    """One run of the script; ``extra`` flags go to it and ``extra_env`` to its environment; they and ``label``
    (e.g. "loaded") are appended to the row's name. Runs of the same name need each their ``attempt``."""
    steps = args.e2e_iterations * args.num_envs * 128
    settings = [f"{key}={value}" for key, value in (extra_env or {}).items()]
    name = " ".join(filter(None, [backend, *extra, *settings, label]))
    runs = os.path.join(workdir, "runs_" + re.sub(r"[^A-Za-z0-9]+", "_", name) + f"_{attempt}")
    command = [
        sys.executable,
        str(SCRIPT),
        "--vector-env",
        backend,
        "--num-envs",
        str(args.num_envs),
        "--total-timesteps",
        str(steps),
        "--no-progress-bar",
        "--runs-dir",
        runs,
        "--env-id",
        args.env_id,
        *extra,
    ]
    out, m = measured_run(command, workdir, 300 if not label else 900, extra_env)
    row: dict[str, Any] = {"backend": name, "wall_s": m.wall_s, "steps": steps}
    sps, steady_sps = logged_sps(runs)
    whole = logged_phases(runs)
    if m.returncode != 0 or not sps or whole is None:
        row["error"] = out.strip().splitlines()[-1][:200] if out.strip() else "no output"
        return row
    logged_steps, phases = whole
    # the training loop's wall time: the script logs SPS as its steps over the seconds since the loop started
    seconds = logged_steps / sps
    row.update(
        sps=float(sps),
        steady_sps=steady_sps,
        steady_phases=logged_steady_phases(runs),
        seconds=seconds,
        env=phases.get("env", 0.0),
        inference=phases.get("inference", 0.0),
        learn=phases.get("learn", 0.0),
        cpu_percent=m.machine_cpu_percent if m.machine_cpu_percent is not None else float("nan"),
        gpu_percent=m.gpu_percent,
        peak_rss_mib=m.peak_rss_mib,
    )
    row["other"] = max(0.0, seconds - row["env"] - row["inference"] - row["learn"])
    return row


def bf16_rows(backend: str, args: Args, workdir: str) -> list[dict[str, Any]]:
    """``backend`` with and without ``--bf16``, ``BF16_ROUNDS`` times in turns (every other round in reverse order):
    each row the mean of its runs, with the learning phase's seconds per iteration after the first."""
    variants = {"float32": (), "--bf16": ("--bf16",)}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for attempt in range(1, BF16_ROUNDS + 1):
        for name in list(variants)[:: 1 if attempt % 2 else -1]:
            runs[name].append(end_to_end(backend, args, workdir, variants[name], label="bf16 pair", attempt=attempt))
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


LOADED_ROUNDS = 4
"""rounds of the loaded runs, in turns and every other round in reverse order, so that a change of the machine's speed
hits every variant alike"""


def loaded_rows(backend: str, args: Args, workdir: str) -> list[dict[str, Any]]:
    """``backend`` (already run with the script's defaults) with workers that spin briefly (``SPIN``), then the
    defaults and the spin with one busy process per core alongside, ``LOADED_ROUNDS`` times in turns, every other
    round in reverse order: each loaded row is the mean of its runs (their steady SPS under ``steady_runs``). The runs
    share this process's session with the busy processes (``run_measured``), so that each busy process competes with
    the run's threads as one more process."""
    cores = plan_threads(args.num_envs).cores
    variants = {"defaults": {}, "spin": {"extra_env": SPIN}}
    rows = [end_to_end(backend, args, workdir, **settings) for settings in list(variants.values())[1:]]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    with busy_cores(cores):
        for attempt in range(1, LOADED_ROUNDS + 1):
            for name in list(variants)[:: 1 if attempt % 2 else -1]:
                settings = variants[name]
                runs[name].append(end_to_end(backend, args, workdir, label="loaded", attempt=attempt, **settings))
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


def ranks_command(ranks: int, backend: str, num_envs: int, steps: int, env_id: str, runs: str) -> list[str]:
    """ppo_atari_multigpu.py on ``ranks`` torchrun ranks, ``num_envs`` envs in all: the lab's one 1-vs-2-rank run
    (this report's torchrun section and the seed claims' ranks)."""
    return [
        *(sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"),
        *(str(MULTIGPU_SCRIPT), "--num-envs", str(num_envs), "--total-timesteps", str(steps), "--env-id", env_id),
        *("--vector-env", backend, "--checkpoint-interval", "0", "--no-progress-bar", "--runs-dir", runs),
    ]


def multigpu_sps(ranks: int, backend: str, args: Args, workdir: str) -> dict[str, Any]:
    runs = os.path.join(workdir, f"runs_multigpu_{ranks}")
    steps = args.e2e_iterations * args.num_envs * 128
    command = ranks_command(ranks, backend, args.num_envs, steps, args.env_id, runs)
    out, m = measured_run(command, workdir)
    row: dict[str, Any] = {
        "ranks": ranks,
        "backend": backend,
        "wall_s": m.wall_s,
        "gpu_percent": m.gpu_percent,
        "cpu_percent": m.machine_cpu_percent if m.machine_cpu_percent is not None else float("nan"),
    }
    sps, steady = logged_sps(runs)
    if sps is not None:
        row["sps"], row["steady_sps"] = sps, steady
    else:
        row["error"] = out.strip().splitlines()[-1][:200] if out.strip() else "no output"
    return row


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
        "| machine | |",
        "|---|---|",
    ]
    for key, value in m.items():
        if key.startswith("load_average"):
            value = ", ".join(f"{v:.2f}" for v in value)
        lines.append(f"| {key} | {value} |")
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
    lines += [
        "## Env only (agent steps/s, random actions)",
        "",
        "| backend | " + " | ".join(f"{n} envs" for n in args.env_counts) + " |",
        "|---|" + "---|" * len(args.env_counts),
    ]
    for backend, rates in results["env"].items():
        lines.append(f"| {backend} | " + " | ".join(fmt(rates.get(str(n))) for n in args.env_counts) + " |")
    lines += [
        "",
        f"## Network (Nature CNN; inference batch {args.num_envs}, training minibatch 256)",
        "",
        "| form | torch threads | inference samples/s | training samples/s | first call (s) |",
        "|---|---|---|---|---|",
    ]
    for row in results["network"]:
        if "error" in row:
            lines.append(f"| {row['form']} | - | failed: {row['error']} | | |")
        else:
            lines.append(
                f"| {row['form']} | {threads_text(row)} | {fmt(row['inference'])} | {fmt(row['training'])} "
                f"| {row['warmup_s']:.1f} |"
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
        "| configuration | SPS | steady SPS | steady, % of combined bound | env s | inference s | learning s | other s "
        "| CPU % | GPU % | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in results["e2e"]:
        if "error" in row:
            lines.append(f"| {row['backend']} | failed: {row['error']} | | | | | | | | | |")
            continue
        lines.append(
            f"| {row['backend']} | {fmt(row['sps'])} | {fmt(row.get('steady_sps'))} "
            f"| {100 * steady(row) / b['combined']:.0f}% | {row['env']:.1f} "
            f"| {row['inference']:.1f} | {row['learn']:.1f} | {row['other']:.1f} | {fmt(row['cpu_percent'])} "
            f"| {fmt(row['gpu_percent'])} | {fmt(row['peak_rss_mib'])} |"
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
            "| run | bound before / after | steady SPS | % of bound | env ms: loop / bound "
            "| inference ms: loop / alone | learning ms: loop / alone | inference ms alone in the scripts' form |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for k, row in enumerate(repeats, 1):
            if "bound" not in row:
                lines.append(f"| {k} | failed: {row.get('error', '')} | | | | | | |")
                continue
            loop, alone = row["loop_ms"], row["alone_ms"]
            phases = " | ".join(
                f"{loop[p]:.3f} / {alone[p]:.3f} ({loop[p] / alone[p]:.2f}x)" for p in ("env", "inference", "learn")
            )
            own = alone.get("inference_script_form")
            own_text = f"{own:.3f} (loop: {loop['inference'] / own:.2f}x)" if own else "-"
            lines.append(
                f"| {k} | {fmt(row['bounds'][0])} / {fmt(row['bounds'][1])} | {fmt(steady(row))} "
                f"| {100 * steady(row) / row['bound']:.0f}% | {phases} | {own_text} |"
            )
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
            "| variant | steady SPS per run | steady SPS, mean | vs float32 | learning s per iteration | vs float32 |",
            "|---|---|---|---|---|---|",
        ]
        base = pair[0]
        for row in pair:
            if "sps" not in row:
                lines.append(f"| {row['variant']} | failed: {row.get('error', '')} | | | | |")
                continue
            lines.append(
                f"| {row['variant']} | {' / '.join(fmt(v) for v in row['steady_runs'])} "
                f"| {fmt(row['steady_sps'])} | {row['steady_sps'] / base['steady_sps']:.2f}x "
                f"| {row['learn_s_per_iteration']:.2f} "
                f"| {base['learn_s_per_iteration'] / row['learn_s_per_iteration']:.2f}x faster |"
            )
    lines += ["", "## torchrun ranks: `ppo_atari_multigpu.py`", ""]
    if results["multigpu"]:
        lines += [
            f"{args.num_envs} envs in all (split over the ranks), same batch; the repeated runs' backend.",
            "",
            "| ranks | backend | SPS (all ranks) | steady SPS | CPU % | GPU % (all visible) | wall s |",
            "|---|---|---|---|---|---|---|",
        ]
        for row in results["multigpu"]:
            sps = fmt(row.get("sps")) if "sps" in row else "failed: " + row["error"]
            lines.append(
                f"| {row['ranks']} | {row['backend']} | {sps} | {fmt(row.get('steady_sps'))} "
                f"| {fmt(row['cpu_percent'])} | {fmt(row.get('gpu_percent'))} | {row['wall_s']:.0f} |"
            )
    else:
        lines.append("Not measured (`cleanrl/ppo_atari_multigpu.py` missing or `--no-multigpu`).")
    lines += ["", "## Targets (ratios within this run)", "", "| target | measured | verdict |", "|---|---|---|"]
    for name, measured, ok in results["targets"]:
        lines.append(f"| {name} | {measured} | {verdict(ok) if ok is not None else 'n/a'} |")
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
    import importlib.util

    spec = importlib.util.spec_from_file_location("ppo_atari_defaults", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Args().vector_env


def network_rates_apart(args: Args, forms: Sequence[str] = ()) -> list[dict[str, Any]]:
    """network_rates (of ``forms`` only, if given) in a child process (`--network-only`): its CUDA context and
    models end with it."""
    command = [
        sys.executable,
        "-m",
        "benchmark.lab.throughput",
        "--network-only",
        "--num-envs",
        str(args.num_envs),
        "--seconds",
        str(args.seconds),
        "--compile" if args.compile else "--no-compile",
        *(["--forms", *forms] if forms else []),
    ]
    result = subprocess.run(command, cwd=REPO, env=repo_env(), capture_output=True, text=True, timeout=1800)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise SystemExit(f"error: timing the network failed ({result.returncode}): {result.stderr.strip()[-1500:]}")
    return json.loads(lines[-1])


def physical_bound(env_id: str, seconds: float, cores: int) -> dict[str, float]:
    """The emulator's physical bound on `cores` cores and, where envpool is installed, the preprocessing ceiling: a
    native pool on ONE stepping thread (16 envs per batch, which amortises the hand-over to Python better than 4),
    nothing else running. Its share of one core's raw emulation is what survives the per-step screen work (two gray
    grabs, max-pool, resize to 84x84, frame stack), before any cost of running threads in parallel. EnvPool's pool,
    since the ale backend runs one thread per env (cleanrl_utils/vector_envs.py: AleVectorEnv); earlier reports
    measured ale-py's pool on one thread. Without envpool (an optional extra) the report leaves the ceiling out."""
    fps = emulator_frames_per_second(env_id, seconds)
    physical = {"frames_per_second": fps, "bound": fps * cores / FRAME_SKIP}
    ceiling = "envpool is not installed: no preprocessing ceiling"
    if envpool_available():
        one_thread = env_steps_per_second("envpool", env_id, 16, seconds, env_threads=1)
        physical["preprocessed_per_thread"] = one_thread
        ceiling = f"preprocessed, one thread: {one_thread:,.0f} steps/s"
    print(f"physical: {fps:,.0f} frames/s on one core -> bound {physical['bound']:,.0f} steps/s; {ceiling}", flush=True)
    return physical


def main(args: Args) -> None:
    keep_freed_memory()  # the network is timed with the allocator settings the scripts use
    if args.network_only:
        print(json.dumps(network_rates(args.num_envs, args.seconds, args.compile, only=args.forms)), flush=True)
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
    tag = args.tag or (
        re.sub(r"[^A-Za-z0-9]+", "-", gpus[0].name).strip("-") + f"_cpu{cores}" if gpus else f"cpu{cores}"
    )
    out_dir = REPO / args.out_dir if not os.path.isabs(args.out_dir) else Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    backends = [b for b in args.backends if b != "envpool" or envpool_available()]
    results: dict[str, Any] = {"machine": machine(), "default_backend": default_backend()}
    print(f"machine: {results['machine']}", flush=True)

    results["physical"] = physical_bound(args.env_id, args.seconds, cores)

    results["env"] = {}
    for backend in backends:
        results["env"][backend] = {}
        for n in args.env_counts:
            rate = env_steps_per_second(backend, args.env_id, n, args.seconds)
            results["env"][backend][str(n)] = rate
            print(f"env {backend:8s} {n:3d} envs: {rate:8,.0f} steps/s", flush=True)

    results["network"] = network_rates_apart(args)
    results["bounds"] = bounds_of(results["physical"]["bound"], results["network"], args.update_epochs)
    for row in results["network"]:
        print(f"network {row}", flush=True)
    print(f"bounds: {results['bounds']}", flush=True)

    with tempfile.TemporaryDirectory() as workdir:
        results["e2e"] = []
        for backend in backends:
            row = end_to_end(backend, args, workdir)
            results["e2e"].append(row)
            print(f"e2e {row}", flush=True)
        plain = repeated_backend(results, args.num_envs)
        if args.e2e_repeats and plain:
            forms = sorted({*results["bounds"]["forms"], script_form(args.num_envs, cores)[0]})  # and the scripts'
            results["repeat_forms"] = forms
            results["repeats"] = repeated_end_to_end(plain, args, workdir, forms)
        if args.bf16 and plain:
            results["bf16"] = bf16_rows(plain, args, workdir)
            for row in results["bf16"]:
                print(f"bf16 {row}", flush=True)
        if args.loaded and plain:
            for row in loaded_rows(plain, args, workdir):
                results["e2e"].append(row)
                print(f"e2e {row}", flush=True)
        results["multigpu"] = []
        if args.multigpu and MULTIGPU_SCRIPT.exists():
            backend = plain or "sync"
            for ranks in (1, 2):
                row = multigpu_sps(ranks, backend, args, workdir)
                results["multigpu"].append(row)
                print(f"multigpu {row}", flush=True)
    results["targets"] = targets(results, args)
    results["load_average_at_end"] = os.getloadavg()
    results["duration_s"] = time.perf_counter() - start
    results["written"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    path = write_report(results, args, out_dir, tag)
    plot(results, args, out_dir, tag)
    print(f"wrote {path} and its plots in {results['duration_s']:.0f} s", flush=True)


if __name__ == "__main__":
    main(tyro.cli(Args))
