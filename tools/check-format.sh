#!/usr/bin/env bash
# tools/check-format.sh: every C++ file of the repo matches .clang-format.
# Prints the files that differ, with the first lines of their diff; exits 1 then.
set -uo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." || exit
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.cpp' '*.hpp' '*.h' '*.cc')
bad=0
for f in "${files[@]}"; do
    [[ -f $f ]] || continue
    if ! diff -u "$f" <(clang-format --style=file "$f") >"${TMPDIR:-/tmp}/fmt.$$" 2>&1; then
        echo "not formatted: $f (run clang-format -i $f)"
        head -n 12 "${TMPDIR:-/tmp}/fmt.$$" | tail -n +3
        bad=1
    fi
done
rm -f "${TMPDIR:-/tmp}/fmt.$$"
echo "clang-format: ${#files[@]} files checked"
exit "$bad"
