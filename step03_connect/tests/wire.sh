#!/usr/bin/env bash
# step03_connect across the two-host lab's wire: the server on host a, the client on host b.
# The capture on a's NIC shows the minimal exchange: one Send Only each way, each acknowledged,
# to the QPN and at the PSN that the handshake exchanged.
# shellcheck source=/dev/null
source "$TESTLIB"
require_peer
prog=$1
port=$(new_port)
start_capture hello
run_cmd server timeout 90 "$prog" -d "$RDMA_DEVICE" -p "$port" --timeout 60 &
server=$!
wait_for_listen "$port" 30 "$server"
run_cmd client "$PEER" run --timeout 90 -- "$prog" -p "$port" --timeout 60 "$LAB_ADDR"
wait "$server"
stop_capture hello
for side in server client; do
    expect_exit $side 0
    expect_match $side out '^QP 0x[0-9a-f]{6}: RTR -> RTS '
done
expect_line server out 'received 22 bytes: hello from the client'
expect_line client out 'received 22 bytes: hello from the server'
expect_match server out "^  local address:  LID 0x[0-9a-f]{4}, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:${LAB_ADDR//./\\.}\$"
expect_match client out "^  local address:  LID 0x[0-9a-f]{4}, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:${LAB_PEER_ADDR//./\\.}\$"

# On the wire: each side one SEND_ONLY, and the other side's ACK for it; nothing else.
expect_opcodes hello "$LAB_ADDR" '(ACK )*SEND_ONLY( ACK)*' "host a sends one message"
expect_opcodes hello "$LAB_PEER_ADDR" '(ACK )*SEND_ONLY( ACK)*' "host b sends one message"
for from in "$LAB_ADDR" "$LAB_PEER_ADDR"; do
    [[ $(wire_opcodes hello "$from") == *ACK* ]] || fail "hello: no ACK from $from"
done
# Host a's Send goes to b's QPN with a's own first PSN, as the two printed them.
client_qpn=$(field client out '^  local address:  LID 0x[0-9a-f]+, QPN (0x[0-9a-f]+),.*')
server_psn=$(field server out '^  local address:  LID 0x[0-9a-f]+, QPN 0x[0-9a-f]+, PSN (0x[0-9a-f]+),.*')
sent=$(awk -F'\t' -v a="$LAB_ADDR" '$3 == a && $6 == "SEND_ONLY" { print $7, $8 }' "$TEST_TMP/hello.wire" | sort -u)
[[ $sent == "$client_qpn $server_psn" ]] ||
    fail "host a's SEND_ONLY went to QP and PSN \"$sent\"; the handshake said QPN $client_qpn, PSN $server_psn"
echo "host a's SEND_ONLY: QP $client_qpn, PSN $server_psn, as the handshake said"
echo PASS
