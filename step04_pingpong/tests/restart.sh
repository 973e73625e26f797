#!/usr/bin/env bash
# step04_pingpong: a server restarted while a client retries (issue 8). A client started before
# any server retries the refused connection and finds a server started later; a server killed
# with SIGKILL mid-run leaves its client a clear error within the chapter's bound (--timeout,
# then a probe that fails after its retries); a client started while the port is dead (and in
# TIME-WAIT) retries until a restarted server binds the same port at once (SO_REUSEADDR).
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
prog=$1
port=$(new_port)
common=(-d "$RDMA_DEVICE" -p "$port" -s 64)
short_run=(-n 200 --check --timeout 30)  # --check: every byte of every message is verified

run_ok() {
    expect_exit "$1" 0
    expect_match "$1" out '^200 iters in [0-9.]+ seconds = [0-9.]+ usec/iter$'
}

# 1. No server yet: the client retries the refused connection (every 100 ms, until --timeout),
# and a server started 2 s into those retries is found.
mark=$(tcp_attempt_fails)
run_cmd early_client "$prog" "${common[@]}" "${short_run[@]}" 127.0.0.1 &
client=$!
wait_for_refused "$mark" 1 30
expect_refused_for 2 5  # retrying every 100 ms: about 20
expect_running "$client" "the client (retrying a refused connection)"
[[ ! -s $TEST_TMP/early_client.err ]] || fail "the retrying client wrote to stderr"
t0=$(ms_now)
run_cmd late_server "$prog" "${common[@]}" "${short_run[@]}" &
server=$!
# (No wait_for_listen: the retrying client is accepted within 100 ms of the listen, and the
# listening socket is closed right after that accept.)
wait_for_line early_client out '^  remote address: ' 20
expect_within "$t0" 20 "retry: from the server's start to the client connected"
wait "$client" "$server"
run_ok late_server
run_ok early_client
expect_within "$t0" 40 "retry: from the server's start to both done"

# 2. The server is killed (SIGKILL) mid-run, on the same port. The client, waiting for a reply,
# probes after --timeout 4 s of silence: the probe fails after its retries, exit 1.
run_cmd victim "$prog" "${common[@]}" -n 100000000 --timeout 30 &
victim=$!
wait_for_listen "$port" 30 "$victim"
run_cmd survivor "$prog" "${common[@]}" -n 100000000 --timeout 4 127.0.0.1 &
survivor=$!
wait_for_line survivor out '^  remote address: ' 30
wait_for_packets "$(sent_packets)" 200 30  # well into the ping-pong (this test runs alone)
kill -KILL "$(program_pid "$victim")"
t0=$(ms_now)
wait "$survivor"
expect_within "$t0" 12 "kill: from SIGKILL to the client's exit"  # --timeout 4 + retries + slack
wait "$victim"
expect_exit victim 137
expect_exit survivor 1
expect_line survivor err "step04_pingpong: send failed: IBV_WC_RETRY_EXC_ERR (transport retry counter exceeded)"
expect_line survivor err "hint: the peer's QP stopped acknowledging (after retries): the peer process died or was killed, the network link between the hosts is down, or the path (GID, MTU) is wrong"

# The killed server closed its TCP connection right after the handshake; which side closed it
# first, and so which side holds its TIME-WAIT, is a race. To restart over a TIME-WAIT for sure,
# kill one more server on this port while it holds a connection: a peer that connected and says
# nothing. The kill closes that connection from the server's side; once the peer closes its end,
# the server's port is in TIME-WAIT.
run_cmd holder "$prog" "${common[@]}" --timeout 30 &
holder=$!
wait_for_listen "$port" 30 "$holder"
exec 3<>"/dev/tcp/127.0.0.1/$port" || fail "cannot connect to the server"
wait_for_accepted "$port" 10
kill -KILL "$(program_pid "$holder")"
wait "$holder"
expect_exit holder 137
exec 3>&-
expect_time_wait "$port" 5

# 3. While the port is dead, a new client retries; a server restarted on the same port binds at
# once and serves it.
mark=$(tcp_attempt_fails)
run_cmd retrying_client "$prog" "${common[@]}" "${short_run[@]}" 127.0.0.1 &
client=$!
wait_for_refused "$mark" 1 30
expect_refused_for 2 5  # retrying every 100 ms: about 20
expect_running "$client" "the client (retrying while the server is down)"
expect_time_wait "$port" 1
expect_bind_blocked "$port"
t0=$(ms_now)
run_cmd restarted_server "$prog" "${common[@]}" "${short_run[@]}" &
server=$!
wait_for_line retrying_client out '^  remote address: ' 20
expect_within "$t0" 20 "restart: from the server's start to the client connected"
wait "$client" "$server"
expect_no_match restarted_server err 'Address already in use'
run_ok restarted_server
run_ok retrying_client
expect_within "$t0" 40 "restart: from the server's start to both done"
echo "PASS: server restarted while a client retries"
