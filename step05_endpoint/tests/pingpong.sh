#!/usr/bin/env bash
# step05's ping-pong (handshake v3) between two step05s, at several sizes: both sides print
# rc_pingpong's two summary lines and the latency table, and the QP sends up to 64 bytes inline. Then --check on both sides,
# and --check on one side only (exit 6, naming the message and byte).
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
program=$1
for size in 1 4096; do
    port=$(new_port)
    run_cmd "server$size" "$program" -d "$RDMA_DEVICE" -p "$port" -s "$size" -n 100 --timeout 30 &
    server=$!
    wait_for_listen "$port" 30
    run_cmd "client$size" "$program" -d "$RDMA_DEVICE" -p "$port" -s "$size" -n 100 --timeout 30 -v 127.0.0.1
    wait "$server"
    # The endpoint asks for step04's 64 bytes of inline data; a device may grant more.
    inline=$(field "client$size" out '^device .*, max inline ([0-9]+) bytes$')
    ((inline >= 64)) || fail "client$size: max inline $inline bytes, less than the 64 asked for"
    for side in server client; do
        expect_exit "$side$size" 0
        expect_match "$side$size" out "^  local address:  LID 0x[0-9a-f]{4}, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:127.0.0.1\$"
        expect_match "$side$size" out "^  remote address: LID 0x[0-9a-f]{4}, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:127.0.0.1\$"
        expect_match "$side$size" out "^$((size * 200)) bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec\$"
        expect_match "$side$size" out '^100 iters in [0-9.]+ seconds = [0-9.]+ usec/iter$'
        expect_match "$side$size" out "^ ${size}[[:space:]]+100([[:space:]]+[0-9.]+){7}[[:space:]]*\$"
    done
    # The client's QPN is the server's remote QPN: the handshake carried it.
    client_qpn=$(field "client$size" out '^  local address:  LID 0x[0-9a-f]+, QPN (0x[0-9a-f]+),.*')
    expect_match "server$size" out "^  remote address: LID 0x[0-9a-f]+, QPN $client_qpn,"
done

# --check on both sides: every message verified.
n=200
port=$(new_port)
run_cmd check_server "$program" -d "$RDMA_DEVICE" -p "$port" -s 64 -n $n --check --timeout 30 &
server=$!
wait_for_listen "$port" 30 "$server"
run_cmd check_client "$program" -d "$RDMA_DEVICE" -p "$port" -s 64 -n $n --check --timeout 30 127.0.0.1
wait "$server"
for side in check_server check_client; do
    expect_exit $side 0
    expect_match $side out "^$n iters in [0-9.]+ seconds = [0-9.]+ usec/iter$"
done

# -t 1: one send in the queue at a time, every send signaled (it used to wait for ever).
port=$(new_port)
run_cmd t1_server "$program" -d "$RDMA_DEVICE" -p "$port" -s 64 -n 50 -t 1 --timeout 10 &
server=$!
wait_for_listen "$port" 30 "$server"
run_cmd t1_client "$program" -d "$RDMA_DEVICE" -p "$port" -s 64 -n 50 -t 1 --timeout 10 127.0.0.1
wait "$server"
for side in t1_server t1_client; do
    expect_exit $side 0
    expect_match $side out '^50 iters in [0-9.]+ seconds = [0-9.]+ usec/iter$'
done

# --check on the client only: the server's replies do not carry the client's expected pattern,
# so the client stops at the first one (exit 6, naming the message and the byte). The server
# then waits for a client that is gone: it ends within its --timeout and a probe. The client
# starts first (it retries until the server listens), so that the server's short --timeout only
# has to cover the run, not the client's start.
port=$(new_port)
run_cmd one_check "$program" -d "$RDMA_DEVICE" -p "$port" -s 64 -n 10 --check --timeout 30 127.0.0.1 &
client=$!
run_cmd plain_server "$program" -d "$RDMA_DEVICE" -p "$port" -s 64 -n 10 --timeout 3 &
server=$!
wait "$client"
start=$(ms_now)
wait "$server"
expect_within "$start" 20 "the plain server's end after the checking client left"
expect_exit one_check 6
expect_match one_check err "^step05_endpoint: --check: message 0 is wrong at byte [0-9]+$"
expect_line one_check err "hint: start both sides with --check (ibv_rc_pingpong has none)"
rc=$(<"$TEST_TMP/plain_server.rc")
[[ $rc == 1 || $rc == 7 ]] || fail "plain_server: expected exit 1 or 7, got $rc"
echo PASS
