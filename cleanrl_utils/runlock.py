"""One run per folder: its writer holds an OS lock on `run.lock` in it while it lives (the kernel lets go however it
dies); a second process stops before it writes anything, naming the holder; a restarted attempt (Slurm requeue,
torchrun restart) waits up to CLEANRL_LOCK_WAIT s (120) for the old one, which may still be saving its checkpoint."""

import fcntl
import glob
import os
import socket
import time

from cleanrl_utils.validation import fail

LOCK_FILE = "run.lock"
DEAD_ATTEMPTS = "dead_attempts"  # a run's logs of attempts that died before their first checkpoint
_held = []  # the open lock files of this process: closing one would let go of its lock


def restarted() -> bool:
    return any(int(os.environ.get(name) or 0) > 0 for name in ("SLURM_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"))


def hold_run_folder(run_dir: str, checkpoint_file: str) -> None:
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
    _held.append(fd)
    set_aside_dead_attempt(run_dir, checkpoint_file)


def set_aside_dead_attempt(run_dir: str, checkpoint_file: str) -> None:
    """Logs but no checkpoint: an attempt died before its first one; its event files go to `dead_attempts/` (unplotted)."""
    old = glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))
    if not old or os.path.exists(os.path.join(run_dir, checkpoint_file)):
        return
    folder = os.path.join(run_dir, DEAD_ATTEMPTS, time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(folder, exist_ok=True)
    for path in old:
        os.replace(path, os.path.join(folder, os.path.basename(path)))
    print(f"note: {run_dir} held the logs of an attempt that stopped before its first checkpoint: moved to {folder}")
