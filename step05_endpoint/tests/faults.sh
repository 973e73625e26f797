#!/usr/bin/env bash
# Faults: no server, port in use, an unknown device, a peer
# killed mid-run, a peer stopped mid-run (the idle probe), SIGINT. Each ends with its documented exit code and message, in bounded time.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
program=$1

port=$(new_port)
run_cmd refused "$program" -d "$RDMA_DEVICE" -p "$port" --timeout 1 127.0.0.1
expect_exit refused 6
expect_line refused err "step05_endpoint: cannot connect to 127.0.0.1 port $port: Connection refused (tried for 1 s)"
expect_line refused err "hint: no server listens there: start the server first, or check -p"

run_cmd nodev "$program" -d nosuchdev0
expect_exit nodev 5
expect_line nodev err "step05_endpoint: no RDMA device named 'nosuchdev0' (found: $RDMA_DEVICE)"

port=$(new_port)
run_cmd first env --default-signal=INT "$program" -d "$RDMA_DEVICE" -p "$port" --timeout 20 &
first=$!
wait_for_listen "$port" 30
run_cmd inuse "$program" -d "$RDMA_DEVICE" -p "$port" --timeout 2
expect_exit inuse 6
expect_line inuse err "step05_endpoint: cannot listen on port $port: Address already in use"
# SIGINT while waiting for a client: a clean teardown and 130.
kill -INT "$(pgrep -f -- "-p $port --timeout 20" | head -n 1)"
wait "$first"
expect_exit first 130
expect_line first err "step05_endpoint: interrupted by SIGINT"

# A client killed mid-run: the server ends within seconds, naming the completion status
# (IBV_WC_RETRY_EXC_ERR when its pong is not acknowledged) or the --timeout; it never hangs.
# The client starts first (it retries until the server listens), so that the server's short
# --timeout only has to cover the run.
port=$(new_port)
"$program" -d "$RDMA_DEVICE" -p "$port" -n 100000000 -s 64 --timeout 30 127.0.0.1 >/dev/null 2>&1 &
victim=$!
run_cmd survivor "$program" -d "$RDMA_DEVICE" -p "$port" -n 100000000 -s 64 --timeout 3 &
server=$!
for ((i = 0; i < 300; i++)); do
    grep -q "remote address" "$TEST_TMP/survivor.out" 2>/dev/null && break
    sleep 0.1
done
sleep 1
kill -KILL "$victim"
start=$SECONDS
wait "$server"
((SECONDS - start <= 10)) || fail "the survivor took $((SECONDS - start)) s to notice"
rc=$(<"$TEST_TMP/survivor.rc")
[[ $rc == 1 || $rc == 7 ]] || fail "survivor: expected exit 1 or 7, got $rc"
expect_match survivor err "^step05_endpoint: (work completion failed: IBV_WC_RETRY_EXC_ERR|nothing from the peer for 3 s)"

# A server stopped (SIGSTOP) mid-run: its kernel QP still acknowledges, so after --timeout the
# client's probe send succeeds and the client says the peer is alive but stuck (exit 7).
port=$(new_port)
run_cmd stopped "$program" -d "$RDMA_DEVICE" -p "$port" -n 100000000 -s 64 --timeout 60 &
server=$!
wait_for_listen "$port" 30 "$server"
run_cmd prober "$program" -d "$RDMA_DEVICE" -p "$port" -n 100000000 -s 64 --timeout 2 127.0.0.1 &
client=$!
wait_for_line prober out "remote address" 30
sleep 1
server_program=$(program_pid "$server")
kill -STOP "$server_program"
start=$(ms_now)
wait "$client"
kill -KILL "$server_program"  # first: a failed check below must not leave it stopped
wait "$server" || true
expect_within "$start" 15 "the probe of a stopped server"
expect_exit prober 7
expect_match prober err "^step05_endpoint: nothing from the peer for 2 s \(after [0-9]+ of 100000000 messages\); probing its QP$"
expect_match prober err "^step05_endpoint: nothing from the peer for 2 s \(after [0-9]+ of 100000000 messages\)$"
expect_line prober err "hint: its QP acknowledged a probe, so the peer's program is alive but stuck (or stopped)"
echo PASS
