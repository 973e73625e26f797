#!/usr/bin/env bash
# Remote access only where it is used, in the two-host lab: the server's rkey opens its 8-byte
# report window and nothing else. A patched client (tests/write_outside_window.patch) WRITEs its
# report with that rkey into the server's receive slot, inside the same buffer but outside the
# window's MR: the WRITE completes with IBV_WC_REM_ACCESS_ERR, and the client exits 1 naming it.
# shellcheck source=/dev/null
source "$TESTLIB"
require_peer
outside=$1 bin=$2
port=$(new_port)
run_cmd server timeout 90 "$bin" -p "$port" -s 64 -n 10 --exit-after 1 &
server=$!
wait_for_line server out "^server: listening on rdma_cm port $port;" 30
run_cmd client "$PEER" run --timeout 60 -- "$outside" -p "$port" -s 64 -n 10 "$LAB_ADDR"
wait "$server"
expect_exit client 1
expect_match client err "^step08_rdma_cm: work completion failed: IBV_WC_REM_ACCESS_ERR \\(remote access error\\) for wr_id [0-9]+, vendor_err 0x[0-9a-f]+\$"
expect_exit server 0
expect_match server out "^server: client 1 \\($LAB_PEER_ADDR\\): "
echo PASS
