"""A throwaway two-node Slurm cluster for tests: munged, slurmctld and two slurmd (n1, n2) on this host.

Everything lives in a temporary folder and runs as root in the foreground of processes this module starts
(no systemd, no /etc changes). Needs Debian's `slurmctld slurmd slurm-client munge` (`.ci/install_slurm.sh`) and
root; without them the tests that use the fixture skip with the reason, unless CLEANRL_REQUIRE_SLURM=1 (set by
`.ci/run`) makes that a failure.

Usage from any test file (the fixture is exported by tests/conftest.py)::

    def test_x(slurm_cluster):
        subprocess.run(["sbatch", "-W", "job.sh"], env=slurm_cluster.env, check=True)

`slurm_cluster.env` is `os.environ` plus `SLURM_CONF`; `slurm_cluster.conf_path` is the slurm.conf written here.
Both nodes reach each other over 127.0.0.1, so jobs that rendezvous on a node's `NodeAddr` work across them.
The daemons listen on free ports picked at start (so two test sessions on one machine do not collide).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

NODES = ("n1", "n2")
CPUS_PER_NODE = 2
MEMORY_MB_PER_NODE = 4000
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo")


@dataclass
class SlurmCluster:
    root: Path
    conf_path: Path
    env: dict[str, str]
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def logs(self, lines: int = 30) -> str:
        """Tail of every daemon log, for assertion messages."""
        parts = []
        for log in sorted((self.root / "log").glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {log.name}\n" + "\n".join(tail))
        return "\n".join(parts)

    def run(self, *cmd: str, timeout: float = 30) -> subprocess.CompletedProcess:
        """Run a Slurm client command against this cluster, capturing text output."""
        return subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, timeout=timeout)


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _write_config(root: Path, ports: list[int]) -> Path:
    host = socket.gethostname()
    sock = root / "munge" / "munge.socket.2"
    lines = [
        "ClusterName=cleanrltest",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={ports[0]}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={sock},cred_expire=10",  # a requeued job may start again after this many seconds
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}/%n",
        f"SlurmctldPidFile={root / 'run' / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'run'}/slurmd-%n.pid",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log'}/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SlurmdParameters=config_overrides",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "MailProg=/bin/true",
        "ReturnToService=2",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=sched_interval=1",
        "MinJobAge=300",
        "InactiveLimit=0",
        "KillWait=5",
        "Waittime=0",
    ]
    for name, port in zip(NODES, ports[1:]):
        lines.append(
            f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} "
            f"CPUs={CPUS_PER_NODE} RealMemory={MEMORY_MB_PER_NODE} State=UNKNOWN"
        )
    lines.append(f"PartitionName=debug Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP")
    conf = root / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


def _start(cluster: SlurmCluster, name: str, cmd: list[str]) -> None:
    out = open(cluster.root / "log" / f"{name}.stdout.log", "w")
    cluster.procs[name] = subprocess.Popen(
        cmd, env=cluster.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )
    out.close()


def _wait_for(cluster: SlurmCluster, what: str, check, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, proc in cluster.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode} while waiting for {what}\n{cluster.logs()}")
        if check():
            return
        time.sleep(0.3)
    raise RuntimeError(f"timed out after {timeout}s waiting for {what}\n{cluster.logs()}")


def _nodes_idle(cluster: SlurmCluster) -> bool:
    res = cluster.run("sinfo", "-h", "-N", "-o", "%N %t")
    states = dict(line.split() for line in res.stdout.splitlines() if line.strip())
    if any(s.rstrip("*~#") in ("down", "drain", "drng", "unk") for s in states.values()):
        cluster.run("scontrol", "update", f"NodeName={','.join(NODES)}", "State=RESUME")
    return res.returncode == 0 and all(states.get(n, "").rstrip("*") == "idle" for n in NODES)


def missing_requirements() -> str | None:
    """Why this machine cannot host the test cluster, or None if it can."""
    missing = [d for d in DAEMONS if shutil.which(d) is None and not Path("/usr/sbin", d).exists()]
    if missing:
        return f"Slurm/munge not installed ({', '.join(missing)} missing); sudo bash .ci/install_slurm.sh installs them"
    if os.geteuid() != 0:
        return "the throwaway Slurm cluster runs its daemons as root; run the suite as root for these tests"
    return None


def start_cluster(root: Path) -> SlurmCluster:
    reason = missing_requirements()
    if reason:
        raise RuntimeError(reason)
    for sub in ("munge", "munge-key", "state", "run", "log", *(f"spool/{n}" for n in NODES)):
        (root / sub).mkdir(parents=True, exist_ok=True)
    # munged refuses a key folder others can read and a socket folder others cannot traverse
    os.chmod(root / "munge-key", 0o700)
    os.chmod(root / "munge", 0o755)
    key = root / "munge-key" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)

    conf = _write_config(root, _free_ports(1 + len(NODES)))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    cluster = SlurmCluster(root=root, conf_path=conf, env=env)
    try:
        _start_daemons(cluster, key)
    except BaseException:
        stop_cluster(cluster)
        raise
    return cluster


def _start_daemons(cluster: SlurmCluster, key: Path) -> None:
    root, conf = cluster.root, cluster.conf_path
    sbin = lambda name: shutil.which(name) or f"/usr/sbin/{name}"  # noqa: E731
    sock = root / "munge" / "munge.socket.2"
    _start(
        cluster,
        "munged",
        [
            sbin("munged"),
            "--foreground",
            "--force",
            f"--socket={sock}",
            f"--key-file={key}",
            f"--pid-file={root / 'run' / 'munged.pid'}",
            f"--log-file={root / 'log' / 'munged.log'}",
            f"--seed-file={root / 'munge-key' / 'munged.seed'}",
        ],
    )
    _wait_for(cluster, "the munge socket", sock.exists, timeout=20)
    _start(cluster, "slurmctld", [sbin("slurmctld"), "-D", "-i", "-f", str(conf)])
    _wait_for(cluster, "slurmctld", lambda: cluster.run("scontrol", "ping").returncode == 0)
    for name in NODES:
        _start(cluster, f"slurmd-{name}", [sbin("slurmd"), "-D", "-N", name, "-f", str(conf)])
    _wait_for(cluster, "both nodes idle", lambda: _nodes_idle(cluster))


def stop_cluster(cluster: SlurmCluster) -> None:
    """Cancel leftover jobs, then stop the daemons this module started (by pid), last started first."""
    if "slurmctld" in cluster.procs and cluster.procs["slurmctld"].poll() is None:
        cluster.run("scancel", "--full", "--partition=debug")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and cluster.run("squeue", "-h").stdout.strip():
            time.sleep(0.5)
    for _name, proc in reversed(list(cluster.procs.items())):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A running two-node Slurm cluster for the whole test session; stopped and deleted afterwards."""
    reason = missing_requirements()
    if reason:
        if os.environ.get("CLEANRL_REQUIRE_SLURM") == "1":
            pytest.fail(f"CLEANRL_REQUIRE_SLURM=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    root = Path(tempfile.mkdtemp(prefix="slurm-test-"))
    cluster = None
    try:
        cluster = start_cluster(root)
        yield cluster
    finally:
        if cluster is not None:
            stop_cluster(cluster)
        shutil.rmtree(root, ignore_errors=True)
