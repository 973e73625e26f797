#!/usr/bin/env bash
# Exercise 3, run: a client without the MTU check (exercises/no_mtu_check.patch) sends 1,000 bytes
# more than the port's active MTU. Soft-RoCE completes each send with success and
# sends nothing (rxe_req.c, C10-93.1.1): the client resends until it gives up, and the server,
# as it is, answers nothing.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
patched=$1 prog=$2
dev=(-d "$RDMA_DEVICE")
mtu=$(ibv_devinfo -d "$RDMA_DEVICE" | sed -nE 's/^[[:space:]]+active_mtu:[[:space:]]+([0-9]+).*/\1/p' | head -n 1)
[[ $mtu =~ ^[0-9]+$ ]] || fail "no active MTU in ibv_devinfo for $RDMA_DEVICE"
run_cmd server env --default-signal=INT "$prog" "${dev[@]}" &
server=$!
server_pid=$(program_pid "$server")
wait_for_line server out '^server: UD QP [0-9]+ ' 30
qpn=$(field server out '^server: UD QP ([0-9]+) .*')
run_cmd client "$patched" "${dev[@]}" -s $((mtu + 1000)) --timeout 2 -n 5 127.0.0.1 "$qpn"
expect_exit client 7
expect_line client err "step12_ud: no answer to ping 0 for 2 s"
kill -INT "$server_pid"
wait "$server" || true
expect_exit server 130
expect_line server out "server: 0 messages answered, 0 clients finished, 0 address handles; 0 refused (no address handle), 0 receives failed"
echo PASS
