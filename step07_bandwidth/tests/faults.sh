#!/usr/bin/env bash
# Bad input and lost peers: a window over the device's max_qp_wr, -I over the QP's
# max_inline_data, a -s and an --op mismatch, a server killed mid-run, SIGINT on either side.
# Each ends with its documented exit code and message, in bounded time, with no failed teardown.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
program=$1
opts=(-d "$RDMA_DEVICE")

# The window is bounded twice: by the send queue (max_qp_wr) and by the CQ (max_cqe). On
# Soft-RoCE, max_cqe is the smaller one.
run_cmd window "$program" "${opts[@]}" -t 2000000 127.0.0.1
expect_exit window 2
expect_match window err "^step07_bandwidth: tx depth 2000000 is over $RDMA_DEVICE's limit max_qp_wr = [0-9]+$"
expect_line window err "hint: ibv_devinfo -v shows the device's limits"
run_cmd cq "$program" "${opts[@]}" -t 100000 127.0.0.1
expect_exit cq 2
expect_match cq err "^step07_bandwidth: (tx depth 100000 is over $RDMA_DEVICE's limit max_qp_wr|tx depth \+ rx depth 100001 is over $RDMA_DEVICE's limit max_cqe) = [0-9]+$"
run_cmd inline "$program" "${opts[@]}" -I 4096 -s 64 127.0.0.1
expect_exit inline 2
expect_match inline err "^step07_bandwidth: -I 4096 is over the QP's max_inline_data = [0-9]+$"

# pair NAME "SERVER OPTIONS" "CLIENT OPTIONS": both sides, the client in the foreground.
pair() {
    local port server
    port=$(new_port)
    read -ra server_args <<<"$2"
    read -ra client_args <<<"$3"
    run_cmd "$1-server" "$program" "${opts[@]}" -p "$port" "${server_args[@]}" &
    server=$!
    wait_for_listen "$port" 20 "$server"
    run_cmd "$1" "$program" "${opts[@]}" -p "$port" "${client_args[@]}" 127.0.0.1
    wait "$server"
}
pair size "-s 4096 --timeout 5" "-s 8192 --timeout 5"
expect_exit size 6
expect_exit size-server 6
expect_line size err "step07_bandwidth: the server uses -s 4096, this client -s 8192: both sides must use the same -s"
expect_line size-server err "step07_bandwidth: the client uses -s 8192, this server -s 4096: both sides must use the same -s"
# The target's buffer grants RDMA WRITE with --op write only: the client sees the mode in its rkey.
pair op "--op send -n 100 --timeout 5" "--op write -n 100 --timeout 10"
expect_exit op 6
expect_line op err "step07_bandwidth: the server uses --op send, this client --op write: both sides must use the same --op"
expect_exit op-server 7
expect_line op-server err "step07_bandwidth: no completion within 5 s (after 0 messages)"

# mid_run SERVER CLIENT SERVER_TIMEOUT CLIENT_TIMEOUT: a -D 60 run of 64-byte WRITEs, both in the
# background (run_cmd), until the client has printed its table's header and run for 0.5 s; sets
# server and client (the subshells) and server_pid and client_pid (the programs).
mid_run() {
    local port run=(-D 60 -s 64 -t 16)
    port=$(new_port)
    run_cmd "$1" env --default-signal=INT "$program" "${opts[@]}" -p "$port" "${run[@]}" --timeout "$3" &
    server=$!
    wait_for_listen "$port" 20 "$server"
    run_cmd "$2" env --default-signal=INT "$program" "${opts[@]}" -p "$port" "${run[@]}" --timeout "$4" 127.0.0.1 &
    client=$!
    wait_for_line "$2" out "#bytes" 20
    sleep 0.5
    server_pid=$(program_pid "$server")
    client_pid=$(program_pid "$client")
}

# A server killed mid-run (-D: no timeline to allocate): the client's WRITEs go unacknowledged;
# it ends within seconds with IBV_WC_RETRY_EXC_ERR and step05's hint, or the --timeout.
mid_run victim survivor 30 3
kill -KILL "$server_pid"
start=$(ms_now)
wait "$client"
expect_within "$start" 8 "noticing the killed server"
wait "$server"
rc=$(<"$TEST_TMP/survivor.rc")
[[ $rc == 1 || $rc == 7 ]] || fail "survivor: expected exit 1 or 7, got $rc"
expect_match survivor err "^step07_bandwidth: (work completion failed: IBV_WC_RETRY_EXC_ERR|no completion within 3 s)"
expect_match survivor err "^hint: (the peer stopped answering|is the peer still running)"

# SIGINT mid-run on the client, then on the waiting server: 130 each, and every resource
# destroyed without a complaint on stderr; `rdma res` holds nothing of theirs afterwards.
mid_run target initiator 30 30
kill -INT "$client_pid"
wait "$client"
kill -INT "$server_pid"
wait "$server"
for side in initiator target; do
    expect_exit "$side" 130
    expect_line "$side" err "step07_bandwidth: interrupted by SIGINT"
    expect_no_match "$side" err "ibv_(destroy|dereg|dealloc|close)"
done
if command -v rdma >/dev/null; then
    ! rdma -j res show qp | grep -qE "\"pid\":($client_pid|$server_pid)[,}]" ||
        fail "a QP of the interrupted programs is left"
fi
echo PASS
