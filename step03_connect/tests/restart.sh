#!/usr/bin/env bash
# step03_connect: a server restarted while a client retries (issue 8). A client started before
# any server retries the refused connection and finds a server started later; a server killed
# with SIGKILL leaves its client a clear error and the port in TIME-WAIT; a client started while
# the port is dead retries until a restarted server binds the same port at once (SO_REUSEADDR).
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
prog=$1
port=$(new_port)
common=(-d "$RDMA_DEVICE" -p "$port")

hello_ok() {
    expect_line "$1" out "received 22 bytes: hello from the client"
    expect_line "$2" out "received 22 bytes: hello from the server"
}

# 1. No server yet: the client retries the refused connection (every 100 ms, until --timeout),
# and a server started 2 s into those retries is found.
mark=$(tcp_attempt_fails)
run_cmd early_client "$prog" "${common[@]}" --timeout 30 127.0.0.1 &
client=$!
wait_for_refused "$mark" 1 30
expect_refused_for 2 5  # retrying every 100 ms: about 20
expect_running "$client" "the client (retrying a refused connection)"
[[ ! -s $TEST_TMP/early_client.err ]] || fail "the retrying client wrote to stderr"
t0=$(ms_now)
run_cmd late_server "$prog" "${common[@]}" --timeout 30 &
server=$!
# (No wait_for_listen: the retrying client is accepted within 100 ms of the listen, and the
# listening socket is closed right after that accept.)
wait_for_line early_client out '^  remote address: ' 20
expect_within "$t0" 20 "retry: from the server's start to the client connected"
wait "$client" "$server"
expect_exit early_client 0
expect_exit late_server 0
hello_ok late_server early_client
expect_within "$t0" 30 "retry: from the server's start to both done"

# 2. The server is killed (SIGKILL) while a client waits for its answer. step03's run is one
# handshake and one "hello" each way, over in milliseconds: the one point where a kill can be
# placed for sure is the handshake. So the server is first kept busy: a peer connects and says
# nothing (the server accepted it and reads, for --timeout, the QP address that never comes).
# Our client then connects into the listen queue, sends its QP address and waits for the answer.
# The kill resets the queued connection: the client fails at once, exit 6. It also closes the
# silent peer's connection from the server's side, so that connection ends in TIME-WAIT on the
# server's port once the peer closes its end: the state a restarted server has to bind over.
run_cmd victim "$prog" "${common[@]}" --timeout 30 &
victim=$!
wait_for_listen "$port" 30 "$victim"
exec 3<>"/dev/tcp/127.0.0.1/$port" || fail "cannot connect to the server"
wait_for_accepted "$port" 10
run_cmd waiting_client "$prog" "${common[@]}" --timeout 30 127.0.0.1 &
client=$!
# Queued, with its 52-byte QP address unread.
for ((i = 0; i < 300; i++)); do
    ss -Htn state established "sport = :$port" | awk '$1 == 52 { f = 1 } END { exit !f }' && break
    sleep 0.1
done
((i < 300)) || fail "the client's QP address never reached the server's port"
kill -KILL "$(program_pid "$victim")"
t0=$(ms_now)
wait "$client"
expect_within "$t0" 10 "kill: from SIGKILL to the client's exit"
wait "$victim"
expect_exit victim 137
expect_exit waiting_client 6
expect_line waiting_client err "step03_connect: cannot read the peer's QP address: Connection reset by peer"
exec 3>&-  # the server's side closed first (the kill): TIME-WAIT is on the server's port
expect_time_wait "$port" 5

# 3. While the port is dead (nothing listens, one connection in TIME-WAIT), a new client
# retries; a server restarted on the same port binds at once and serves it.
mark=$(tcp_attempt_fails)
run_cmd retrying_client "$prog" "${common[@]}" --timeout 30 127.0.0.1 &
client=$!
wait_for_refused "$mark" 1 30
expect_refused_for 2 5  # retrying every 100 ms: about 20
expect_running "$client" "the client (retrying while the server is down)"
expect_time_wait "$port" 1
expect_bind_blocked "$port"
t0=$(ms_now)
run_cmd restarted_server "$prog" "${common[@]}" --timeout 30 &
server=$!
wait_for_line retrying_client out '^  remote address: ' 20
expect_within "$t0" 20 "restart: from the server's start to the client connected"
wait "$client" "$server"
expect_exit restarted_server 0
expect_exit retrying_client 0
expect_no_match restarted_server err 'Address already in use'
hello_ok restarted_server retrying_client
expect_within "$t0" 30 "restart: from the server's start to both done"
echo "PASS: server restarted while a client retries"
