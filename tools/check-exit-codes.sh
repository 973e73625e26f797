#!/usr/bin/env bash
# tools/check-exit-codes.sh: every step defines the contract's exit-code table, exactly once per
# name and with the same values (in main.cpp, or the class header from step05 on):
#   0 ok, 1 RDMA error, 2 usage, 3 no device, 4 no provider, 5 no such device or port,
#   6 peer or protocol error, 7 timeout, 130 interrupted.
# Prints what differs per step; exits 1 then.
set -uo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." || exit
expected="kExitInterrupted=130 kExitNoDevice=3 kExitNoProvider=4 kExitNoSuchDevice=5 kExitOk=0 kExitPeer=6 kExitRdma=1 kExitTimeout=7 kExitUsage=2"
bad=0 steps=0
for dir in step[0-9][0-9]_*/; do
    dir=${dir%/}
    [[ -f $dir/main.cpp ]] || continue
    steps=$((steps + 1))
    # Every "kExitName = N" definition in the step's own sources (its tests excluded).
    got=$(cat "$dir"/*.cpp "$dir"/*.hpp 2>/dev/null | grep -oE '\bkExit[A-Za-z]+ *= *[0-9]+' |
        tr -d ' ' | sort | tr '\n' ' ')
    got=${got% }
    if [[ $got != "$expected" ]]; then
        echo "$dir: exit codes differ from the contract"
        echo "  expected: $expected"
        echo "  found:    ${got:-(none)}"
        bad=1
    fi
done
((steps > 0)) || { echo "check-exit-codes: no step found" >&2; exit 1; }
((bad == 0)) && echo "exit codes: $steps steps define the contract's table"
exit "$bad"
