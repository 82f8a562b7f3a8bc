"""A training process's CPU set-up: its threads (the flags, else OMP_NUM_THREADS, SLURM_CPUS_PER_TASK, the cores; a
node's ranks split them; docs/cluster.md) and glibc's memory reuse."""

import ctypes.util
import os
import platform

from cleanrl_utils.validation import counted


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def thread_plan(env_threads: int, torch_threads: int, num_envs: int, local_ranks=1, cores=0, notes=True):
    """(cores of this rank, env threads, torch threads, their source); a count above the cores is capped, with a
    note if `notes`; an OMP_NUM_THREADS that is no count is ignored, with a note."""
    cores = max(1, (cores or usable_cores()) // local_ranks)
    omp, slurm = os.environ.get("OMP_NUM_THREADS", "").strip(), os.environ.get("SLURM_CPUS_PER_TASK", "")
    budget, source = cores, "its cores"
    torchruns = omp == "1" and local_ranks > 1 and "TORCHELASTIC_RUN_ID" in os.environ  # torchrun's, not a choice
    if omp.isdigit() and int(omp) > 0 and not torchruns:
        budget, source = min(int(omp), cores), "OMP_NUM_THREADS"
    elif slurm.isdigit() and int(slurm) > 0:
        budget, source = max(1, int(slurm) // local_ranks), "SLURM_CPUS_PER_TASK"
    if omp and not (omp.isdigit() and int(omp) > 0) and notes:  # libgomp ignores it too, in a warning of its own
        print(f"note: OMP_NUM_THREADS={omp!r} is not a positive whole number: ignored (unset it, or give a count)")
    omp_asked = int(omp) if source == "OMP_NUM_THREADS" else 0
    for flag, asked in (
        ("--env-threads", env_threads),
        ("--torch-threads", torch_threads),
        ("OMP_NUM_THREADS", omp_asked),
    ):
        if asked > cores and notes and (flag != "OMP_NUM_THREADS" or not (env_threads and torch_threads)):
            cap = f"using {cores} (more threads than cores only wait for each other)"
            print(f"note: {flag} {asked} is more than the {counted(cores, 'core')} this process may use: {cap}")
    env = min(env_threads, cores) if env_threads else min(budget, num_envs)
    return cores, env, min(torch_threads, cores) if torch_threads else budget, source


def keep_freed_memory(limit: int = 1 << 30) -> bool:
    """glibc keeps freed memory for the next minibatch instead of unmapping it (page faults; docs/throughput.md)."""
    libc = platform.libc_ver()[0] == "glibc" and ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    return bool(libc and libc.mallopt(-3, limit) and libc.mallopt(-1, limit))  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD


def setup_cpu(args, num_envs: int, local_ranks: int = 1, notes: bool = True):
    """`thread_plan` for the script's --env-threads/--torch-threads, torch's threads set, freed memory kept."""
    import torch  # here: the launchers take this module's thread rule without loading torch (a second of CPU)

    cores, env, threads, source = thread_plan(args.env_threads, args.torch_threads, num_envs, local_ranks, 0, notes)
    torch.set_num_threads(threads), keep_freed_memory()
    return cores, env, threads, "--torch-threads" if args.torch_threads else source
