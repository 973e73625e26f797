#!/usr/bin/env bash
# Both sides must use the same -s and -n, as in step06: the client exits 6 naming the option and
# both values, and the server rejects that client and serves on. Then 100 connections from one
# client process on the server's one shared CQ and SRQ, every message checked.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
bin=$1
dev=(-d "$RDMA_DEVICE")
peer='127\.0\.0\.1:[0-9]+'

port=$(new_port)
run_cmd server "$bin" "${dev[@]}" -p "$port" -s 64 --timeout 30 --exit-after 2 &
server=$!
wait_for_listen "$port" 30 "$server"
run_cmd iters "$bin" "${dev[@]}" -p "$port" -s 64 -n 2000 --timeout 30 127.0.0.1
expect_exit iters 6
expect_line iters err "step10_srq: the server uses -n 1000, this client -n 2000: both sides must use the same -n"
expect_no_match iters out "iters in"
run_cmd size "$bin" "${dev[@]}" -p "$port" -s 128 --connections 3 --timeout 30 127.0.0.1
expect_exit size 6
expect_line size err "step10_srq: the server uses -s 64, this client -s 128: both sides must use the same -s"
wait "$server"
expect_exit server 0
expect_match server out "^server: client 1 \\($peer\\): rejected: the client uses -n 2000, this server -n 1000: both sides must use the same -n\$"
expect_match server out "^server: client 2 \\($peer\\): rejected: the client uses -s 128, this server -s 64: both sides must use the same -s\$"
expect_line server out "server: clients: 0 connected, 0 complete, 0 failed, 2 rejected, 0 aborted"

# 100 connections from one process: one QP each on the client's own shared CQ and SRQ, served by
# the server's one CQ and SRQ of 500 receives with its limit armed at 450: the first messages of
# 100 connections take it below, so the event must come, and the refill keep every client going.
port=$(new_port)
n=20
run_cmd server100 "$bin" "${dev[@]}" -p "$port" -s 64 -n $n --check --srq-limit 450 --timeout 60 --exit-after 100 &
server=$!
wait_for_listen "$port" 30 "$server"
run_cmd client100 "$bin" "${dev[@]}" -p "$port" -s 64 -n $n --check -e --connections 100 --timeout 60 127.0.0.1
wait "$server"
expect_exit client100 0
expect_line client100 out "client: verified $((n * 100)) of $((n * 100)) replies"
expect_match client100 out '^client: 100 connections, one shared CQ of [0-9]+ entries and SRQ of [0-9]+ receives$'
expect_exit server100 0
expect_line server100 out "server: clients: 100 connected, 100 complete, 0 failed, 0 rejected, 0 aborted"
expect_line server100 out "server: messages received: $((n * 100))"
expect_match server100 out '^server: listening on TCP port [0-9]+; one thread, level-triggered epoll; shared CQ of [0-9]+ entries, SRQ of 500 receives, refilled below 450$'
expect_match server100 out '^server: shared resources: 1 CQ of [0-9]+ entries, 1 SRQ of 500 receives in 1 MR of 32000 bytes; [0-9]+ refills, [0-9]+ limit events, [0-9]+ stale completions$'
limit_events=$(field server100 out '^server: shared resources: .*; [0-9]+ refills, ([0-9]+) limit events, .*')
((limit_events > 0)) || fail "server100: no SRQ limit event in $((n * 100)) messages on 500 receives, limit 450"
echo PASS
