#!/usr/bin/env bash
# The main page's one-file program on a real device: both QPs connect, the SEND delivers its
# message, the WRITE's bytes are read back from the target, and stderr stays empty.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
prog=$1

run_cmd page "$prog"
expect_exit page 0
mapfile -t out <"$TEST_TMP/page.out"
((${#out[@]} == 7)) || fail "page: expected 7 lines on stdout, got ${#out[@]}"
[[ ${out[0]} =~ ^device:\ [^\ ]+,\ port\ 1$ ]] || fail "page: line 1: ${out[0]}"
[[ ${out[1]} =~ ^QPs\ 0x[0-9a-f]{6}\ and\ 0x[0-9a-f]{6}\ connected,\ GID\ index\ [0-9]+$ ]] ||
    fail "page: line 2: ${out[1]}"
# The SEND's and the RECV's completions may come in either order.
case "${out[2]}|${out[3]}" in
    "completion: SEND|completion: RECV" | "completion: RECV|completion: SEND") ;;
    *) fail "page: lines 3 and 4 should be the SEND's and the RECV's completions: ${out[2]}|${out[3]}" ;;
esac
[[ ${out[4]} == "B received: Hello from QP A" ]] || fail "page: line 5: ${out[4]}"
[[ ${out[5]} == "completion: RDMA WRITE" ]] || fail "page: line 6: ${out[5]}"
[[ ${out[6]} == "B's memory after the WRITE: Written by A" ]] || fail "page: line 7: ${out[6]}"
[[ ! -s $TEST_TMP/page.err ]] || fail "page: stderr should be empty"
echo PASS
