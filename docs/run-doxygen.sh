#!/usr/bin/env bash
# docs/run-doxygen.sh DOXYGEN DOXYFILE WARN_LOG: run Doxygen for the docs
# target, show its warnings in the build log, and count them.
# Doxygen's WARN_AS_ERROR (set by -DTUTORIAL_DOCS_WERROR=ON) decides whether a
# warning fails the build; this script passes Doxygen's exit status on.
set -uo pipefail
doxygen=$1 doxyfile=$2 log=$3
rm -f "$log"
"$doxygen" "$doxyfile"
rc=$?
count=0
if [[ -s $log ]]; then
    cat "$log" >&2
    count=$(grep -c ': warning: \|: error: ' "$log")
fi
echo "docs: $count Doxygen warning(s); log: $log"
exit "$rc"
