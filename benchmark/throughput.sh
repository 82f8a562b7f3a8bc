#!/usr/bin/env bash
# Throughput benchmark, one command (docs/throughput.md explains the numbers and the targets):
#   physical bound (raw emulator x cores), env-only steps/s per backend at 8/16/32 envs, the Nature CNN's
#   inference/training samples/s per form (layout, torch.compile, threads) and PPO's compute bound, end-to-end SPS
#   of cleanrl/ppo_atari.py per backend with and without --overlap (time split, CPU/GPU utilisation, peak RSS),
#   the fastest plain backend again with OpenMP workers spinning briefly and, for both thread policies, with one
#   busy process per core alongside (loaded rows; --no-loaded leaves them out), and 1 vs 2 torchrun ranks of
#   cleanrl/ppo_atari_multigpu.py.
# Writes docs/benchmarks/throughput_<machine>.md, .json and two PNG plots (needs the `plot` extra: matplotlib).
# 5-8 minutes on a 2-core CPU VM (301 s and 298 s measured on a fast hour; the same VM's slow hours take up to 1.6x
# longer), plus about 2 minutes for the loaded rows; runs unchanged on a GPU machine (the network then runs on cuda).
# Extra flags go to the module, e.g. `bash benchmark/throughput.sh --tag mybox --no-compile --seconds 5`.
set -euo pipefail
cd "$(dirname "$0")/.."

python -m cleanrl_utils.throughput "$@"
