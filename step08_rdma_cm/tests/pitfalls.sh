#!/usr/bin/env bash
# The pitfalls of rdma_cm, each with its line and exit code, in the two-host lab: 127.0.0.1 (no
# RDMA device owns a loopback address on RoCE), an address of no interface here, an address
# that no host answers (within the client's 2 s address resolution), a port nobody listens
# on (the peer's CM rejects the request); then
# host b's link down, its address still in host a's ARP cache: rdma_connect gets no answer, and
# --timeout ends it, and Ctrl-C ends the wait at once; as it does the wait for an address.
# shellcheck source=/dev/null
source "$TESTLIB"
require_peer
bin=$1
nobody=${LAB_ADDR%.*}.77  # on the wire's subnet, but no host has it
trap '"$PEER" link up >/dev/null 2>&1; rm -rf "$TEST_TMP"' EXIT

run_cmd loopback "$bin" --timeout 5 127.0.0.1
expect_exit loopback 5
expect_line loopback err "step08_rdma_cm: rdma_resolve_route: 127.0.0.1 is a loopback address: rdma_cm does not route it over RoCE (No such device)"
expect_line loopback err "hint: RoCE (and Soft-RoCE) carry rdma_cm's traffic on an Ethernet interface: give the address of the interface the RDMA device sits on (rdma link show; ip -4 addr show dev IFACE)"

run_cmd bind "$bin" --bind "$nobody" --exit-after 1
expect_exit bind 5
expect_line bind err "step08_rdma_cm: rdma_bind_addr: no RDMA device owns $nobody"

# A server bound to 127.0.0.1: the bind succeeds with no device, and it says so.
env --default-signal=INT "$bin" --bind 127.0.0.1 --exit-after 1 >"$TEST_TMP/lo.out" 2>"$TEST_TMP/lo.err" &
lo=$!
wait_for_line lo err "^step08_rdma_cm: warning: --bind=127.0.0.1 is a loopback address, which rdma_cm does not route over RoCE: no RoCE client can reach this server; bind to the address of the interface the device sits on \(rdma link show\)$" 30
kill -INT $lo
rc=0
wait $lo || rc=$?
((rc == 0)) || fail "the server bound to 127.0.0.1 exited $rc after SIGINT, not 0"

began=$(ms_now)
run_cmd unreachable "$bin" --timeout 10 "$nobody"
expect_exit unreachable 7
expect_line unreachable err "step08_rdma_cm: rdma_resolve_addr: $nobody is unreachable: Connection timed out"
expect_within "$began" 10 "the unreachable address"

run_cmd refused "$bin" -p 9 --timeout 10 "$LAB_PEER_ADDR"
expect_exit refused 6
expect_line refused err "step08_rdma_cm: $LAB_PEER_ADDR port 9 rejected the connection: no rdma_cm server listens there (REJECTED, status 8)"

# The refused connection above put host b in host a's ARP cache: with b's link down, address
# and route resolve, and the ConnectRequest goes unanswered.
run_cmd link_down "$PEER" link down
expect_exit link_down 0
began=$(ms_now)
run_cmd silent "$bin" --timeout 2 "$LAB_PEER_ADDR"
expect_exit silent 7
expect_line silent err "step08_rdma_cm: rdma_connect: no answer from $LAB_PEER_ADDR within --timeout (2 s)"
expect_within "$began" 5 "the silent peer"
# Ctrl-C while the client waits for an event: for the ConnectReply here, and for the address
# of a host that does not answer (after the link is up). Each ends within 1 s, exit 130.
# interrupt NAME SECONDS ARGS...: the client, and SIGINT SECONDS after its start.
interrupt() {
    local name=$1 after=$2 pid sent
    shift 2
    env --default-signal=INT "$bin" "$@" >"$TEST_TMP/$name.out" 2>"$TEST_TMP/$name.err" &
    pid=$!
    sleep "$after"
    sent=$(ms_now)
    kill -INT "$pid"
    rc=0
    wait "$pid" || rc=$?
    echo "$rc" >"$TEST_TMP/$name.rc"
    expect_exit "$name" 130
    expect_line "$name" err "step08_rdma_cm: interrupted by SIGINT"
    expect_within "$sent" 1 "$name: the exit after SIGINT"
}
interrupt connect_sigint 1 --timeout 30 "$LAB_PEER_ADDR"
run_cmd link_up "$PEER" link up
expect_exit link_up 0
interrupt resolve_sigint 0.5 --timeout 30 "$nobody"
echo PASS
