#!/usr/bin/env bash
# step10 server, one shared CQ and SRQ: one client in each reaping mode (busy, event, spin) at
# once, the event client with 10 connections from one process, every message checked.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
bin=$1
port=$(new_port)
dev=(-d "$RDMA_DEVICE")
n=100
run_cmd server "$bin" "${dev[@]}" -p "$port" -s 64 -n $n --check --exit-after 12 &
server=$!
wait_for_listen "$port"
run_cmd busy "$bin" "${dev[@]}" -p "$port" -s 64 -n $n --check 127.0.0.1 &
c1=$!
run_cmd event "$bin" "${dev[@]}" -p "$port" -s 64 -n $n --check -e --connections 10 127.0.0.1 &
c2=$!
run_cmd spin "$bin" "${dev[@]}" -p "$port" -s 64 -n $n --check --spin-us 20 127.0.0.1 &
c3=$!
wait $c1 $c2 $c3 "$server"
for c in busy spin; do
    expect_exit $c 0
    expect_match $c out "^$n iters in [0-9.]+ seconds = [0-9.]+ usec/iter$"
    expect_match $c out '^ #bytes #iterations +t_min\[usec\] +t_max\[usec\] +t_typical\[usec\]'
    expect_line $c out "client: verified $n of $n replies"
    expect_match $c out '^client: cpu: '
done
expect_exit event 0
expect_match event out "^$((n * 10)) iters in [0-9.]+ seconds = [0-9.]+ usec/iter$"
expect_line event out "client: verified $((n * 10)) of $((n * 10)) replies"
expect_match event out '^client: 10 connections, one shared CQ of [0-9]+ entries and SRQ of 26 receives$'
expect_match busy out '^client: mode busy, events 0, acked 0,'
ev=$(field event out '^client: mode event, events ([0-9]+), acked ([0-9]+),.*')
ack=$(field event out '^client: mode event, events [0-9]+, acked ([0-9]+),.*')
[[ $ev -gt 0 && $ev == "$ack" ]] || fail "event client: events $ev, acked $ack"
expect_exit server 0
expect_match server out '^server: listening on TCP port [0-9]+; one thread, level-triggered epoll; shared CQ of [0-9]+ entries, SRQ of 500 receives, refilled after each completion pass$'
expect_match server out "^server: clients: 12 connected, 12 complete, 0 failed, 0 rejected, 0 aborted$"
[[ $(grep -c "): complete; $n received, $n sent, $n verified$" "$TEST_TMP/server.out") == 12 ]] ||
    fail "server: expected 12 complete clients with $n verified messages each"
[[ $(grep -cE '^server: client [0-9]+: QP 0x[0-9a-f]{6} destroyed: ' "$TEST_TMP/server.out") == 12 ]] ||
    fail "server: expected 12 QPs destroyed"
[[ $(grep -cE " destroyed: .*, drained$" "$TEST_TMP/server.out") == 12 ]] ||
    fail "server: expected every QP drained (its marker flushed) before its destroy"
expect_match server out "^server: messages received: $((n * 12))$"
expect_match server out '^server: shared resources: 1 CQ of [0-9]+ entries, 1 SRQ of 500 receives in 1 MR of 32000 bytes; [0-9]+ refills, 0 limit events, 0 stale completions$'
events=$(field server out '^server: CQ events: received ([0-9]+), acked [0-9]+,.*')
acked=$(field server out '^server: CQ events: received [0-9]+, acked ([0-9]+),.*')
[[ $events -gt 0 && $events == "$acked" ]] || fail "server: events received $events, acked $acked"
expect_match server out '^server: cpu: user [0-9.]+ s, system [0-9.]+ s; context switches: [0-9]+ voluntary, [0-9]+ involuntary$'
echo PASS
