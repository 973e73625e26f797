#!/usr/bin/env bash
# B7, across the two-host lab: the server's async events (steps 06 and 09 run this test). A
# server on host b serves a client on host a, and b's link goes down mid-run. The server on b
# reads the port's events from its device's async_fd: "port error" when the link goes down,
# "port active" when it is up again. The client on a sees only its QP fail, or the server's end
# of the session. Then SIGINT ends the server, exit 0.
# shellcheck source=/dev/null
source "$TESTLIB"
require_peer
prog=$1
port=$(new_port)
job=
cleanup() {
    "$PEER" link up >/dev/null 2>&1
    [[ -n $job ]] && "$PEER" signal KILL "$job" 2>/dev/null
    local pids
    mapfile -t pids < <(jobs -p)
    ((${#pids[@]} == 0)) || kill "${pids[@]}" 2>/dev/null || true
}
trap cleanup EXIT

# peer_line REGEX SECONDS: waits until the server on b has printed a matching line.
peer_line() {
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        "$PEER" output "$job" | grep -qE -- "$1" && return 0
        sleep 0.1
    done
    "$PEER" output "$job" | sed 's/^/  b| /'
    fail "the server on host b printed no line matching '$1' within $2 s"
}

job=$("$PEER" start -- "$prog" -s 64 -n 1000000 --timeout 5 -p "$port") ||
    fail "lab/peer could not start the server on host b"
peer_line '^server: listening' 30
run_cmd client timeout 120 "$prog" -s 64 -n 1000000 --timeout 5 -p "$port" "$LAB_PEER_ADDR" &
client=$!
wait_for_line client out '^  remote address' 30
sleep 1
run_cmd link_down "$PEER" link down
expect_exit link_down 0
peer_line '^server: async event: port error' 20
run_cmd link_up "$PEER" link up
expect_exit link_up 0
peer_line '^server: async event: port active' 20
wait "$client"
rc=$(<"$TEST_TMP/client.rc")
# A completion error, its --timeout, or, once the link is up, the server's close of the session.
[[ $rc == 1 || $rc == 6 || $rc == 7 ]] || fail "client: expected exit 1, 6 or 7, got $rc"
"$PEER" signal INT "$job"
run_cmd server "$PEER" wait --timeout 60 "$job"
job=
expect_exit server 0
expect_line server out "server: async event: port error on port 1: the link is down; its connections' sends fail once their retries run out"
expect_line server out "server: async event: port active on port 1: the link is up"
echo PASS
