#!/usr/bin/env bash
# Statements often made about CleanRL-style parallel env sampling, measured on this machine:
#   single-env single-process baseline vs 8 envs on each backend (SPS, CPU use of the whole process tree),
#   an envs-per-core sweep on the fastest backend, 1 vs 2 torchrun ranks, the gradient all-reduce on gloo loopback
#   at 2 and 4 ranks and a ring all-reduce model of multi-node efficiency from it, and the learning claims from the
#   learning benchmark's exports (docs/results/quick/).
# Writes the claims section of docs/results.md (only that part), docs/results/seed_claims_<tag>.json and a PNG
# (the `plot` extra: matplotlib).
#
#   bash benchmark/seed_claims.sh              # the measurement: about 30 min on an idle 2-core machine
#   bash benchmark/seed_claims.sh --quick      # smoke run, 1-3 minutes; its figures measure nothing (its report:
#                                              # docs/results/seed_claims_<tag>_quick.md, results.md untouched)
#   bash benchmark/seed_claims.sh --repeats 1 --iterations 10   # shorter (noisier)
#   bash benchmark/seed_claims.sh --report-only  # no measurement: the last one's report, with the learning claims
#                                              # re-read from docs/results/quick/ (learning runs that finished since)
#
# Run it on an otherwise idle machine: the CPU-use figures are of the measured process tree, but its speed is not.
# Ctrl-C / SIGTERM stop it cleanly: the run in progress is stopped, what was measured so far goes to
# docs/results/seed_claims_<tag>.partial.json, docs/results.md is left as it was.
set -euo pipefail
HELP_MODULE=benchmark.lab.seed_claims source "$(dirname "$0")/usage.sh"
cd "$(dirname "$0")/.."

python -m benchmark.lab.seed_claims "$@"
