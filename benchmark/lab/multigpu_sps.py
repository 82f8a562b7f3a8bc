"""Steps per second of cleanrl/ppo_atari_multigpu.py with 1 and with 2 ranks on this machine, as a markdown table
(driven by benchmark/multigpu_sps.sh, whose header lists the settings; they come from the environment).

Each rank count runs under torchrun with the same global batch, measured from outside: SPS and steady SPS from rank
0's TensorBoard log (``charts/SPS``: the last value, steps over the seconds since the loop started; steady: the steps
per second after the first iteration, from the events' wall times), the cores each rank kept busy from its process
tree (its CPU time with its env processes over the run's wall time, start-up included: ``measured.TreeSampler``),
and the torch threads per rank from the script's first line.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path
from typing import Mapping

from benchmark.lab.measured import REPO, run_measured
from benchmark.lab.throughput import logged_sps
from benchmark.lab.placement import usable_cores

SCRIPT = REPO / "cleanrl" / "ppo_atari_multigpu.py"
DEFAULTS = {
    "ENV_ID": "BreakoutNoFrameskip-v4",
    "NUM_ENVS": "8",
    "NUM_STEPS": "128",
    "ITERATIONS": "3",
    "RANKS": "1 2",
    "VECTOR_ENV": "sync",
    "EXTRA_ARGS": "",
    "TORCHRUN": "",
}
THREADS = [
    re.compile(r"(\d+) torch threads"),  # "per rank 2 cores: 2 torch threads"
    re.compile(
        r"torch (\d+) thread\(s\) for inference(?: \(the batch in (\d+) slices in parallel\))?, (\d+) for "
        r"learning"
    ),  # how the scripts described their thread plan while they sliced the batch
]
RUN_TIMEOUT_S = 7 * 24 * 3600.0
"""a run is never stopped for its length: the settings decide it"""


def torch_threads(output: str) -> str:
    """The torch threads per rank that the script's first line gives, as the table shows them: `N`, or
    `inference / learning`, with `S slices x 1` for a batch in slices; `-` where the line says none."""
    first = next((line for line in output.splitlines() if line.startswith("run ")), "")
    for pattern in THREADS:
        found = pattern.search(first)
        if found and len(found.groups()) == 1:
            return found[1]
        if found:
            inference = f"{found[2]} slices x 1" if found[2] else found[1]
            return f"{inference} / {found[3]}"
    return "-"


def load_average() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def torchrun(setting: str) -> list[str]:
    """The launcher: TORCHRUN as given, else this interpreter's torch.distributed.run (torchrun's own module, also
    where the venv's bin folder is not on PATH)."""
    return shlex.split(setting) if setting else [sys.executable, "-m", "torch.distributed.run"]


def main(argv: list[str], environ: Mapping[str, str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if argv:
        raise SystemExit(
            f"error: no arguments ({' '.join(argv)}): the settings come from the environment, as "
            "benchmark/multigpu_sps.sh --help lists them"
        )
    s = {key: environ.get(key) or default for key, default in DEFAULTS.items()}
    num_envs, num_steps, iterations = int(s["NUM_ENVS"]), int(s["NUM_STEPS"]), int(s["ITERATIONS"])
    out = Path(environ.get("OUT") or "")
    if not str(out) or str(out) == ".":
        raise SystemExit("error: OUT is not set: the folder of the runs and their logs")
    out.mkdir(parents=True, exist_ok=True)
    total = num_envs * num_steps * iterations
    print(f"machine: {usable_cores()} cores, load average {load_average()} (before)")
    extra = f" ({s['EXTRA_ARGS']})" if s["EXTRA_ARGS"] else ""
    print(
        f"workload: {s['ENV_ID']}, {num_envs} envs in all ({s['VECTOR_ENV']}), {num_steps} steps, {iterations} "
        f"iterations = {total} steps{extra}"
    )
    print()
    print("| ranks | envs per rank | torch threads per rank | SPS | steady SPS | cores busy per rank |")
    print("|---|---|---|---|---|---|")
    for ranks in (int(r) for r in s["RANKS"].split()):
        runs = out / f"runs_ranks{ranks}"
        command = [
            *torchrun(s["TORCHRUN"]),
            "--standalone",
            "--nnodes=1",
            f"--nproc_per_node={ranks}",
            str(SCRIPT),
            "--env-id",
            s["ENV_ID"],
            "--num-envs",
            str(num_envs),
            "--num-steps",
            str(num_steps),
            "--total-timesteps",
            str(total),
            "--vector-env",
            s["VECTOR_ENV"],
            "--checkpoint-interval",
            "0",
            "--no-progress-bar",
            "--runs-dir",
            str(runs),
            "--run-name",
            f"ranks{ranks}",
            *shlex.split(s["EXTRA_ARGS"]),
        ]
        m = run_measured(command, str(REPO), RUN_TIMEOUT_S)
        log = out / f"ranks{ranks}.log"
        log.write_text(m.output)
        sps, steady_sps = logged_sps(str(runs))
        if m.returncode != 0 or not sps:
            tail = "\n".join(m.output.splitlines()[-20:])
            print(
                f"{tail}\nerror: {ranks} rank(s): exit {m.returncode}"
                f"{'' if sps else ', no charts/SPS logged'}; the whole output is in {log}",
                flush=True,
            )
            return 1
        busy = " ".join(f"{m.rank_cores_busy[r]:.2f}" for r in sorted(m.rank_cores_busy)) or "-"
        print(
            f"| {ranks} | {num_envs // ranks} | {torch_threads(m.output)} | {sps:.0f} | {steady_sps or sps:.0f} "
            f"| {busy} |",
            flush=True,
        )
    print()
    print(f"load average after: {load_average()}; logs in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], os.environ))
