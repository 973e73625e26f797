#!/usr/bin/env bash
# step03_connect: a server and a client walk their QPs RESET->INIT->RTR->RTS over the TCP
# handshake and exchange one "hello" each way.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
prog=$1
port=$(new_port)
run_cmd server timeout 90 "$prog" -d "$RDMA_DEVICE" -p "$port" --timeout 60 &
wait_for_listen "$port" 30
run_cmd client timeout 90 "$prog" -d "$RDMA_DEVICE" -p "$port" --timeout 60 127.0.0.1
wait
for side in server client; do
    expect_exit $side 0
    expect_match $side out '^QP 0x[0-9a-f]{6}: RESET -> INIT \(IBV_QP_STATE \| IBV_QP_PKEY_INDEX \| IBV_QP_PORT \| IBV_QP_ACCESS_FLAGS\)$'
    expect_match $side out '^QP 0x[0-9a-f]{6}: INIT -> RTR \(IBV_QP_STATE \| IBV_QP_AV \| IBV_QP_PATH_MTU \| IBV_QP_DEST_QPN \| IBV_QP_RQ_PSN \| IBV_QP_MAX_DEST_RD_ATOMIC \| IBV_QP_MIN_RNR_TIMER\)$'
    expect_match $side out '^QP 0x[0-9a-f]{6}: RTR -> RTS \(IBV_QP_STATE \| IBV_QP_TIMEOUT \| IBV_QP_RETRY_CNT \| IBV_QP_RNR_RETRY \| IBV_QP_SQ_PSN \| IBV_QP_MAX_QP_RD_ATOMIC\)$'
    expect_match $side out '^  local address:  LID 0x[0-9a-f]{4}, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:127\.0\.0\.1$'
done
expect_line server out 'received 22 bytes: hello from the client'
expect_line client out 'received 22 bytes: hello from the server'
# Each side's remote QPN is the other's local QPN.
server_qpn=$(field server out '^  local address:  LID 0x[0-9a-f]+, QPN (0x[0-9a-f]+),.*')
client_remote=$(field client out '^  remote address: LID 0x[0-9a-f]+, QPN (0x[0-9a-f]+),.*')
[[ $server_qpn == "$client_remote" ]] || fail "client saw remote QPN $client_remote, server has $server_qpn"
echo PASS
