#!/usr/bin/env bash
# The learning benchmark: does every backend learn Breakout as CleanRL does? Writes docs/results.md.
#
#   bash benchmark/learning.sh                 # the `quick` profile, all that has not finished yet, then the report
#   bash benchmark/learning.sh --only sync ale # a part: only these configs (docs/results.md: each run's time)
#
# quick: Breakout, 500k steps per run, CleanRL's hyperparameters: sync (seeds 1, 2), ale, envpool (seeds 1, 2),
# ppo_atari_multigpu.py on 2 torchrun ranks (4 envs each, the same global batch), and the single-env baseline of
# the claims about parallel sampling (sync_1env). Hours of a CPU machine in all. Stopping is safe
# (Ctrl-C, a scheduler's SIGTERM): a finished run is kept (exported to docs/results/quick/, commit it), a cut
# run keeps its checkpoint under runs/learning/ and resumes from it when this script is started again; the
# report is rebuilt from whatever has finished.
#
# bf16: `--profile bf16`, envpool with and without --bf16, seeds 1 and 2 each, 500k steps (docs/results_bf16.md).
#
# full: CleanRL's benchmark (Breakout, Pong, BeamRider; 10M steps; 3 seeds) is a cluster's job. Each of its runs
# is one line of `python -m benchmark.lab.learning commands --profile full`; as a Slurm job array through the
# runner (one GPU per task), one backend at a time:
#   python -m cleanrl_utils.benchmark --env-ids BreakoutNoFrameskip-v4 PongNoFrameskip-v4 BeamRiderNoFrameskip-v4 \
#       --command "python cleanrl/ppo_atari.py --vector-env envpool --exp-name envpool --runs-dir runs/learning" \
#       --num-seeds 3 --workers 1 --slurm-template-path benchmark/slurm_gpu.template
# then `python -m cleanrl_utils.plot --run-dirs runs/learning --output full_curves` for the curves and table.
set -euo pipefail
HELP_MODULE=benchmark.lab.learning source "$(dirname "$0")/usage.sh"
cd "$(dirname "$0")/.."
profile=()  # the report of the profile that ran
for ((i = 1; i <= $#; i++)); do [[ "${!i}" == --profile ]] && j=$((i + 1)) && profile=(--profile "${!j}"); done
status=0
python -m benchmark.lab.learning run "$@" || status=$?
python -m benchmark.lab.learning report "${profile[@]}"
exit "$status"
