#!/usr/bin/env bash
# Installs, for the throwaway two-node test cluster of tests/slurm_cluster.py, Debian's packages
#   slurmctld slurmd slurm-client munge  (apt-get, needs root)
# and leaves no service behind: the packages' munge, slurmctld and slurmd units are neither started by the install
# (a policy-rc.d for the duration of apt-get) nor enabled afterwards. The tests start their own daemons, as root,
# in a temporary folder, and stop them at the end of the session.
set -euo pipefail
UNITS=(munge slurmctld slurmd)
if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
    && command -v munged >/dev/null; then
    echo "install_slurm: slurmctld, slurmd, slurm-client and munge are installed already"
    exit 0
fi
echo "install_slurm: apt-get install slurmctld slurmd slurm-client munge (services left disabled and stopped)"
export DEBIAN_FRONTEND=noninteractive
# invoke-rc.d and deb-systemd-invoke ask policy-rc.d whether a package may start its service: 101 = no
policy=/usr/sbin/policy-rc.d
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
fi
apt-get update -q
apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client munge
for unit in "${UNITS[@]}"; do
    # the packages' postinst enables the units (systemd and SysV links); undo that. `systemctl disable` edits the
    # links without a running systemd too; stop only where systemd runs (the policy above kept them from starting)
    if command -v systemctl >/dev/null; then
        if [[ -d /run/systemd/system ]]; then
            systemctl stop "$unit.service" >/dev/null 2>&1 || true
        fi
        systemctl disable "$unit.service" >/dev/null 2>&1 || true
    else
        rm -f /etc/systemd/system/*.wants/"$unit.service"
        if command -v update-rc.d >/dev/null; then
            update-rc.d "$unit" disable >/dev/null 2>&1 || true
        fi
    fi
done
enabled=$(ls /etc/systemd/system/*.wants/ /etc/rc[2-5].d/ 2>/dev/null \
    | grep -E "^(S[0-9]*)?($(IFS='|'; echo "${UNITS[*]}"))(\.service)?$" | sort -u || true)
if [[ -n $enabled ]]; then
    echo "install_slurm: error: still enabled: $(echo $enabled)" >&2
    exit 1
fi
echo "install_slurm: done; no munge/slurm service enabled or started"
