"""The logged losses of a fixed-seed CPU run: what each Atari script logged when its fixture was recorded.

`tests/fixtures/fixed_seed_losses.json` holds what each script logged (sync backend, 4 envs x 32 steps, 4 iterations,
one torch thread: deterministic on one CPU). A float result of the network depends on the instruction set that
oneDNN and ATen pick on the machine (AVX-512, AVX2, SSE), so another processor gives other last bits; those grow
through the 4 iterations. The fixture is therefore compared within ``TOLERANCE``: for each logged scalar, the largest
difference over the run, divided by the scalar's largest magnitude in the fixture.

How ``TOLERANCE`` was chosen (measured on an AMD EPYC with AVX-512, recorded there): the native instruction set
gives the fixture bit for bit; oneDNN and ATen held to AVX2 differ by at most 4e-6; held to SSE4.1 (no FMA: the
largest rounding change an x86 CPU can make) by at most 1.1e-3 (`losses/old_approx_kl`). A changed
hyperparameter or a bug changes the losses by 3e-3 to 1 (``--clip-coef 0.2``: policy loss 0.48, value loss 0.11;
tests/test_fixed_seed.py runs both). 1e-2 sits between. The suite runs the comparison under the native set and
under restricted ones, so a new processor cannot surprise CI.

A comparison that must hold bit for bit compares two runs on the same machine (a resume against an uninterrupted
run, backend against backend, 2 ranks against 1 process). For a refactor, record before and compare after on one
machine: `python tests/test_fixed_seed.py --record FILE` (before), `python tests/test_fixed_seed.py --compare FILE`
(after: bit for bit). `python tests/test_fixed_seed.py --record` re-records the fixture, for a change that is meant
to change the learning (say so in the commit).
"""

from __future__ import annotations

import json
import platform
import tempfile
from pathlib import Path

from helpers import FAST, LOSS_TAGS, find_run_dir, read_scalars, run_each

FIXTURE = Path(__file__).parent / "fixtures" / "fixed_seed_losses.json"
RUN = ["--num-envs", "4", "--num-steps", "32", "--total-timesteps", "512", "--vector-env", "sync"]
RUN += ["--torch-threads", "1", "--no-progress-bar"]
SEED = 3
TAGS = [*LOSS_TAGS, "charts/learning_rate"]
SCRIPTS = {"ppo_atari": "cleanrl/ppo_atari.py", "ppo_atari_multigpu": "cleanrl/ppo_atari_multigpu.py"}
TOLERANCE = 1e-2
# the instruction sets a run's kernels may be held to (x86 only): the native one, AVX2, and SSE4.1 without FMA
ISAS = {
    "native": {},
    "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
    "sse41": {"ONEDNN_MAX_CPU_ISA": "SSE41", "ATEN_CPU_CAPABILITY": "default"},
}
X86 = platform.machine().lower() in ("x86_64", "amd64")

Losses = dict[str, list[list[float]]]


def logged_losses(
    script: str, workdir: Path, seed: int = SEED, flags: tuple[str, ...] = (), isa: str = "native"
) -> Losses:
    """Run `script` once as a plain single process and return {tag: [[step, value], ...]}."""
    return losses_of_runs([(script, flags)], workdir, seed, isa)[0]


def losses_of_runs(
    runs: list[tuple[str, tuple[str, ...]]], workdir: Path, seed: int = SEED, isa: str = "native"
) -> list[Losses]:
    """Run each (script, flags) as a plain single process, its kernels held to `isa`, and return what each logged,
    {tag: [[step, value], ...]}. The runs are processes forked from one that imported torch first (run_each): the
    import is paid once, and each run still starts from a fresh process's state (its seed sets every generator)."""
    jobs = []
    for i, (script, flags) in enumerate(runs):
        cwd = workdir / f"run{i}"
        cwd.mkdir(parents=True, exist_ok=True)
        jobs.append(
            {"args": [script, *RUN, *flags, "--seed", str(seed), "--runs-dir", str(cwd / "runs")], "cwd": str(cwd)}
        )
    cases = [(job["args"], job["cwd"]) for job in jobs]
    results = run_each(cases, env={**FAST, **ISAS[isa]}, timeout=600, train=True)
    logged = []
    for job, result in zip(jobs, results):
        assert result.returncode == 0, result.stderr[-3000:]
        run_dir = find_run_dir(Path(job["cwd"]) / "runs")
        logged.append({tag: [[step, value] for step, value in read_scalars(run_dir, tag)] for tag in TAGS})
    return logged


def differences(logged: Losses, recorded: Losses) -> dict[str, float]:
    """Per tag, the largest difference over the run relative to the tag's largest magnitude in `recorded`; a tag
    logged at other steps differs by infinity."""
    out = {}
    for tag, values in recorded.items():
        got = logged.get(tag, [])
        if [step for step, _ in got] != [step for step, _ in values]:
            out[tag] = float("inf")
            continue
        scale = max(abs(v) for _, v in values) or 1.0
        out[tag] = max((abs(a - b) for (_, a), (_, b) in zip(got, values)), default=0.0) / scale
    return out


def beyond_tolerance(logged: Losses, recorded: Losses) -> dict[str, float]:
    return {tag: d for tag, d in differences(logged, recorded).items() if d > TOLERANCE}


def record(path: Path = FIXTURE) -> None:
    recorded = {}
    for name, script in SCRIPTS.items():
        with tempfile.TemporaryDirectory() as workdir:
            recorded[name] = logged_losses(script, Path(workdir))
    path.write_text(json.dumps(recorded, indent=1) + "\n")
    print(f"wrote {path}")


def compare(path: Path) -> int:
    """Bit for bit against a recording made on this machine (before a refactor)."""
    before = json.loads(path.read_text())
    status = 0
    for name, script in SCRIPTS.items():
        with tempfile.TemporaryDirectory() as workdir:
            now = logged_losses(script, Path(workdir))
        changed = [tag for tag in before[name] if now.get(tag) != before[name][tag]]
        print(
            f"{name}: {'identical' if not changed else 'CHANGED: ' + ', '.join(changed)}"
            f" (largest relative difference {max(differences(now, before[name]).values()):.1e})"
        )
        status |= bool(changed)
    return status
