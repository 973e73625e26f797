#!/usr/bin/env bash
# Flood: CLIENTS concurrent clients (default 9) on the one-threaded server, each
# sending MSGS checked messages, with 64 posted receives each (and a CQ for all they post):
# every message is delivered and verified, nothing hangs, acked == received, and no wake-up is lost.
#   tests/flood.sh BIN [MSGS [CLIENTS]]   (ctest passes the CI size; see the chapter)
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
bin=$1
msgs=${2:-20000}
clients=${3:-9}
port=$(new_port)
common=(-d "$RDMA_DEVICE" -p "$port" -s 64 -n "$msgs" -r 64 --check --timeout 30)
start=$SECONDS
run_cmd server "$bin" "${common[@]}" --exit-after "$clients" &
server=$!
wait_for_listen "$port"
pids=()
for ((i = 0; i < clients; i++)); do
    mode=(-e)
    ((i % 3 == 2)) && mode=(--spin-us 20)
    run_cmd "client$i" "$bin" "${common[@]}" "${mode[@]}" 127.0.0.1 &
    pids+=($!)
done
wait "${pids[@]}" "$server"
echo "flood: $clients clients x $msgs messages in $((SECONDS - start)) s"
for ((i = 0; i < clients; i++)); do
    expect_exit "client$i" 0
    expect_line "client$i" out "client: verified $msgs of $msgs replies"
    ev=$(field "client$i" out '^client: mode [a-z]+, events ([0-9]+), .*')
    ack=$(field "client$i" out '^client: mode [a-z]+, events [0-9]+, acked ([0-9]+),.*')
    [[ $ev == "$ack" ]] || fail "client$i: events $ev, acked $ack"
done
expect_exit server 0
expect_line server out "server: clients: $clients connected, $clients complete, 0 failed, 0 rejected, 0 aborted"
expect_line server out "server: messages received: $((clients * msgs))"
[[ $(grep -c "): complete; $msgs received, $msgs sent, $msgs verified; " "$TEST_TMP/server.out") == "$clients" ]] ||
    fail "server: expected $clients clients with $msgs verified messages each"
events=$(field server out '^server: CQ events: received ([0-9]+), acked [0-9]+,.*')
acked=$(field server out '^server: CQ events: received [0-9]+, acked ([0-9]+),.*')
[[ $events -gt 0 && $events == "$acked" ]] || fail "server: events received $events, acked $acked"
# BIN is the flood's build (tests/wakeup_classifier.patch): every CQ, the server's and each client's,
# prints "cq wake-ups: late events N, lost wake-ups N" when it is destroyed. None may be lost.
served=$(grep -c '^cq wake-ups: ' "$TEST_TMP/server.out")
((served >= clients)) || fail "server: $served 'cq wake-ups' lines for $clients clients (is BIN the flood's build?)"
lost=$(awk -F'lost wake-ups ' '/^cq wake-ups: /{n += $2} END{print n + 0}' "$TEST_TMP"/*.out)
late=$(awk -F'late events |,' '/^cq wake-ups: /{n += $2} END{print n + 0}' "$TEST_TMP"/*.out)
echo "flood: late events $late, lost wake-ups $lost"
[[ $lost == 0 ]] || fail "$lost lost wake-up(s); the flood must lose none"
grep -h "safety-net finds" "$TEST_TMP"/*.out | sed 's/^/flood: /'
echo PASS
