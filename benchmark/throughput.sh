#!/usr/bin/env bash
# Throughput benchmark, one command (docs/throughput.md explains the numbers and the targets):
#   physical bound (raw emulator x cores), env-only steps/s per backend at 8/16/32 envs, the Nature CNN's
#   inference/training samples/s per form (layout, torch.compile, threads; the scripts' form: channels_last, the
#   whole batch on all cores; the batch in slices for comparison) and PPO's compute bound, end-to-end SPS of
#   cleanrl/ppo_atari.py per backend (time split, CPU/GPU utilisation, peak RSS), the fastest backend again with
#   OpenMP workers spinning briefly, the defaults and the spin also with one busy process per core alongside
#   (loaded rows; --no-loaded leaves them out), and 1 vs 2 torchrun ranks of cleanrl/ppo_atari_multigpu.py.
# Writes docs/benchmarks/throughput_<machine>.md, .json and two PNG plots (needs the `plot` extra: matplotlib).
# A few minutes on a 2-core CPU machine (the report says how long it took); runs unchanged on a GPU machine (the
# network then runs on cuda).
# Extra flags go to the module, e.g. `bash benchmark/throughput.sh --tag mybox --no-compile --seconds 5`.
set -euo pipefail
HELP_MODULE=benchmark.lab.throughput source "$(dirname "$0")/usage.sh"
cd "$(dirname "$0")/.."

python -m benchmark.lab.throughput "$@"
