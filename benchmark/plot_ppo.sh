#!/usr/bin/env bash
# Learning curves and final-return tables of the sweeps of benchmark/ppo.sh and benchmark/ppo_multigpu.sh, read
# from the TensorBoard logs in runs/ (needs `pip install -e '.[plot]'`): docs/ppo_classic_control.{png,svg,md} and
# docs/ppo_atari.{png,svg,md} (ppo_atari.py and ppo_atari_multigpu.py overlaid per game). A sweep with no runs in
# runs/ yet is skipped. Takes seconds to a minute on any CPU (reading the event files dominates).
# Extra flags go to cleanrl_utils/plot.py, e.g. `bash benchmark/plot_ppo.sh --formats png`.
set -euo pipefail
HELP_MODULE=cleanrl_utils.plot source "$(dirname "$0")/usage.sh"
cd "$(dirname "$0")/.."
mkdir -p docs

plot() {  # plot NAME RUN_GLOB FLAGS...: docs/NAME.{png,svg} and the table in docs/NAME.md
    local name=$1 pattern=$2
    shift 2
    if ! compgen -G "runs/$pattern" >/dev/null; then
        echo "skipping docs/$name: no runs/$pattern yet"
        return
    fi
    python -m cleanrl_utils.plot --run-dirs runs --output "docs/$name" "$@" | tee "docs/$name.md"
}

plot ppo_classic_control "*__ppo__*" \
    --exp-names ppo \
    --env-ids CartPole-v1 Acrobot-v1 MountainCar-v0 \
    "$@"

plot ppo_atari "*NoFrameskip-v4__ppo_atari*" \
    --exp-names ppo_atari ppo_atari_multigpu \
    --env-ids PongNoFrameskip-v4 BeamRiderNoFrameskip-v4 BreakoutNoFrameskip-v4 \
    "$@"
