#!/usr/bin/env bash
# testlib.sh's assertion helpers read streams with bash builtins (and with grep and sed past
# _big lines): each must pass on what it names and fail on what it does not, both ways.
# shellcheck source=/dev/null
source "$TESTLIB"

# must pass|fail CMD...: CMD, in a subshell (fail() exits), passes or fails.
must() {
    local want=$1 got=pass
    shift
    ("$@") >/dev/null 2>&1 || got=fail
    [[ $got == "$want" ]] || { echo "FAIL: expected '$*' to $want" >&2; exit 1; }
}

check_all() {
    run_cmd demo printf 'server: clients: 12 connected\nclient: mode event, events 216, acked 215, x\nlast line without newline'
    must pass expect_exit demo 0
    must fail expect_exit demo 1
    must pass expect_line demo out 'server: clients: 12 connected'
    must fail expect_line demo out 'server: clients: 12'
    must pass expect_line demo out 'last line without newline'
    must pass expect_match demo out '^client: mode event, events [0-9]+,'
    must fail expect_match demo out '^mode event'
    must pass expect_no_match demo out '^mode event'
    must fail expect_no_match demo out 'events [0-9]+'
    must fail expect_match demo err .
    [[ $(field demo out '^client: mode event, events ([0-9]+), acked ([0-9]+),.*') == 216 ]] ||
        fail "field: group 1 of an anchored pattern"
    [[ $(field demo out 'acked ([0-9]+)') == "client: mode event, events 216, 215, x" ]] ||
        fail "field: the line with its match replaced by group 1, as sed -E 's/RE/\\1/p'"
    must fail field demo out 'nothing ([0-9]+)'
}

check_all
[[ $(grep -c '^  out| ' < <(run_cmd echo printf 'a\nb\n')) == 2 ]] || fail "run_cmd: two lines echoed"
_big=1  # the grep and sed path
check_all
echo PASS
