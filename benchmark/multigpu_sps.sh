#!/usr/bin/env bash
# Steps per second of cleanrl/ppo_atari_multigpu.py with 1 rank and with 2 ranks on this machine (CPU, gloo), the
# same global batch for both (NUM_ENVS envs in all x NUM_STEPS steps), and the cores each rank kept busy.
#
#   bash benchmark/multigpu_sps.sh                     # Breakout, 8 envs in all, 128 steps, 3 iterations
#   RANKS="1 2 4" ITERATIONS=5 bash benchmark/multigpu_sps.sh
#   EXTRA_ARGS="--torch-threads 1" bash benchmark/multigpu_sps.sh   # any further flags of the script
#
# Settings (environment variables): ENV_ID, NUM_ENVS, NUM_STEPS, ITERATIONS, RANKS, VECTOR_ENV (default sync),
# EXTRA_ARGS, TORCHRUN (default: torch.distributed.run of this python), OUT (default: a temporary folder).
# Threads are the script's defaults (the cores this process may use // ranks per rank, unless --torch-threads), read
# from its first line. SPS is the last `charts/SPS` rank 0 logs: global steps over the wall time of the training loop
# (start-up and env creation not counted); steady SPS the steps per second after the first iteration. "Cores busy"
# is a rank's CPU time (with its env processes) over the run's wall time, start-up included, measured from outside
# (benchmark/lab/multigpu_sps.py). The machine's load average is printed before and after: on a shared machine it
# decides the figures as much as the code does. Prints a markdown table; each run's output and logs go to $OUT.
set -euo pipefail
source "$(dirname "$0")/usage.sh"

cd "$(dirname "$0")/.."
export OUT=${OUT:-$(mktemp -d)}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec python -m benchmark.lab.multigpu_sps
