#!/usr/bin/env bash
# Every shell script tracked by git passes shellcheck at its default severity, with no finding.
# A script is a file named *.sh or *.bash, or one whose first line is a sh/bash shebang, so a
# new script is covered without being listed here. Usage: shellcheck.sh [REPO_ROOT]
set -uo pipefail
root=${1:-$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)}
cd -- "$root" || exit 1
command -v shellcheck >/dev/null ||
    { echo "FAIL: shellcheck is not installed (run tools/install-deps.sh)" >&2; exit 1; }

scripts=()
while IFS= read -r -d '' file; do
    [[ -f $file ]] || continue
    case $file in
        *.sh | *.bash) scripts+=("$file") ;;
        *)
            IFS= read -r first_line <"$file" || true
            [[ $first_line =~ ^\#!.*[/\ ](ba|da|k)?sh([[:space:]]|$) ]] && scripts+=("$file") ;;
    esac
done < <(git ls-files -z)

((${#scripts[@]} > 0)) || { echo "FAIL: found no shell script under $root" >&2; exit 1; }

failed=()
for file in "${scripts[@]}"; do
    shellcheck "$file" || failed+=("$file")
done
if ((${#failed[@]})); then
    printf 'FAIL: shellcheck finds something in %s\n' "${failed[@]}" >&2
    exit 1
fi
echo "shellcheck: ${#scripts[@]} scripts, no finding"
