#!/usr/bin/env bash
# The answer to step06's exercise 2, run: a server built with kAckBatch 1000 (the exercise's patch)
# acks nothing while its one event client's 100 messages run, yet when the client ends, its events
# and acks match (finish() acks everything outstanding before the CQ is destroyed), and the server
# exits 0.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
prog=$1
port=$(new_port)
common=(-d "$RDMA_DEVICE" -p "$port" -s 64 -n 100 --check)

run_cmd server timeout 60 "$prog" "${common[@]}" --exit-after 1 &
server=$!
wait_for_listen "$port" 30 "$server"
run_cmd client timeout 60 "$prog" "${common[@]}" -e 127.0.0.1
wait "$server"
expect_exit client 0
expect_exit server 0
line=$(grep -E '^server: client 1 \(.*\): complete; 100 received, 100 sent, 100 verified; events [0-9]+, acked [0-9]+,' \
    "$TEST_TMP/server.out") || fail "server: no 'complete' line for client 1"
events=$(sed -nE 's/.*; events ([0-9]+), acked ([0-9]+),.*/\1/p' <<<"$line")
acked=$(sed -nE 's/.*; events ([0-9]+), acked ([0-9]+),.*/\2/p' <<<"$line")
((events > 0 && events < 1000)) || fail "server: $events events, expected 1..999 (fewer than one batch)"
[[ $events == "$acked" ]] || fail "server: events $events, acked $acked"
expect_match server out "^server: CQ events: received $events, acked $events,"
echo "PASS: $events events, all acked at the client's end"
