#!/usr/bin/env bash
# Exercise 2, run: a server whose receives have no room for the GRH (exercises/no_grh_room.patch)
# and a client as it is. No message fits; what the device does then is the kernel's:
#   Linux 6.1:  the server's receive completes with IBV_WC_LOC_QP_OP_ERR (exit 1);
#   Linux 6.12: each message is dropped without a completion, the server answers nothing.
# Either way the client gives up (exit 7).
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
patched=$1 prog=$2
dev=(-d "$RDMA_DEVICE")
kernel=$(uname -r)
run_cmd server timeout 60 "$patched" "${dev[@]}" --clients 1 &
server=$!
wait_for_line server out '^server: UD QP [0-9]+ ' 30
qpn=$(field server out '^server: UD QP ([0-9]+) .*')
run_cmd client "$prog" "${dev[@]}" --timeout 2 -n 5 127.0.0.1 "$qpn"
expect_exit client 7
expect_line client err "step12_ud: no answer to ping 0 for 2 s"
case $kernel in
    6.1.*)
        wait "$server" || true
        expect_exit server 1
        expect_line server err "step12_ud: receive failed: IBV_WC_LOC_QP_OP_ERR (local QP operation error)"
        ;;
    6.12.*)
        kill -INT "$server"
        wait "$server" || true
        expect_exit server 130
        expect_line server out "server: 0 messages answered, 0 clients finished, 0 address handles; 0 refused (too many addresses)"
        ;;
    *) fail "no expectation for Linux $kernel: this test knows 6.1 and 6.12" ;;
esac
echo PASS
