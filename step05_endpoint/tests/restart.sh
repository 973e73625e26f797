#!/usr/bin/env bash
# step05_endpoint: a server restarted while a client retries (issue 8). A client started before
# any server retries the refused connection and finds a server started later; a server killed
# with SIGKILL mid-run leaves its client a clear error within seconds; a client started while
# the port is dead (and in TIME-WAIT) retries until a restarted server binds the same port at
# once (SO_REUSEADDR) and serves it.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
prog=$1
port=$(new_port)
common=(-d "$RDMA_DEVICE" -p "$port" -s 64)
# --op write: the server verifies the bytes the client's RDMA WRITEs left in its buffer.
write_run=(-n 200 --op write --timeout 30)

write_ok() {  # write_ok SERVER CLIENT
    expect_exit "$1" 0
    expect_exit "$2" 0
    expect_line "$1" out "server: 200 RDMA WRITEs landed with no completion here; the write-with-immediate said so; 64 bytes verified"
    expect_line "$2" out "client: 200 RDMA WRITEs of 64 bytes, then a write-with-immediate (200)"
}

# 1. No server yet: the client retries the refused connection (every 100 ms, until --timeout),
# and a server started 2 s into those retries is found.
mark=$(tcp_attempt_fails)
run_cmd early_client "$prog" "${common[@]}" "${write_run[@]}" 127.0.0.1 &
client=$!
wait_for_refused "$mark" 1 30
expect_refused_for 2 5  # retrying every 100 ms: about 20
expect_running "$client" "the client (retrying a refused connection)"
[[ ! -s $TEST_TMP/early_client.err ]] || fail "the retrying client wrote to stderr"
t0=$(ms_now)
run_cmd late_server "$prog" "${common[@]}" "${write_run[@]}" &
server=$!
# (No wait_for_listen: the retrying client is accepted within 100 ms of the listen, and the
# listening socket is closed right after that accept.)
wait_for_line early_client out '^  remote address: ' 20
expect_within "$t0" 20 "retry: from the server's start to the client connected"
wait "$client" "$server"
write_ok late_server early_client
expect_within "$t0" 40 "retry: from the server's start to both done"

# 2. The server is killed (SIGKILL) mid-ping-pong, on the same port. The client notices within
# its --timeout 4 and the retries: usually it waits for a reply that never comes (exit 7); if its
# own send was in flight, that send fails instead (exit 1).
run_cmd victim "$prog" "${common[@]}" -n 100000000 --timeout 30 &
victim=$!
wait_for_listen "$port" 30 "$victim"
run_cmd survivor "$prog" "${common[@]}" -n 100000000 --timeout 4 127.0.0.1 &
survivor=$!
wait_for_line survivor out '^  remote address: ' 30
sleep 1  # well into the ping-pong
kill -KILL "$(program_pid "$victim")"
t0=$(ms_now)
wait "$survivor"
expect_within "$t0" 20 "kill: from SIGKILL to the client's exit"  # --timeout 4 of silence, then slack
wait "$victim"
expect_exit victim 137
case $(<"$TEST_TMP/survivor.rc") in
    7)
        expect_match survivor err '^step05_endpoint: nothing from the peer for 4 s \(after [0-9]+ of 100000000 messages\)$'
        expect_match survivor err '^hint: is the peer still running'
        ;;
    1)
        expect_match survivor err '^step05_endpoint: work completion failed: IBV_WC_RETRY_EXC_ERR \(transport retry counter exceeded\) for wr_id [0-9]+, vendor_err 0x[0-9a-f]+$'
        expect_line survivor err "hint: the peer stopped answering: it died or was killed, the network link to it is down, its QP is not in RTR, or the address (GID, LID, QPN) is wrong"
        ;;
    *) fail "survivor: expected exit 7 (timeout) or 1 (failed send), got $(<"$TEST_TMP/survivor.rc")" ;;
esac

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
run_cmd retrying_client "$prog" "${common[@]}" "${write_run[@]}" 127.0.0.1 &
client=$!
wait_for_refused "$mark" 1 30
expect_refused_for 2 5  # retrying every 100 ms: about 20
expect_running "$client" "the client (retrying while the server is down)"
expect_time_wait "$port" 1
expect_bind_blocked "$port"
t0=$(ms_now)
run_cmd restarted_server "$prog" "${common[@]}" "${write_run[@]}" &
server=$!
wait_for_line retrying_client out '^  remote address: ' 20
expect_within "$t0" 20 "restart: from the server's start to the client connected"
wait "$client" "$server"
expect_no_match restarted_server err 'Address already in use'
write_ok restarted_server retrying_client
expect_within "$t0" 40 "restart: from the server's start to both done"
echo "PASS: server restarted while a client retries"
