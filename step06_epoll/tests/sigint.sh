#!/usr/bin/env bash
# SIGINT (then SIGTERM) mid-flood: the server stops accepting, aborts in-flight
# clients, acks every event, destroys everything and exits 0 with no
# "destroy failed:". Its clients then fail cleanly within a bound, never hang.
# Run it from the ASan build too (build/s6-asan): it must be clean there.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
bin=$1
for sig in INT TERM; do
    port=$(new_port)
    common=(-d "$RDMA_DEVICE" -p "$port" -s 64 -n 100000 -r 64 --check --timeout 10)
    # Started directly (not through run_cmd's subshell) so that kill reaches it.
    env --default-signal=INT "$bin" "${common[@]}" >"$TEST_TMP/server_$sig.out" 2>"$TEST_TMP/server_$sig.err" &
    server=$!
    wait_for_listen "$port"
    pids=()
    for ((i = 0; i < 4; i++)); do
        run_cmd "client_${sig}_$i" "$bin" "${common[@]}" -e 127.0.0.1 &
        pids+=($!)
    done
    # Wait until every client is past its handshake (it prints both addresses), then
    # let the flood run for a moment.
    for ((t = 0; t < 600; t++)); do
        ready=0
        for ((i = 0; i < 4; i++)); do
            [[ $(grep -c address: "$TEST_TMP/client_${sig}_$i.out" 2>/dev/null) == 2 ]] && ((ready++))
        done
        ((ready == 4)) && break
        sleep 0.1
    done
    ((ready == 4)) || fail "only $ready of 4 clients finished their handshake within 60 s"
    wait_for_packets "$(sent_packets)" 1000 30  # the flood is under way (this test runs alone)
    kill -s "$sig" "$server"
    start=$SECONDS
    rc=0
    wait "$server" || rc=$?
    echo "$rc" >"$TEST_TMP/server_$sig.rc"
    echo "server stopped $((SECONDS - start)) s after SIG$sig (exit $rc)"
    sed 's/^/  out| /' "$TEST_TMP/server_$sig.out"
    sed 's/^/  err| /' "$TEST_TMP/server_$sig.err"
    stopped=$(ms_now)
    wait "${pids[@]}"
    # Their last send was acked, so nothing fails on the QP; the server's end closes their TCP
    # connections, which each client checks whenever nothing came for --safety-ms (100 ms).
    expect_within "$stopped" 5 "from the server's exit to its clients' exits"
    expect_exit "server_$sig" 0
    expect_line "server_$sig" out "server: SIG$sig received: stop accepting, abort 4 in-flight client(s)"
    expect_match "server_$sig" out '^server: clients: 4 connected, 0 complete, 0 failed, 0 rejected, 4 aborted$'
    expect_match "server_$sig" out '^server: client [0-9]+ \(127\.0\.0\.1:[0-9]+\): aborted by shutdown after [1-9][0-9]* of 100000 messages'
    expect_no_match "server_$sig" err 'destroy failed:|AddressSanitizer|LeakSanitizer|runtime error'
    events=$(field "server_$sig" out '^server: CQ events: received ([0-9]+), acked [0-9]+,.*')
    acked=$(field "server_$sig" out '^server: CQ events: received [0-9]+, acked ([0-9]+),.*')
    [[ $events -gt 0 && $events == "$acked" ]] || fail "server: events received $events, acked $acked"
    for ((i = 0; i < 4; i++)); do
        rc=$(<"$TEST_TMP/client_${sig}_$i.rc")
        case $rc in
            6) expect_line "client_${sig}_$i" err "${bin##*/}: the server closed the connection during the run: it stopped, or ended this client's session" ;;
            1) expect_match "client_${sig}_$i" err 'IBV_WC_' ;;  # a send in flight failed first
            *) fail "client $i: expected exit 6 (the server closed the connection) or 1 (QP error), got $rc" ;;
        esac
        expect_no_match "client_${sig}_$i" err 'destroy failed:|AddressSanitizer|LeakSanitizer'
    done
done

# An event-mode client mid-run: it holds SIGINT blocked across its loop and unblocks it only
# inside each sleep (ppoll's mask), so SIGINT still ends it at once (the 3 s bound allows for the
# teardown under emulation): exit 130, nothing leaked. A sleep that kept it blocked would hang.
port=$(new_port)
common=(-d "$RDMA_DEVICE" -p "$port" -s 64 -n 100000000 --timeout 10)
"$bin" "${common[@]}" >"$TEST_TMP/server_c.out" 2>"$TEST_TMP/server_c.err" &
server=$!
wait_for_listen "$port"
run_cmd client_int env --default-signal=INT "$bin" "${common[@]}" -e 127.0.0.1 &
runner=$!
client=$(program_pid "$runner")
for ((t = 0; t < 600; t++)); do
    [[ $(grep -c address: "$TEST_TMP/client_int.out" 2>/dev/null) == 2 ]] && break
    sleep 0.1
done
sleep 1
kill -s INT "$client"
sent=$(ms_now)
wait "$runner"
expect_within "$sent" 3 "the event client's exit after SIGINT"
expect_exit client_int 130
expect_line client_int err "${bin##*/}: interrupted by SIGINT"
expect_no_match client_int err 'destroy failed:|AddressSanitizer|LeakSanitizer|runtime error'
kill -s TERM "$server"
wait "$server" || true
echo PASS
