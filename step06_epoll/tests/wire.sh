#!/usr/bin/env bash
# step06_epoll across the two-host lab's wire: one server on host a, and on host b three step06
# clients at once (busy, event and spin modes, every message checked). Each client's QP shows
# on the wire as its own destination QP. Then an ibv_rc_pingpong client in event mode on host b
# (it has no --check, so it gets a server of its own).
# shellcheck source=/dev/null
source "$TESTLIB"
require_peer
bin=$1
port=$(new_port)
gid=(-g "${RDMA_GID_INDEX:-1}")  # ibv_rc_pingpong sends no GID without -g; RoCE needs one
n=100
start_capture clients
run_cmd server timeout 180 "$bin" -p "$port" -s 64 -n $n --check --exit-after 3 --timeout 60 &
server=$!
wait_for_listen "$port" 30 "$server"
run_cmd busy "$PEER" run --timeout 150 -- "$bin" -p "$port" -s 64 -n $n --check "$LAB_ADDR" &
c1=$!
run_cmd event "$PEER" run --timeout 150 -- "$bin" -p "$port" -s 64 -n $n --check -e "$LAB_ADDR" &
c2=$!
run_cmd spin "$PEER" run --timeout 150 -- "$bin" -p "$port" -s 64 -n $n --check --spin-us 20 "$LAB_ADDR" &
c3=$!
wait $c1 $c2 $c3 "$server"
stop_capture clients
for c in busy event spin; do
    expect_exit $c 0
    expect_match $c out "^$n iters in [0-9.]+ seconds = [0-9.]+ usec/iter$"
    expect_line $c out "client: verified $n of $n replies"
    expect_match $c out "^  local address: +LID 0x[0-9a-f]{4}, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:${LAB_PEER_ADDR//./\\.}\$"
done
expect_exit server 0
expect_match server out '^server: clients: 3 connected, 3 complete, 0 failed, 0 rejected, 0 aborted$'

# On the wire: host a sent to three destination QPs, the clients' QPNs, n messages each (Send
# Only at 64 bytes): n distinct PSNs per QP. A packet sent
# again (same QP and PSN) is a retransmission: the loaded one-vCPU hosts miss an ACK timeout
# now and then.
clients=$(for c in busy event spin; do
    field $c out '^  local address: +LID 0x[0-9a-f]+, QPN (0x[0-9a-f]+),.*'
done | sort | tr '\n' ' ')
sends=$(awk -F'\t' -v a="$LAB_ADDR" '$3 == a && $6 ~ /^SEND_ONLY/ { print $7, $8 }' "$TEST_TMP/clients.wire")
on_wire=$(awk '{ print $1 }' <<<"$sends" | sort -u | tr '\n' ' ')
[[ $on_wire == "$clients" ]] || fail "host a sent to QPs $on_wire; the clients' QPNs are $clients"
counts=$(sort -u <<<"$sends" | awk '{ print $1 }' | uniq -c | awk '{ print $1 }' | sort -u)
dropped=$(capture_dropped clients)
if ((dropped == 0)); then
    [[ $counts == "$n" ]] || fail "host a did not send $n messages (distinct PSNs) to each client's QP: $counts"
else
    # The capture itself is short of packets (tcpdump says so): each QP has at most n PSNs, and
    # at most `dropped` fewer. The clients' --check above verified every message.
    echo "the capture lost $dropped packets (tcpdump): distinct PSNs per QP: $counts"
    for c in $counts; do
        ((c <= n && c >= n - dropped)) || fail "host a sent $c distinct PSNs to a client's QP: not $n, and the capture lost only $dropped"
    done
fi
echo "host a sent $n messages to each of the QPs $clients ($(($(wc -l <<<"$sends") - 3 * n)) retransmitted)"

# ibv_rc_pingpong -e on host b against step06's server on host a.
port=$((port + 1))
run_cmd rc_server timeout 120 "$bin" -p "$port" -s 64 -n $n --exit-after 1 --timeout 60 &
server=$!
wait_for_listen "$port" 30 "$server"
run_cmd rc_event "$PEER" run --timeout 100 -- ibv_rc_pingpong "${gid[@]}" -p "$port" -s 64 -n $n -e "$LAB_ADDR"
wait "$server"
expect_exit rc_event 0
expect_match rc_event out "^$n iters in [0-9.]+ seconds = [0-9.]+ usec/iter$"
expect_exit rc_server 0
expect_match rc_server out '^server: clients: 1 connected, 1 complete, 0 failed, 0 rejected, 0 aborted$'
echo PASS
