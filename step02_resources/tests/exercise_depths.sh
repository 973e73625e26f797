#!/usr/bin/env bash
# The answer to step02's exercise 2, run: every device grants at least the depths asked for; on
# Soft-RoCE exactly one less than a power of two (-t 1 -r 1: 1, 1 and a CQ of 3; -t 1000 -r
# 1000: 1023, 1023 and 2047), as the answer says.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
prog=$1

for depth in 1 1000; do
    run_cmd "d$depth" "$prog" -d "$RDMA_DEVICE" -t "$depth" -r "$depth"
    expect_exit "d$depth" 0
    send=$(field "d$depth" out "^    max_send_wr +requested $depth, granted ([0-9]+)\$")
    recv=$(field "d$depth" out "^    max_recv_wr +requested $depth, granted ([0-9]+)\$")
    cqe=$(field "d$depth" out "^CQ: +([0-9]+) entries \\(asked for $((2 * depth))\\)\$")
    ((send >= depth && recv >= depth && cqe >= 2 * depth)) ||
        fail "-t $depth -r $depth: granted $send, $recv and a CQ of $cqe, less than asked"
    if [[ $RDMA_DEVICE == rxe* ]]; then
        want=$(((depth == 1) ? 1 : 1023)) want_cq=$(((depth == 1) ? 3 : 2047))
        [[ $send == "$want" && $recv == "$want" && $cqe == "$want_cq" ]] ||
            fail "Soft-RoCE, -t $depth -r $depth: expected $want, $want and a CQ of $want_cq," \
                "got $send, $recv and $cqe"
    fi
    echo "-t $depth -r $depth: granted $send and $recv, a CQ of $cqe"
done
echo PASS
