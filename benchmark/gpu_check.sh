#!/usr/bin/env bash
# Checks a GPU machine in at most 9 minutes (README: "Checking a GPU machine"): torch/CUDA/NCCL/cuDNN versions;
# ppo_atari.py on cuda (train and save, SIGTERM stop, resume on cuda and on CPU, the eval CLI); host syncs per
# rollout step and minibatch; steady SPS per backend, with more envs and with --compile; NCHW vs channels_last;
# ppo_atari_multigpu.py under torchrun (1 rank on nccl, 2 ranks on the one GPU, an elastic restart, a stop and
# resume); GPU utilisation. One PASS/FAIL line per step; the figures go to docs/benchmarks/gpu_<GPU name>.md + .json.
#
#   bash benchmark/gpu_check.sh [--wheels FOLDER] [--budget SECONDS] [--out FOLDER]
#   bash benchmark/gpu_check.sh --cpu      # every step on CPU with tiny sizes; report in a temporary folder
#
# --wheels FOLDER: first install the project (torch as installed) from the wheels of benchmark/gpu_wheels.sh, for
# a machine without a package registry. Exit status 0 when every step passed.
set -euo pipefail
if [[ " $* " == *" --help "* || " $* " == *" -h "* ]]; then
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    python -m cleanrl_utils.gpu_check --help 2>/dev/null | sed -n '/options/,$p' || true
    exit 0
fi
cd "$(dirname "$0")/.."
wheels=""
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --wheels) wheels="${2:?--wheels needs a folder}"; shift 2 ;;
        *) args+=("$1"); shift ;;
    esac
done
if [ -n "$wheels" ]; then
    [ -d "$wheels" ] || { echo "error: no wheel folder $wheels: make it with benchmark/gpu_wheels.sh" >&2; exit 1; }
    # the installed torch satisfies the project's torch requirement: nothing of it is replaced
    python -m pip install -q --no-index --find-links "$wheels" -e . envpool \
        || python -m pip install -q --no-index --find-links "$wheels" -e .
fi
if ! python -c "import cleanrl_utils.gpu_check" 2>/dev/null; then
    echo "error: the project's dependencies are missing: pip install -e ., or --wheels FOLDER from benchmark/gpu_wheels.sh" >&2
    exit 1
fi
# the steps keep to their --budget (540 s by default); this is the backstop
exec timeout --signal=TERM 600 python -m cleanrl_utils.gpu_check "${args[@]}"
