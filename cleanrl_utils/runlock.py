"""A run's folder: its name (`run_name_stem`), and one run in it: its writer holds an OS lock on `run.lock` in it while
it lives (the kernel lets go however it dies: the descriptor is never closed); a second process stops before it writes anything, naming the holder; a restarted attempt (Slurm requeue,
torchrun restart) waits up to CLEANRL_LOCK_WAIT s (120) for the old one, which may still be saving its checkpoint."""

import fcntl
import os
import socket
import time

from cleanrl_utils.validation import fail

LOCK_FILE = "run.lock"


def restarted() -> bool:
    return any(int(os.environ.get(name) or 0) > 0 for name in ("SLURM_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"))


def hold_run_folder(run_dir: str) -> None:
    """Lock `run_dir` for this process, or stop with one line naming the process that holds it."""
    fd = os.open(os.path.join(run_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    said, deadline = False, time.time() + (float(os.environ.get("CLEANRL_LOCK_WAIT", "120")) if restarted() else 0)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            holder = os.pread(fd, 300, 0).decode(errors="replace").strip() or "a process that has not said who it is"
            if time.time() >= deadline:
                os.close(fd)
                fail(f"{run_dir} is in use by another run ({holder}): let it finish, or pass another --run-name")
            if not said:
                print(f"note: waiting for the previous attempt ({holder}) to let go of {run_dir}", flush=True)
                said = True
            time.sleep(1)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"host {socket.gethostname()}, pid {os.getpid()}, since {time.strftime('%F %T')}\n".encode(), 0)


def run_name_stem(env_id: str | None, exp_name: str, seed: int) -> str:
    """`{env_id}__{exp_name}__{seed}` ('/' as '-'): a run's name before its start time; a sweep's run's whole name."""
    return "__".join(str(part) for part in (env_id, exp_name, seed) if part is not None).replace("/", "-")
