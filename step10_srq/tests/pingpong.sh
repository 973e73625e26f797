#!/usr/bin/env bash
# step06 server with one client in each reaping mode (busy, event, spin), all
# concurrently, every message checked; then ibv_rc_pingpong clients (busy and -e)
# against the same server code, which speaks rc_pingpong's handshake.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
bin=$1
port=$(new_port)
dev=(-d "$RDMA_DEVICE")
n=100
run_cmd server "$bin" "${dev[@]}" -p "$port" -s 64 -n $n --check --exit-after 3 &
server=$!
wait_for_listen "$port"
run_cmd busy "$bin" "${dev[@]}" -p "$port" -s 64 -n $n --check 127.0.0.1 &
c1=$!
run_cmd event "$bin" "${dev[@]}" -p "$port" -s 64 -n $n --check -e 127.0.0.1 &
c2=$!
run_cmd spin "$bin" "${dev[@]}" -p "$port" -s 64 -n $n --check --spin-us 20 127.0.0.1 &
c3=$!
wait $c1 $c2 $c3 "$server"
for c in busy event spin; do
    expect_exit $c 0
    expect_match $c out "^$n iters in [0-9.]+ seconds = [0-9.]+ usec/iter$"
    expect_match $c out '^ #bytes #iterations +t_min\[usec\] +t_max\[usec\] +t_typical\[usec\]'
    expect_line $c out "client: verified $n of $n replies"
    expect_match $c out '^client: cpu: '
done
expect_match busy out '^client: mode busy, events 0, acked 0,'
ev=$(field event out '^client: mode event, events ([0-9]+), acked ([0-9]+),.*')
ack=$(field event out '^client: mode event, events [0-9]+, acked ([0-9]+),.*')
[[ $ev -gt 0 && $ev == "$ack" ]] || fail "event client: events $ev, acked $ack"
expect_exit server 0
expect_match server out "^server: clients: 3 connected, 3 complete, 0 failed, 0 rejected, 0 aborted$"
[[ $(grep -c "): complete; $n received, $n sent, $n verified; " "$TEST_TMP/server.out") == 3 ]] ||
    fail "server: expected 3 complete clients with $n verified messages each"
events=$(field server out '^server: CQ events: received ([0-9]+), acked [0-9]+,.*')
acked=$(field server out '^server: CQ events: received [0-9]+, acked ([0-9]+),.*')
[[ $events -gt 0 && $events == "$acked" ]] || fail "server: events received $events, acked $acked"
expect_match server out '^server: cpu: user [0-9.]+ s, system [0-9.]+ s; context switches: [0-9]+ voluntary, [0-9]+ involuntary$'

# The reference client: ibv_rc_pingpong, polling and with -e.
port=$((port + 1))
gid=(); [[ $RDMA_DEVICE != rxe* ]] || gid=(-g 1)
run_cmd server2 "$bin" "${dev[@]}" -p "$port" -s 64 -n $n --exit-after 2 &
server=$!
wait_for_listen "$port"
run_cmd rc_busy ibv_rc_pingpong "${dev[@]}" "${gid[@]}" -p "$port" -s 64 -n $n 127.0.0.1 &
c1=$!
run_cmd rc_event ibv_rc_pingpong "${dev[@]}" "${gid[@]}" -p "$port" -s 64 -n $n -e 127.0.0.1 &
c2=$!
wait $c1 $c2 "$server"
expect_exit rc_busy 0
expect_exit rc_event 0
expect_match rc_event out "^$n iters in [0-9.]+ seconds"
expect_exit server2 0
expect_match server2 out "^server: clients: 2 connected, 2 complete, 0 failed, 0 rejected, 0 aborted$"
echo PASS
