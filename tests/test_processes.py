"""Stopping a run's process group waits for everything in it, not just the process the runner started."""

from __future__ import annotations

import subprocess
import sys
import time

from cleanrl_utils.launch.processes import stop_process_groups

# the child keeps working for a moment after SIGTERM (a training run saving its checkpoint), then writes its last line
CHILD = (
    "import signal, sys, time, pathlib\n"
    "def stop(*_):\n"
    "    time.sleep(1.0)\n"
    "    pathlib.Path(sys.argv[1]).write_text('stopped cleanly')\n"
    "    sys.exit(143)\n"
    "signal.signal(signal.SIGTERM, stop)\n"
    "pathlib.Path(sys.argv[1] + '.ready').write_text('')\n"
    "time.sleep(60)\n"
)


def test_a_shell_that_dies_at_once_is_not_taken_for_its_run_still_stopping(tmp_path):
    script, out = tmp_path / "child.py", tmp_path / "last_words"
    script.write_text(CHILD)
    # the shell does not exec the python it runs (two commands), and dies of the SIGTERM at once
    proc = subprocess.Popen(f"{sys.executable} {script} {out}; true", shell=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "last_words.ready").exists():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    start = time.monotonic()
    stop_process_groups([proc], grace=10)
    assert out.read_text() == "stopped cleanly"  # the run's last words are written before the stop returns
    assert time.monotonic() - start < 9  # and the stop did not wait for the grace period to run out
