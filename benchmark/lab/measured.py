"""A command run and measured while it runs, for the lab: the CPU use of its process tree (and of each torchrun rank
in it), the machine's CPU use, every visible GPU's use and the tree's peak memory, all from outside (psutil,
nvidia-smi); and the small helpers the lab's reports share."""

from __future__ import annotations

import functools
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np
import psutil

from benchmark.lab.placement import usable_cores
from cleanrl_utils.launch.processes import TERMINATE_GRACE_S, own_group, stop_process_groups

REPO = Path(__file__).resolve().parents[2]  # the repository: benchmark/lab/ is two folders down
GPU_QUERY_TIMEOUT_S = 5.0
"""longest wait for one nvidia-smi answer (a hung driver must not hang the measurement)"""


@dataclass(frozen=True)
class Gpu:
    index: int
    """CUDA's index (after CUDA_VISIBLE_DEVICES)"""
    name: str
    uuid: str
    """as nvidia-smi writes it: GPU-xxxxxxxx-..."""


DEVICES_EXPR = (
    "[(torch.cuda.get_device_name(i), str(torch.cuda.get_device_properties(i).uuid)) for i in "
    "range(torch.cuda.device_count())] if torch.cuda.is_available() else []"
)
"""a Python expression (torch imported): the (name, UUID) of every GPU torch sees, in CUDA's order"""
_PROBE = f"import json, torch; print(json.dumps({DEVICES_EXPR}))"


def cpu_name() -> str:
    """The processor's model name (/proc/cpuinfo), the lab's one description of a machine's CPU."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def rank_of(proc: psutil.Process) -> Optional[int]:
    """The torchrun rank a process works for (its ``RANK`` variable, inherited by the processes a rank starts), or
    None; a process whose environment can't be read counts as none."""
    try:
        rank = proc.environ().get("RANK")
    except psutil.AccessDenied:
        return None
    return int(rank) if rank is not None and rank.isdigit() else None


def _gpu_uuid(uuid: str) -> str:
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


@functools.lru_cache(maxsize=1)
def visible_gpus(timeout: float = 120.0) -> tuple[Gpu, ...]:
    """The GPUs torch would use here, in CUDA's order (CUDA_VISIBLE_DEVICES respected, by index or UUID), asked in
    a child process so that this one creates no CUDA context. None without nvidia-smi or CUDA."""
    if shutil.which("nvidia-smi") is None:
        return ()
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=timeout).stdout
        found = json.loads(out.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, OSError, ValueError, IndexError):
        return ()
    return gpus_from(found)


def gpus_from(found: Sequence[tuple[str, str]]) -> tuple[Gpu, ...]:
    """The GPUs of (name, UUID) pairs in CUDA's order, as ``DEVICES_EXPR`` gives them."""
    return tuple(Gpu(index, name, _gpu_uuid(uuid)) for index, (name, uuid) in enumerate(found))


def gpu_utilisation(uuids: Sequence[str], timeout: Optional[float] = None) -> Optional[dict[str, float]]:
    """Utilisation % of each GPU of `uuids` now (nvidia-smi); None if nvidia-smi did not answer within `timeout`
    seconds (default GPU_QUERY_TIMEOUT_S)."""
    timeout = GPU_QUERY_TIMEOUT_S if timeout is None else timeout
    command = ["nvidia-smi", "--query-gpu=uuid,utilization.gpu", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=timeout).stdout
    except (subprocess.TimeoutExpired, OSError):
        return None
    wanted = {uuid.lower() for uuid in uuids}
    found = {}
    for line in out.splitlines():
        uuid, _, value = (part.strip() for part in line.partition(","))
        if uuid.lower() in wanted and value.isdigit():
            found[uuid] = float(value)
    return found


class TreeSampler:
    """Samples, every `interval` seconds in the background, a process and all its descendants: the CPU time each
    used since the last sample (a process seen first: all of it; a process's last interval before it exits is lost),
    the machine's CPU %, the tree's resident memory, each GPU's utilisation (`gpus`: UUIDs), and the CPU seconds of
    each torchrun rank's processes (``RANK`` in their environment; `rank_cpu_seconds`). A process's rank is read again
    while it has none: one seen between its fork and its exec still has its parent's environment."""

    def __init__(self, pid: int, interval: float = 0.5, cores: Optional[int] = None, gpus: Sequence[str] = ()):
        self.root = psutil.Process(pid)
        self.interval = interval
        self.cores = cores or usable_cores()
        self.cpu_seconds = 0.0
        self.busy: list[float] = []  # per sample: share of `cores` the tree kept busy
        self.machine_cpu: list[float] = []
        self.peak_rss = 0
        self.gpus = list(gpus)
        self.gpu: dict[str, list[float]] = {uuid: [] for uuid in self.gpus}
        self._last: dict[tuple[int, float], float] = {}  # (pid, create time) -> CPU seconds at the last sample
        self._ranks: dict[tuple[int, float], Optional[int]] = {}  # (pid, create time) -> its RANK, None: none (yet)
        self._counted: dict[tuple[int, float], float] = {}  # (pid, create time) -> its CPU seconds counted
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._wall = time.perf_counter()
        self.sample(count=False)  # what the tree used before is not counted
        self._start = self._wall

    def sample(self, count: bool = True) -> None:
        try:
            tree = [self.root] + self.root.children(recursive=True)
        except psutil.Error:
            return
        used, rss = 0.0, 0
        for proc in tree:
            try:
                key = (proc.pid, proc.create_time())
                times = proc.cpu_times()
                rss += proc.memory_info().rss
                if self._ranks.get(key) is None:
                    self._ranks[key] = rank_of(proc)
            except psutil.Error:
                continue
            now = times.user + times.system
            if count:
                used += now - self._last.get(key, 0.0)
                self._counted[key] = self._counted.get(key, 0.0) + now - self._last.get(key, 0.0)
            self._last[key] = now
        wall = time.perf_counter()
        if count:
            self.cpu_seconds += used
            self.busy.append(used / max(wall - self._wall, 1e-9) / self.cores)
            self.machine_cpu.append(psutil.cpu_percent(None))
            self.peak_rss = max(self.peak_rss, rss)
            if self.gpus:
                now_gpu = gpu_utilisation(self.gpus)
                if now_gpu is None:  # nvidia-smi hung: no more GPU samples
                    self.gpus = []
                for uuid, value in (now_gpu or {}).items():
                    self.gpu[uuid].append(value)
        else:
            psutil.cpu_percent(None)  # the machine's next sample covers the time since now
        self._wall = wall

    @property
    def mean_busy(self) -> float:
        """CPU seconds of the tree / (wall seconds x cores) over the sampled time."""
        return self.cpu_seconds / max(self._wall - self._start, 1e-9) / self.cores

    @property
    def rank_cpu_seconds(self) -> dict[int, float]:
        """CPU seconds each rank's processes used (from the first sample on), by rank."""
        seconds: dict[int, float] = {}
        for key, used in self._counted.items():
            rank = self._ranks.get(key)
            if rank is not None:
                seconds[rank] = seconds.get(rank, 0.0) + used
        return seconds

    @property
    def rank_cores_busy(self) -> dict[int, float]:
        """Cores each rank kept busy: its CPU seconds (with its env processes) / the sampled wall seconds."""
        wall = max(self._wall - self._start, 1e-9)
        return {rank: seconds / wall for rank, seconds in sorted(self.rank_cpu_seconds.items())}

    def __enter__(self) -> "TreeSampler":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Measured:
    output: str
    returncode: int
    wall_s: float
    tree_busy: float
    """mean share of the usable cores the process tree kept busy"""
    tree_busy_p90: float
    machine_cpu_percent: Optional[float]
    """all processes of the machine (others' included)"""
    gpu_percent: Optional[float]
    """mean utilisation of the visible GPUs (None: no GPU, or no sample)"""
    peak_rss_mib: float
    gpu_percents: dict[str, float] = field(default_factory=dict)
    """mean utilisation of each visible GPU, by UUID"""
    rank_cores_busy: dict[int, float] = field(default_factory=dict)
    """cores each torchrun rank kept busy over the run's wall time (its CPU time with its env processes), by rank;
    empty for a run without ranks"""


def md_table(header: Sequence[Any], rows: Iterable[Sequence[Any]]) -> list[str]:
    """The lines of a markdown table (an empty cell is written `| |`)."""

    def line(cells: Sequence[Any]) -> str:
        return "|" + "|".join(f" {c} " if str(c) else " " for c in cells) + "|"

    return [line(header), "|" + "---|" * len(header), *map(line, rows)]


def failed_row(columns: int, first: Any, error: str) -> list[Any]:
    """A table's row of a run that failed: its name, the error, empty cells."""
    return [first, f"failed: {error}"] + [""] * (columns - 2)


def file_tag(name: str) -> str:
    """A machine's or GPU's name as a file name's part: letters and digits, the rest as single dashes."""
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")


def repo_env(extra: Optional[dict[str, str]] = None) -> dict[str, str]:
    """This environment with the repository on PYTHONPATH (and `extra`)."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path, **(extra or {}))


def run_measured(
    command: list[str],
    cwd: str,
    timeout: float,
    interval: float = 0.5,
    gpus: Optional[Sequence[str]] = None,
    env: Optional[dict[str, str]] = None,
    grace: float = TERMINATE_GRACE_S,
    started: Optional[list[subprocess.Popen]] = None,
) -> Measured:
    """Run `command` with the repository on PYTHONPATH, measuring it (TreeSampler) on the GPUs `gpus` (UUIDs;
    default: every visible one). A run past `timeout` is stopped with all its processes, which get `grace` seconds
    before SIGKILL. The process is appended to `started` when given (a caller that is stopped itself can then stop
    it, wherever the stop finds this function)."""
    if gpus is None:
        gpus = [gpu.uuid for gpu in visible_gpus()]
    start = time.perf_counter()
    # a process group of its own, so that a stop reaches torchrun's ranks and env processes too; in this session, so
    # that the load the benchmark puts alongside (its busy processes) competes with the run's threads one for one
    proc = subprocess.Popen(
        command, cwd=cwd, env=repo_env(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **own_group()
    )
    if started is not None:
        started.append(proc)
    with TreeSampler(proc.pid, interval, gpus=gpus) as tree:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_process_groups([proc], grace)
            out = proc.communicate()[0] + f"\n(stopped after {timeout:.0f} s)"
        except BaseException:  # Ctrl-C, SIGTERM: no run left behind
            stop_process_groups([proc], grace)
            raise
    per_gpu = {uuid: float(np.mean(values)) for uuid, values in tree.gpu.items() if values}
    return Measured(
        output=out,
        returncode=proc.returncode,
        wall_s=time.perf_counter() - start,
        tree_busy=tree.mean_busy,
        tree_busy_p90=float(np.percentile(tree.busy, 90)) if tree.busy else float("nan"),
        machine_cpu_percent=float(np.mean(tree.machine_cpu)) if tree.machine_cpu else None,
        gpu_percent=float(np.mean(list(per_gpu.values()))) if per_gpu else None,
        peak_rss_mib=tree.peak_rss / 2**20,
        gpu_percents=per_gpu,
        rank_cores_busy=tree.rank_cores_busy,
    )
