"""Imported at a script's top: Ctrl-C before `StopSignals` is in place stops with one line, not a loading traceback."""

import signal
import sys


def _interrupted(signum, frame):
    print("\ninterrupted while starting; no iteration ran", file=sys.stderr, flush=True)
    raise SystemExit(130)


signal.signal(signal.SIGINT, _interrupted)
