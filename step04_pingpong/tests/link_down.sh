#!/usr/bin/env bash
# step04_pingpong across the two-host lab's wire, the fault one host cannot show: host b's link
# goes down mid-run (ip link set eth0 down, through lab/peer). The server on host a reports
# IBV_WC_RETRY_EXC_ERR and the hint that names the link, within the chapter's bound
# (--timeout + about 1 s); the client on host b fails too (usually IBV_WC_LOC_QP_OP_ERR). After
# the link is up again, a run across it succeeds.
# shellcheck source=/dev/null
source "$TESTLIB"
require_peer
prog=$1
port=$(new_port)
server=  # serve (testlib) sets it
a=$LAB_ADDR

# Whatever happens below, host b's link comes up again, and neither program outlives the test:
# the tests after this one need the wire. (If ctest kills the test at its TIMEOUT, no trap runs:
# the fixture test wire_link_up, after it, brings the link up.)
cleanup() {
    "$PEER" link up >/dev/null 2>&1
    [[ -n ${job:-} ]] && "$PEER" signal KILL "$job" 2>/dev/null
    [[ -n ${server:-} ]] && pkill -TERM -P "$server" 2>/dev/null  # its timeout passes TERM on
    rm -rf "$TEST_TMP"
    local pids
    mapfile -t pids < <(jobs -p)
    ((${#pids[@]} == 0)) || kill "${pids[@]}" 2>/dev/null || true
}
trap cleanup EXIT

# The client on host b starts first, and the server only once the client says it is connecting:
# the server's --timeout 3 also bounds its wait for a client, which b's one busy vCPU could take
# longer than 3 s to start. The client retries a refused connection.
port=$((port + 1))
job=$("$PEER" start -- "$prog" -s 64 -n 1000000 --timeout 30 -p "$port" "$a") ||
    fail "lab/peer could not start the client on host b"
# Not grep -q: it would stop reading, and lab/peer's SIGPIPE would fail the pipeline.
for ((i = 0; i < 300; i++)); do
    "$PEER" output "$job" | grep '^connecting to ' >/dev/null && break
    sleep 0.1
done
grep -q '^connecting to ' <<<"$("$PEER" output "$job")" ||
    fail "the client on host b did not start connecting within 30 s"
# Not serve: the client connects at once, so the listening socket may never be seen.
run_cmd link_server timeout 120 "$prog" -s 64 -n 1000000 --timeout 3 -p "$port" &
server=$!
wait_for_line link_server out '^  remote address' 30
sleep 2
# The link is down at the latest when the request returns (b's agent may take a second or two:
# b's one vCPU is busy with the client). From then, the server on a has the chapter's bound,
# --timeout 3 + about 1 s; it may also have failed already, its pong unacknowledged.
asked_at=$(ms_now)
run_cmd link_down "$PEER" link down
expect_exit link_down 0
down_at=$(ms_now)
echo "taking host b's link down took $(((down_at - asked_at) / 100))00 ms"
wait "$server"
expect_within "$down_at" 6 "host a's report of the link down (--timeout 3)"
run_cmd link_up "$PEER" link up
expect_exit link_up 0
run_cmd link_client "$PEER" wait --timeout 120 "$job"
job=
expect_exit link_server 1
# With its pong still unacknowledged the server fails at once; when it was waiting for a ping,
# it first probes after --timeout.
if grep -q 'probing its QP' "$TEST_TMP/link_server.err"; then
    expect_match link_server err '^step04_pingpong: nothing from the peer for 3 s \(after [0-9]+ of [0-9]+ messages\); probing its QP$'
fi
expect_line link_server err 'step04_pingpong: send failed: IBV_WC_RETRY_EXC_ERR (transport retry counter exceeded)'
expect_line link_server err "hint: the peer's QP stopped acknowledging (after retries): the peer process died or was killed, the network link between the hosts is down, or the path (GID, MTU) is wrong"
expect_exit link_client 1
expect_match link_client err 'IBV_WC_'
# The link is back: a run across it succeeds (the tests after this one need it too).
serve after_server "$prog" -n 20 --timeout 60
run_cmd after_client "$PEER" run --timeout 120 -- "$prog" -n 20 --timeout 60 -p "$port" "$a"
wait "$server"
expect_exit after_server 0
expect_exit after_client 0
echo PASS
