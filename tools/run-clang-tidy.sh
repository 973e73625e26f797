#!/usr/bin/env bash
# tools/run-clang-tidy.sh BUILD_DIR: clang-tidy (checks in .clang-tidy, warnings
# are errors) on every step's sources, .cpp and .hpp (the programs, not their
# tests), and on the main page's one-file program (docs/examples), using
# BUILD_DIR/compile_commands.json.
# Each .cpp is checked with the headers of its step that it includes
# (HeaderFilterRegex in .clang-tidy); a header that no source of its step
# includes is checked on its own (clang-tidy takes its compile command from a
# .cpp of the same folder), so every step header is covered.
# An exception to readability-function-size must be a named NOLINT with a
# reason ("// NOLINT(readability-function-size): why"); a bare NOLINT or one
# without a reason fails here.
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
build=${1:?usage: tools/run-clang-tidy.sh BUILD_DIR}
[[ -f $build/compile_commands.json ]] || { echo "run-clang-tidy: no $build/compile_commands.json" >&2; exit 2; }
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- \
    ':(glob)step[0-9][0-9]_*/*.cpp' ':(glob)step[0-9][0-9]_*/*.hpp' ':(glob)docs/examples/*.cpp')
((${#files[@]})) || { echo "run-clang-tidy: no step sources"; exit 0; }

rc=0
# NOLINT, NOLINTNEXTLINE, NOLINTBEGIN: each must name its check(s) and give a reason after ": ".
if grep -nE 'NOLINT(NEXTLINE|BEGIN)?' "${files[@]}" |
    grep -vE 'NOLINT(NEXTLINE|BEGIN)?\([a-z0-9.*,-]+\): *[^ ]|NOLINTEND'; then
    echo "run-clang-tidy: the NOLINT above must name its check and give a reason:" \
        "// NOLINT(check-name): reason" >&2
    rc=1
fi

# The headers that no source of their own step includes.
targets=()
for f in "${files[@]}"; do
    dir=${f%/*} name=${f##*/}
    if [[ $f == *.hpp ]] && grep -qsF "#include \"$name\"" -- "$dir"/*.cpp "$dir"/*.hpp; then
        continue
    fi
    targets+=("$f")
done

tidy_rc=0
printf '%s\n' "${targets[@]}" | xargs -P "$(nproc)" -n 1 clang-tidy -p "$build" --quiet || tidy_rc=$?
((tidy_rc == 0)) || rc=$tidy_rc
echo "clang-tidy: ${#files[@]} files checked (${#targets[@]} translation units), exit $rc"
exit "$rc"
