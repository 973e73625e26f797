#!/usr/bin/env bash
# The answer to step02's exercise 1, run on a copy patched with exercises/teardown_order.patch (qp
# declared after context): exactly two destroys fail, ibv_destroy_cq and ibv_dealloc_pd, both
# EBUSY, and the program still exits 0 (a deleter reports, it never throws). ibv_close_device
# then frees the kernel's CQ and PD, but the memory libibverbs allocated for them leaks, as
# ibv_close_device(3) warns: under AddressSanitizer (SANITIZE 1) LeakSanitizer reports it and
# the exit status is 1.
#   exercise_teardown.sh PATCHED_PROGRAM SANITIZE
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
prog=$1 sanitize=$2
run_cmd answer "$prog" -d "$RDMA_DEVICE"
expect_line answer err "destroy failed: ibv_destroy_cq: Device or resource busy (errno 16)"
expect_line answer err "destroy failed: ibv_dealloc_pd: Device or resource busy (errno 16)"
[[ $(grep -c '^destroy failed:' "$TEST_TMP/answer.err") == 2 ]] ||
    fail "answer: expected exactly two 'destroy failed:' lines"
if [[ $sanitize == 1 ]]; then
    expect_exit answer 1
    expect_match answer err 'ERROR: LeakSanitizer: detected memory leaks'
else
    expect_exit answer 0
fi
echo PASS
