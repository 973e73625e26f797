#!/usr/bin/env bash
# tools/run-clang-tidy.sh BUILD_DIR: clang-tidy (checks in .clang-tidy, warnings
# are errors) on every step's sources, using BUILD_DIR/compile_commands.json.
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
build=${1:?usage: tools/run-clang-tidy.sh BUILD_DIR}
[[ -f $build/compile_commands.json ]] || { echo "run-clang-tidy: no $build/compile_commands.json" >&2; exit 2; }
mapfile -t files < <(git ls-files -- ':(glob)step0*/*.cpp')  # the programs, not their tests
((${#files[@]})) || { echo "run-clang-tidy: no step sources"; exit 0; }
rc=0
printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -n 1 clang-tidy -p "$build" --quiet || rc=$?
echo "clang-tidy: ${#files[@]} files checked, exit $rc"
exit "$rc"
