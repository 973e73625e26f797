#!/usr/bin/env bash
# Exercise 2, run: a server whose receives have no room for the GRH (exercises/no_grh_room.patch:
# its receives hold the port's MTU, not 40 more) and a client as it is, sending messages of the
# full MTU. None fits; what the device does then is the kernel's:
#   Linux 6.1:  the server's receive completes with IBV_WC_LOC_QP_OP_ERR (exit 1);
#   Linux 6.12: each message is dropped without a completion, the server answers nothing.
# Either way the client gives up (exit 7).
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
patched=$1 prog=$2
dev=(-d "$RDMA_DEVICE")
kernel=$(uname -r)
mtu=$(ibv_devinfo -d "$RDMA_DEVICE" | sed -nE 's/^[[:space:]]+active_mtu:[[:space:]]+([0-9]+).*/\1/p' | head -n 1)
run_cmd server env --default-signal=INT "$patched" "${dev[@]}" --clients 1 &
server=$!
server_pid=$(program_pid "$server")
wait_for_line server out '^server: UD QP [0-9]+ ' 30
qpn=$(field server out '^server: UD QP ([0-9]+) .*')
run_cmd client "$prog" "${dev[@]}" -s "$mtu" --timeout 2 -n 5 127.0.0.1 "$qpn"
expect_exit client 7
expect_line client err "step12_ud: no answer to ping 0 for 2 s"
case $kernel in
    6.1.*)
        wait "$server" || true
        expect_exit server 1
        expect_line server err "step12_ud: receive failed: IBV_WC_LOC_QP_OP_ERR (local QP operation error)"
        ;;
    6.12.*)
        kill -INT "$server_pid"
        wait "$server" || true
        expect_exit server 130
        expect_line server out "server: 0 messages answered, 0 clients finished, 0 address handles; 0 refused (no address handle), 0 receives failed"
        ;;
    *) fail "no expectation for Linux $kernel: this test knows 6.1 and 6.12" ;;
esac
echo PASS
