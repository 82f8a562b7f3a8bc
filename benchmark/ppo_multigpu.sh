#!/usr/bin/env bash
# Data-parallel PPO sweep, as in CleanRL's benchmark/ppo_multigpu.sh: cleanrl/ppo_atari_multigpu.py (10M steps,
# 16 envs in all, split over 2 ranks) under torchrun on one machine with 2 GPUs, on Pong, BeamRider and Breakout,
# 3 seeds each: 9 runs, one at a time (each uses both GPUs). Not measured on GPUs yet: if the game emulators
# are the bottleneck each rank keeps its single-GPU speed, so at ~1,000 steps/s per GPU (an assumption) a run
# takes ~1.5 h and the sweep ~14 h.
#
# On a Slurm cluster, the same grid as multi-node jobs (one torchrun per node, 2 nodes x 8 GPUs per run):
#   python -m cleanrl_utils.benchmark --env-ids PongNoFrameskip-v4 BeamRiderNoFrameskip-v4 BreakoutNoFrameskip-v4 \
#       --command "python cleanrl/ppo_atari_multigpu.py --num-envs 128" --num-seeds 3 --workers 1 \
#       --slurm-template-path benchmark/slurm_multinode.template --slurm-nodes 2 --slurm-gpus-per-task 8
# Extra flags go to the sweep (e.g. `--workers 0` only prints the commands).
set -euo pipefail
HELP_MODULE=cleanrl_utils.benchmark source "$(dirname "$0")/usage.sh"
cd "$(dirname "$0")/.."

python -m cleanrl_utils.benchmark \
    --env-ids PongNoFrameskip-v4 BeamRiderNoFrameskip-v4 BreakoutNoFrameskip-v4 \
    --command "torchrun --standalone --nnodes=1 --nproc-per-node=2 cleanrl/ppo_atari_multigpu.py --num-envs 16" \
    --num-seeds 3 \
    --workers 1 \
    "$@"
