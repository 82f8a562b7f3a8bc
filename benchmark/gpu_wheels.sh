#!/usr/bin/env bash
# Downloads the wheels that benchmark/gpu_check.sh --wheels installs on a GPU machine that reaches no package
# registry: exactly those of benchmark/gpu_wheels.txt (the project's runtime dependencies that such a machine lacks:
# ale-py with its ROMs, gymnasium, tyro and theirs; about 4 MB), for CPython 3.12 on manylinux x86-64, into one
# folder, and checks every file's size against the list. Run it on any machine with pip and internet access (or a
# package mirror), then copy the folder with the repository.
#
#   bash benchmark/gpu_wheels.sh [FOLDER]              (default: wheels)
#   bash benchmark/gpu_wheels.sh --dry-run [FOLDER]    # the list, its size and the pip command; downloads nothing
set -euo pipefail
source "$(dirname "$0")/usage.sh"
cd "$(dirname "$0")/.."
dry_run=0
if [ "${1:-}" = "--dry-run" ]; then dry_run=1; shift; fi
dest="${1:-wheels}"
list=benchmark/gpu_wheels.txt

specs=() sizes=() total=0
while read -r name version size; do
    specs+=("$name==$version") sizes+=("$size")
    total=$((total + size))
done < <(grep -v '^#' "$list" | grep .)
download=(python3 -m pip download --dest "$dest" --no-deps --only-binary=:all: --python-version 3.12
          --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 "${specs[@]}")
echo "${#specs[@]} wheels, $total bytes ($((total / 1024)) KiB) in all: ${specs[*]}"
if [ "$dry_run" = 1 ]; then
    echo "would run: ${download[*]}"
    exit 0
fi

mkdir -p "$dest"
"${download[@]}"
for i in "${!specs[@]}"; do
    name="${specs[$i]%%==*}" version="${specs[$i]##*==}"
    # the file's name spells the project's name with underscores
    file=$(find "$dest" -maxdepth 1 -iname "${name//-/_}-$version-*.whl" | head -n 1)
    got=$(stat -c %s "$file")
    if [ "$got" != "${sizes[$i]}" ]; then
        echo "error: $file has $got bytes, $list says ${sizes[$i]}: another build of $name $version" >&2
        exit 1
    fi
done
echo "$(du -sh "$dest" | cut -f1) in $dest; on the GPU machine: bash benchmark/gpu_check.sh --wheels $dest --out FOLDER"
