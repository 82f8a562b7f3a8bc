#!/usr/bin/env bash
# Downloads what benchmark/gpu_check.sh installs on a GPU machine that reaches no package registry: the wheels of
# the project's dependencies except torch (the GPU machine keeps its own CUDA build of torch), for the GPU machine's
# Python and platform, into one folder; prints its size. Run it on any machine with pip and internet access (or a
# package mirror), then copy the folder with the repository.
#
#   bash benchmark/gpu_wheels.sh [FOLDER]        (default: wheels)
#   PYTHON_VERSION=3.12 PLATFORMS="manylinux2014_x86_64 manylinux_2_28_x86_64" bash benchmark/gpu_wheels.sh
#
# envpool is downloaded apart: where it has no wheel for the target Python, the check's envpool runs fail and the
# rest is unaffected.
set -euo pipefail
source "$(dirname "$0")/usage.sh"
cd "$(dirname "$0")/.."
dest="${1:-wheels}"
pyver="${PYTHON_VERSION:-3.12}"
platforms=()
for p in ${PLATFORMS:-manylinux2014_x86_64 manylinux_2_28_x86_64}; do platforms+=(--platform "$p"); done

# the requirements of pyproject.toml: dependencies and build requirements without torch, the envpool extra apart
readarray -t core < <(python3 - <<'PY'
import re, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))
for req in project["project"]["dependencies"] + project["build-system"]["requires"] + ["wheel"]:
    if re.split(r"[<>=!~ \[;]", req, maxsplit=1)[0] != "torch":
        print(req)
PY
)
readarray -t extra < <(python3 -c 'import tomllib; [print(r) for r in tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["envpool"]]')

mkdir -p "$dest"
download=(python3 -m pip download --dest "$dest" --only-binary=:all: --python-version "$pyver" "${platforms[@]}")
echo "downloading for Python $pyver (${PLATFORMS:-manylinux2014_x86_64 manylinux_2_28_x86_64}): ${core[*]}"
"${download[@]}" "${core[@]}"
# envpool pulls in no torch; a missing wheel is a warning
if ! "${download[@]}" "${extra[@]}"; then
    echo "warning: no ${extra[*]} wheel for Python $pyver: the check's envpool runs will fail" >&2
fi
echo "$(du -sh "$dest" | cut -f1) in $(find "$dest" -name '*.whl' | wc -l) wheels in $dest"
echo "on the GPU machine: bash benchmark/gpu_check.sh --wheels $dest"
