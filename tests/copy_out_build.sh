#!/usr/bin/env bash
# A step copied out builds alone: each step folder (step[0-9][0-9]_*, so a new step is covered) is
# copied by itself into an empty temporary directory, then configured and built there with
# cmake. A step whose CMakeLists.txt or sources need a file from outside the folder fails,
# named. Usage: copy_out_build.sh [REPO_ROOT]   (JOBS=2 by default)
set -uo pipefail
root=${1:-$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)}
jobs=${JOBS:-2}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/copy-out.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

steps=()
for dir in "$root"/step[0-9][0-9]_*/; do
    [[ -f $dir/CMakeLists.txt ]] && steps+=("$(basename -- "$dir")")
done
((${#steps[@]} > 0)) || { echo "FAIL: no step[0-9][0-9]_* folder with a CMakeLists.txt in $root" >&2; exit 1; }

failed=()
for step in "${steps[@]}"; do
    mkdir "$tmp/$step.copy"
    cp -r "$root/$step" "$tmp/$step.copy/"
    src=$tmp/$step.copy/$step build=$tmp/$step.build log=$tmp/$step.log
    # -O0 and no debug information: this proves that the folder builds alone; the ci build
    # compiles the same files optimised, warnings as errors.
    if cmake -S "$src" -B "$build" -DTUTORIAL_WERROR=ON -DCMAKE_BUILD_TYPE=Debug \
            -DCMAKE_CXX_FLAGS_DEBUG=-O0 >"$log" 2>&1 &&
        cmake --build "$build" -j "$jobs" >>"$log" 2>&1 &&
        [[ -x $build/$step ]]; then
        echo "ok: $step builds alone"
    else
        echo "--- $step, copied out alone: the last lines of its configure and build" >&2
        tail -n 25 "$log" >&2
        failed+=("$step")
    fi
    rm -rf "$tmp/$step.copy" "$build"
done
if ((${#failed[@]})); then
    printf 'FAIL: %s does not build when copied out alone\n' "${failed[@]}" >&2
    exit 1
fi
echo "copy-out build: ${#steps[@]} steps build alone"
