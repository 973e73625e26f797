#!/usr/bin/env bash
# The window rules the chapter states, on one device (tests/loopback_window.cpp): a bind WR leaves
# ibv_mw::rkey alone; a WRITE through the window, then with the old key after a rebind; ibv_dereg_mr
# refused while bound; a SEND with invalidate (the receive's invalidated_rkey), then the window's
# key refused and both QPs in ERR; a valid window's second bind fails and moves its QP to ERR; a
# window over the MR's end refused by post_bind, and failed by the device when posted anyway.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
run_cmd rules "$1" "$RDMA_DEVICE"
expect_exit rules 0
expect_no_match rules out '^FAILED'
expect_line rules out "ok: ibv_dereg_mr fails while a window is bound"
expect_line rules out "ok: a valid type-2 window cannot be bound again"
expect_line rules out "ok: post_bind refuses a window over the MR's end before posting"
expect_line rules out "ok: a bind over the MR's end fails"
echo PASS
