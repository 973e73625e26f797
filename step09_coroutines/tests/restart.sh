#!/usr/bin/env bash
# step09_coroutines: a server restarted while clients retry (issue 8). The one-threaded server
# killed with SIGKILL mid-flood leaves each client a clear error within seconds; a new batch of
# clients started while the port is dead (and in TIME-WAIT) retries the refused connection until
# a server restarted on the same port binds at once (SO_REUSEADDR) and serves them all, every
# reply checked.
# (step06's tests/restart.sh, ported: the program's name in each expected line is BIN's file
# name, step09_coroutines when CTest runs it, so the same script also runs against step06_epoll.)
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
bin=$1
prog=${bin##*/}
port=$(new_port)
common=(-d "$RDMA_DEVICE" -p "$port" -s 64 -r 64 --check)

# start_clients PREFIX COUNT ARGS...: COUNT clients in the background, their pids in $clients.
start_clients() {
    local prefix=$1 count=$2 i
    shift 2
    clients=()
    for ((i = 0; i < count; i++)); do
        run_cmd "$prefix$i" "$bin" "${common[@]}" "$@" 127.0.0.1 &
        clients+=($!)
    done
}

# batch_ok SERVER PREFIX COUNT MSGS: the server and COUNT clients completed, every reply checked.
batch_ok() {
    local i
    for ((i = 0; i < $3; i++)); do
        expect_exit "$2$i" 0
        expect_line "$2$i" out "client: verified $4 of $4 replies"
    done
    expect_exit "$1" 0
    expect_line "$1" out "server: clients: $3 connected, $3 complete, 0 failed, 0 rejected, 0 aborted"
    [[ $(grep -c "): complete; $4 received, $4 sent, $4 verified; " "$TEST_TMP/$1.out") == "$3" ]] ||
        fail "$1: expected $3 clients with $4 verified messages each"
}

# 1. The server is killed (SIGKILL) mid-flood with three clients exchanging
# and one silent peer that connected and never sent its handshake. Each client notices at once:
# the kill closes the server's end of its TCP connection (exit 6), or its send in flight fails
# first (exit 1, IBV_WC_RETRY_EXC_ERR, after about 0.5 s of retries). The kill
# closes the silent peer's connection from the server's side: once the peer closes its end, the
# server's port is in TIME-WAIT, which the restart below has to bind over.
run_cmd victim "$bin" "${common[@]}" -n 1000000 --timeout 30 &
victim=$!
wait_for_listen "$port" 30 "$victim"
start_clients flood 3 -n 1000000 --timeout 5
exec 3<>"/dev/tcp/127.0.0.1/$port" || fail "cannot connect to the server"
for ((i = 0; i < 3; i++)); do wait_for_line "flood$i" out '^  remote address: ' 30; done
wait_for_accepted "$port" 10
wait_for_packets "$(sent_packets)" 1000 30  # well into the flood (this test runs alone)
kill -KILL "$(program_pid "$victim")"
t0=$(ms_now)
wait "${clients[@]}"
expect_within "$t0" 5 "kill: from SIGKILL to the last client's exit"
wait "$victim"
expect_exit victim 137
for ((i = 0; i < 3; i++)); do
    case $(<"$TEST_TMP/flood$i.rc") in
        6) expect_line "flood$i" err "$prog: the server closed the connection during the run: it stopped, or ended this client's session" ;;
        1)
            expect_match "flood$i" err "^$prog: work completion failed: IBV_WC_RETRY_EXC_ERR \\(transport retry counter exceeded\\) for wr_id [0-9]+, vendor_err 0x[0-9a-f]+\$"
            expect_line "flood$i" err "hint: the peer stopped answering: it died or was killed, the network link to it is down, its QP is not in RTR, or the address (GID, LID, QPN) is wrong"
            ;;
        *) fail "flood$i: expected exit 6 (the server closed the connection) or 1 (failed send), got $(<"$TEST_TMP/flood$i.rc")" ;;
    esac
done
exec 3>&-
expect_time_wait "$port" 5

# 2. While the port is dead, a new batch of three clients retries the refused connection (every
# 100 ms, until --timeout); a server restarted on the same port 2 s into those retries binds at
# once and serves them all. (This is also the case of clients started before any server: steps
# 03-05 test that on its own too; here it would add some 20 s of process starts under TCG.)
mark=$(tcp_attempt_fails)
start_clients retrying 3 -n 200 --timeout 30
wait_for_refused "$mark" 3 30
expect_refused_for 2 15  # each retries every 100 ms: about 60
for pid in "${clients[@]}"; do expect_running "$pid" "a client (retrying while the server is down)"; done
expect_time_wait "$port" 1
expect_bind_blocked "$port"
t0=$(ms_now)
run_cmd restarted_server "$bin" "${common[@]}" -n 200 --timeout 30 --exit-after 3 &
server=$!
for ((i = 0; i < 3; i++)); do wait_for_line "retrying$i" out '^  remote address: ' 20; done
expect_within "$t0" 20 "restart: from the server's start to all clients connected"
wait "${clients[@]}" "$server"
expect_no_match restarted_server err 'cannot listen'
batch_ok restarted_server retrying 3 200
expect_within "$t0" 40 "restart: from the server's start to all done"
echo "PASS: server restarted while clients retry"
