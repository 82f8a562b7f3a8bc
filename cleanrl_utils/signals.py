"""A training process on a signal or a fault: Ctrl-C while it starts (one line, from this module's import on), SIGTERM
or Ctrl-C in the run (`StopSignals`), env workers shielded from Ctrl-C, a full disk (one line on how to resume)."""

import contextlib
import errno
import os
import shutil
import signal
import sys
import threading
import time
from typing import Iterator, Optional


def _interrupted_while_starting(signum, frame):
    print("\ninterrupted while starting; no iteration ran", file=sys.stderr, flush=True)
    raise SystemExit(130)


signal.signal(signal.SIGINT, _interrupted_while_starting)


class StopSignals:
    """SIGTERM/Ctrl-C: `requested` (the signal), to checkpoint and exit after the iteration; a second Ctrl-C 2 s or
    more later (not torchrun's copy of the first) exits at once with status 130. Only `say` prints."""

    def __init__(self, say: bool = True) -> None:
        self.requested, self.at, self.say = 0, 0.0, say
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum, frame) -> None:
        if self.requested and signum == signal.SIGINT and time.time() - self.at > 2:
            if self.say:
                print("\ninterrupted; the last checkpoint is kept", file=sys.stderr)
            raise SystemExit(130)
        if not self.requested:
            self.requested, self.at = signum, time.time()
            if self.say:
                print("\nstopping at the end of this iteration (a checkpoint will be saved)", file=sys.stderr)


@contextlib.contextmanager
def interrupts_ignored() -> Iterator[None]:
    """Processes started inside (env workers) keep SIGINT blocked: this process stops them; it gets its Ctrl-C after."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def full_disk(exc: Optional[BaseException]) -> Optional[OSError]:
    """The full disk's OSError that `exc` is or comes from (torch raises a RuntimeError of its own from it), or None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def full_disk_line(err: OSError, command: str, checkpoint: str) -> str:
    """The error line of a run that a full disk (`err`) stopped; `command` resumes it from its `checkpoint` file."""
    folder = os.path.abspath(os.path.dirname(err.filename if isinstance(err.filename, str) else checkpoint))
    free = shutil.disk_usage(folder).free / 2**20
    fix = f"its last checkpoint is kept: free some space, then resume with: {command}"
    if not os.path.exists(checkpoint):
        fix = "it has no checkpoint yet: free some space, then start it again"
    return f"error: no space left on the disk of {folder} ({free:.0f} MiB free), so the run stopped; {fix}"


def report_full_disk(command: str, checkpoint: str) -> None:
    """From here on a full disk ends this process with `full_disk_line` (a thread: silently; the writer re-raises)."""
    previous, previous_in_thread = sys.excepthook, threading.excepthook

    def on_exception(kind, exc, tb) -> None:
        if (err := full_disk(exc)) is None:
            return previous(kind, exc, tb)
        print(full_disk_line(err, command, checkpoint), file=sys.stderr, flush=True)

    def on_exception_in_thread(hook: threading.ExceptHookArgs) -> None:
        if full_disk(hook.exc_value) is None:
            previous_in_thread(hook)

    sys.excepthook, threading.excepthook = on_exception, on_exception_in_thread
