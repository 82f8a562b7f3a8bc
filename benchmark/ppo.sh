#!/usr/bin/env bash
# PPO sweeps, as in CleanRL's benchmark/ppo.sh (3 seeds each, CleanRL's default hyperparameters; logs to runs/,
# each run's output to benchmark_logs/, a summary table at the end; plot with benchmark/plot_ppo.sh).
#
# 1. Classic control: cleanrl/ppo.py (500k steps) on CartPole-v1, Acrobot-v1, MountainCar-v0: 9 runs, 3 at a time,
#    CPU only. ppo.py used 0.4 ms of CPU time per step (one thread, measured on a 2-core x86 machine), so a
#    run is ~3.5 CPU-minutes plus a few seconds of start-up: ~15 min for the sweep on a machine with 3 free cores.
# 2. Atari: cleanrl/ppo_atari.py (10M steps, 8 envs) on Pong, BeamRider and Breakout: 9 runs, one at a time on one
#    GPU. Not measured on a GPU yet: at ~1,000 steps/s on one GPU (an assumption) a run takes ~3 h and the sweep
#    ~1 day. Without a GPU the network dominates: 15 ms of CPU time per step on a 2-core x86 machine, ~40
#    CPU-hours per run.
#
# Extra flags go to both sweeps: `bash benchmark/ppo.sh --workers 0` only prints the 18 commands, and
# `--slurm-template-path benchmark/slurm_gpu.template` sends them to Slurm as job arrays instead.
set -euo pipefail
HELP_MODULE=cleanrl_utils.benchmark source "$(dirname "$0")/usage.sh"
cd "$(dirname "$0")/.."

python -m cleanrl_utils.benchmark \
    --env-ids CartPole-v1 Acrobot-v1 MountainCar-v0 \
    --command "python cleanrl/ppo.py --no-cuda" \
    --num-seeds 3 \
    --workers 3 \
    "$@"

python -m cleanrl_utils.benchmark \
    --env-ids PongNoFrameskip-v4 BeamRiderNoFrameskip-v4 BreakoutNoFrameskip-v4 \
    --command "python cleanrl/ppo_atari.py" \
    --num-seeds 3 \
    --workers 1 \
    "$@"
