#!/usr/bin/env bash
# Interop (issue 14): step09 speaks step06's wire protocol. A step06 server serves step09 clients,
# and a step09 server serves step06 clients (one that polls, busy, and one that sleeps on events,
# -e); step09's clients always wait on events. Every reply is checked (--check). Every process exits 0, each server reports both
# clients complete, and step09's lines are step06's: the servers' lines, and the clients', are the
# same once figures are masked.
#   tests/interop.sh STEP09_BIN STEP06_BIN
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
(($# == 2)) || fail "usage: interop.sh STEP09_BIN STEP06_BIN"
step09=$1
step06=$2
n=200

# pairing NAME SERVER_BIN CLIENT_BIN CLIENT...: a server and its two clients, each CLIENT named
# busy (step06's default) or event, event2 (step06's -e; step09's only mode); all must succeed.
pairing() {
    local name=$1 server_bin=$2 client_bin=$3 port server c mode pids=()
    shift 3
    port=$(new_port)
    local common=(-d "$RDMA_DEVICE" -p "$port" -s 64 -n "$n" --check --timeout 30)
    run_cmd "${name}_server" "$server_bin" "${common[@]}" --exit-after 2 &
    server=$!
    wait_for_listen "$port" 30 "$server"
    for c in "$@"; do
        mode=()
        [[ $c == busy || $client_bin == "$step09" ]] || mode=(-e)
        run_cmd "${name}_$c" "$client_bin" "${common[@]}" "${mode[@]}" 127.0.0.1 &
        pids+=($!)
    done
    wait "${pids[@]}" "$server"
    for c in "$@"; do
        expect_exit "${name}_$c" 0
        expect_match "${name}_$c" out "^$n iters in [0-9.]+ seconds = [0-9.]+ usec/iter\$"
        expect_line "${name}_$c" out "client: verified $n of $n replies"
        expect_match "${name}_$c" out "^client: mode ${c%2}, events [0-9]+, acked [0-9]+,"
        expect_no_match "${name}_$c" err .
    done
    expect_exit "${name}_server" 0
    expect_line "${name}_server" out "server: clients: 2 connected, 2 complete, 0 failed, 0 rejected, 0 aborted"
    expect_line "${name}_server" out "server: messages received: $((2 * n))"
    [[ $(grep -c "): complete; $n received, $n sent, $n verified; " "$TEST_TMP/${name}_server.out") == 2 ]] ||
        fail "${name}_server: expected 2 clients with $n verified messages each"
    expect_no_match "${name}_server" err .
}

# shape NAME...: the stdout lines of the runs NAME that start with "server: " or "client: ", or
# hold the ping-pong figures, with every number masked as '#' (the safety net's occasional
# finds left out: how many there are is timing); sorted, without repeats.
shape() {
    local name
    for name in "$@"; do
        grep -E '^(server|client): |iters in|bytes in|#bytes' "$TEST_TMP/$name.out" |
            grep -v 'safety net found'
    done | sed -E 's/[0-9]+(\.[0-9]+)?/#/g' | sort -u
}

# expect_same_shape WHAT STEP06_RUNS -- STEP09_RUNS: both sides print the same lines.
expect_same_shape() {
    local what=$1 runs06=() runs07=()
    shift
    while [[ $1 != -- ]]; do runs06+=("$1"); shift; done
    shift
    runs07=("$@")
    shape "${runs06[@]}" >"$TEST_TMP/$what.step06"
    shape "${runs07[@]}" >"$TEST_TMP/$what.step09"
    [[ -s $TEST_TMP/$what.step06 ]] || fail "$what: step06 printed no line to compare"
    diff -u "$TEST_TMP/$what.step06" "$TEST_TMP/$what.step09" ||
        fail "$what: step09's lines (+) differ from step06's (-), figures aside"
    echo "$what: step09 prints step06's $(wc -l <"$TEST_TMP/$what.step06") line shapes"
}

pairing s06_serves_s07 "$step06" "$step09" event event2
pairing s07_serves_s06 "$step09" "$step06" busy event
expect_same_shape server s06_serves_s07_server -- s07_serves_s06_server
expect_same_shape client s07_serves_s06_event -- s06_serves_s07_event s06_serves_s07_event2
echo "PASS: step09 client <-> step06 server, step06 client <-> step09 server"
