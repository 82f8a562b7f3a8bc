"""`python -m cleanrl_utils.launch.rendezvous ARGS`: `torchrun ARGS` that says how many nodes joined while it waits,
and ends with one line, not a traceback, at the join timeout (docs/multigpu.md)."""

from __future__ import annotations

import base64
import os
import pickle
import re
import signal
import subprocess
import sys
import time
from datetime import timedelta

from cleanrl_utils.launch.cleanrl_flags import value_of


def joined(endpoint: str, run_id: str) -> int | None:
    """Nodes in the c10d rendezvous's current round (read from its store), or None if it cannot be read."""
    try:
        import torch.distributed as dist

        host, _, port = endpoint.rpartition(":")
        store = dist.TCPStore(host, int(port or 29400), is_master=False, timeout=timedelta(seconds=3))
        key = f"torch.rendezvous.{run_id}"
        return len(pickle.loads(base64.b64decode(store.get(key))).participants) if store.check([key]) else 0
    except Exception:
        return None


def started_workers(pid: int) -> bool:
    try:
        return bool(open(f"/proc/{pid}/task/{pid}/children").read().split())
    except OSError:
        return True  # not Linux: cannot tell, say nothing


def main(args: list[str]) -> int:
    nodes = (value_of(args, "--nnodes") or "1").split(":")[-1]  # torchrun's flags, either spelling
    endpoint, run_id = value_of(args, "--rdzv-endpoint") or "", value_of(args, "--rdzv-id") or "none"
    conf = value_of(args, "--rdzv-conf") or ""
    timeout = float((re.findall(r"join_timeout=(\d+)", conf) or ["600"])[0])
    torchrun = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *args], start_new_session=True)
    began, said = time.monotonic(), -20.0
    try:
        while torchrun.poll() is None and int(nodes) > 1 and not started_workers(torchrun.pid):
            waited = time.monotonic() - began
            count = joined(endpoint, run_id) if waited > 5 else None
            if waited >= timeout - 1:
                os.killpg(torchrun.pid, signal.SIGKILL)  # no worker has started: nothing to lose
                torchrun.wait()
                print(f"error: {count if count is not None else 'some'} of {nodes} nodes joined the rendezvous at "
                      f"{endpoint} within {timeout:.0f} s; start the missing ones with the same --rdzv-endpoint and "
                      "--rdzv-id (or give them longer: --rdzv-conf join_timeout=SECONDS)", file=sys.stderr, flush=True)  # fmt: skip
                return 1
            if waited >= 8 and waited - said >= 30:
                print(f"waiting for nodes: {count if count is not None else '?'} of {nodes} joined the rendezvous at "
                      f"{endpoint} ({waited:.0f} s; torchrun gives up after {timeout:.0f} s: --rdzv-conf "
                      "join_timeout=SECONDS)", flush=True)  # fmt: skip
                said = waited
            time.sleep(1)
        return torchrun.wait()
    except KeyboardInterrupt:
        torchrun.send_signal(signal.SIGINT)
        return torchrun.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
