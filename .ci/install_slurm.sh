#!/usr/bin/env bash
# Installs Debian's Slurm (controller, node daemon, client) and munge for the throwaway two-node test cluster
# started by tests/slurm_cluster.py. No daemon is enabled or started here: the tests start their own as root.
set -euo pipefail
if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
    && command -v munged >/dev/null; then
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client munge
