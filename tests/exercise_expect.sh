#!/usr/bin/env bash
# exercise_expect.sh PROG EXIT [out|err 'LINE']... [-- ARGS...]: the answer to a chapter's exercise,
# run. Runs PROG -d $RDMA_DEVICE ARGS once, and checks its exit status and each exact LINE on
# stdout (out) or stderr (err).
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
prog=$1 exit_status=$2
shift 2
expected=()
while (($# > 0)) && [[ $1 != -- ]]; do
    expected+=("$1" "$2")
    shift 2
done
(($# > 0)) && shift
run_cmd answer "$prog" -d "$RDMA_DEVICE" "$@"
expect_exit answer "$exit_status"
for ((i = 0; i < ${#expected[@]}; i += 2)); do
    expect_line answer "${expected[i]}" "${expected[i + 1]}"
done
echo PASS
