"""Imported at a script's top: Ctrl-C before the run's own stop handling (`StopSignals`) is in place stops with one
line, not the traceback of whatever was loading (torch, the emulator, the envs)."""

import signal
import sys


def _interrupted(signum, frame):
    print("\ninterrupted while starting; no iteration ran", file=sys.stderr, flush=True)
    raise SystemExit(130)


signal.signal(signal.SIGINT, _interrupted)
