#!/usr/bin/env bash
# Steps per second of cleanrl/ppo_atari_multigpu.py with 1 rank and with 2 ranks on this machine (CPU, gloo), the
# same global batch for both (NUM_ENVS envs in all x NUM_STEPS steps), and the cores each rank kept busy.
#
#   bash benchmark/multigpu_sps.sh                     # Breakout, 8 envs in all, 128 steps, 3 iterations
#   RANKS="1 2 4" ITERATIONS=5 bash benchmark/multigpu_sps.sh
#   EXTRA_ARGS="--torch-threads 1" bash benchmark/multigpu_sps.sh   # any further flags of the script
#
# Threads are the script's defaults (cleanrl_utils/placement.py: cores // ranks per rank, unless --torch-threads;
# the rollout's batch in slices on 1 thread each when a rank has 2+ cores and 8+ envs), read from its first line. SPS is the `steps_per_second` of the `perf:` line rank 0 prints at the end:
# global steps over the wall time of the training loop (start-up and env creation not counted). The machine's load
# average is printed before and after: on a shared machine it decides the figures as much as the code does.
# "Cores busy" is a rank's CPU time (with its env processes) over the wall time of its iterations.
# Prints a markdown table; the runs go to $OUT (a temporary folder by default).
set -euo pipefail
source "$(dirname "$0")/usage.sh"

cd "$(dirname "$0")/.."
ENV_ID=${ENV_ID:-BreakoutNoFrameskip-v4}
NUM_ENVS=${NUM_ENVS:-8}
NUM_STEPS=${NUM_STEPS:-128}
ITERATIONS=${ITERATIONS:-3}
RANKS=${RANKS:-"1 2"}
VECTOR_ENV=${VECTOR_ENV:-sync}
EXTRA_ARGS=${EXTRA_ARGS:-}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
if [[ -z "${TORCHRUN:-}" ]]; then
    TORCHRUN=$(command -v torchrun || true)
    # the same launcher, when the venv's bin folder is not on PATH
    [[ -n "$TORCHRUN" ]] || TORCHRUN="python -m torch.distributed.run"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

cores=$(nproc)
total=$((NUM_ENVS * NUM_STEPS * ITERATIONS))
echo "machine: $cores cores, $(uptime | sed 's/.*load average/load average/') (before)"
echo "workload: $ENV_ID, $NUM_ENVS envs in all ($VECTOR_ENV), $NUM_STEPS steps, $ITERATIONS iterations = $total steps" \
    "${EXTRA_ARGS:+($EXTRA_ARGS)}"
echo
echo "| ranks | envs per rank | torch threads per rank (rollout / update) | SPS | cores busy per rank |"
echo "|---|---|---|---|---|"
for ranks in $RANKS; do
    log="$OUT/ranks$ranks.log"
    $TORCHRUN --standalone --nnodes=1 --nproc_per_node="$ranks" cleanrl/ppo_atari_multigpu.py \
        --env-id "$ENV_ID" --num-envs "$NUM_ENVS" --num-steps "$NUM_STEPS" --total-timesteps "$total" \
        --vector-env "$VECTOR_ENV" --checkpoint-interval 0 --no-progress-bar \
        --runs-dir "$OUT/runs" --run-name "ranks$ranks" $EXTRA_ARGS >"$log" 2>&1 || { tail -n 20 "$log"; exit 1; }
    sps=$(sed -n 's/^perf: .* steps_per_second=\([0-9.]*\).*/\1/p' "$log")
    threads=$(sed -nE 's/.*torch ([0-9]+) thread\(s\) for inference \(the batch in ([0-9]+) slices in parallel\), ([0-9]+) for learning.*/\2 slices x \1 \/ \3/p' "$log")
    [[ -n "$threads" ]] || threads=$(sed -n 's/.*torch \([0-9]*\) thread(s) for inference, \([0-9]*\) for learning.*/\1 \/ \2/p' "$log")
    [[ -n "$threads" ]] || threads=$(sed -n 's/^run .*torch \([0-9]*\) thread.*/\1/p' "$log")
    [[ -n "$sps" ]] || { echo "no perf: line in $log"; tail -n 20 "$log"; exit 1; }
    busy=$(sed -n 's/^rank \([0-9]*\)\/[0-9]*: .* = \([0-9.]*\) cores busy$/\1 \2/p' "$log" | sort -n | cut -d' ' -f2)
    busy=$(echo $busy)  # one line
    echo "| $ranks | $((NUM_ENVS / ranks)) | $threads | $sps | $busy |"
done
echo
echo "load average after: $(uptime | sed 's/.*load average: //'); logs in $OUT"
