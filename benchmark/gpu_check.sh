#!/usr/bin/env bash
# Checks a GPU machine in at most 330 s (README: "Checking a GPU machine"). The correctness steps first:
# torch/CUDA/NCCL/cuDNN versions; ppo_atari.py on cuda (train and save, SIGTERM stop, resume on cuda and with
# --no-cuda, the eval CLI); host syncs per rollout step and minibatch; ppo_atari_multigpu.py under torchrun (1 rank
# on nccl, 2 ranks on the one GPU, an elastic restart, a stop and resume). Then throughput: NCHW vs channels_last;
# steady SPS of sync, ale and envpool (where installed), with --compile and with more envs; --bf16 against float32
# on the fastest eager run (float32, --bf16, float32 in turn); GPU utilisation.
# One PASS/FAIL line per step; the report, gpu_<GPU name>.md and .json, goes to --out, also when the check is
# stopped (SIGTERM or Ctrl-C: its runs are stopped, the report holds the steps so far, exit 143 or 130).
#
#   bash benchmark/gpu_check.sh --out FOLDER [--wheels FOLDER] [--budget SECONDS]
#   bash benchmark/gpu_check.sh --cpu [--out FOLDER]   # every step on CPU, tiny sizes; a check of the tool, untimed
#
# --wheels FOLDER: first install the wheels of benchmark/gpu_wheels.txt from FOLDER (benchmark/gpu_wheels.sh
# downloads them) into a temporary folder on PYTHONPATH, without a registry; torch and the rest stay as installed.
# The project runs from this checkout. --budget bounds the steps (310 s; the install, start and report get 20 s
# more; with --cpu there is no budget unless given). Exit status 0 when every step passed. The Python is python3 (PYTHON=... to change).
set -euo pipefail
py="${PYTHON:-python3}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
if [[ " $* " == *" --help "* || " $* " == *" -h "* ]]; then
    sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"
    echo
    (cd "$repo" && "$py" -m benchmark.lab.gpu_check --help 2>/dev/null | sed -n '/options/,$p') || true
    exit 0
fi
wheels="" budget=310 given_budget="" args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --wheels) wheels="${2:?--wheels needs a folder}"; shift 2 ;;
        --budget) budget="${2:?--budget needs seconds}" given_budget=1; shift 2 ;;
        --out) args+=(--out "$(realpath -m "${2:?--out needs a folder}")"); shift 2 ;;
        *) args+=("$1"); shift ;;
    esac
done
if ! [[ "$budget" =~ ^[0-9]+$ && "$budget" -gt 0 ]]; then
    echo "error: --budget takes whole seconds, got $budget" >&2
    exit 1
fi
total=$((budget + 20))
if [ -n "$wheels" ]; then
    [ -d "$wheels" ] || { echo "error: no wheel folder $wheels: make it with benchmark/gpu_wheels.sh" >&2; exit 1; }
    site="${TMPDIR:-/tmp}/gpu_check_site"
    rm -rf "$site"
    readarray -t specs < <(grep -v '^#' "$repo/benchmark/gpu_wheels.txt" | awk 'NF { print $1 "==" $2 }')
    PIP_ROOT_USER_ACTION=ignore "$py" -m pip install -q --disable-pip-version-check --no-index --no-deps \
        --find-links "$wheels" --target "$site" "${specs[@]}" \
        || { echo "error: installing the wheels of $wheels failed" >&2; exit 1; }
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
cd "$repo"
missing=$("$py" - <<'PY'
import importlib.metadata, re
try:
    import tomllib
except ImportError:  # Python 3.10: not checked here
    raise SystemExit(0)
requirements = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
for name in (re.split(r"[<>=!~ \[;]", req, maxsplit=1)[0] for req in requirements):
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        print(name, end=" ")
PY
)
if [ -n "$missing" ]; then
    echo "error: missing here: ${missing% }; pip install -e ., or --wheels FOLDER from benchmark/gpu_wheels.sh" >&2
    exit 1
fi
# --cpu checks the tool: no budget and no backstop (a busy machine is slow, not wrong; each step stops a hang itself)
if [[ " ${args[*]} " == *" --cpu "* ]]; then
    exec "$py" -m benchmark.lab.gpu_check ${given_budget:+--budget "$budget"} "${args[@]}"
fi
# the steps keep to their budget, what the install took deducted; the backstop stops the check 10 s before the
# end (it writes its report) and kills it 8 s later
steps=$((total - SECONDS - 15 < budget ? total - SECONDS - 15 : budget))
exec timeout --foreground -k 8 -s TERM $((total - SECONDS - 10)) \
    "$py" -m benchmark.lab.gpu_check --budget "$steps" "${args[@]}"
