# Faults: no server, port in use, unknown device, a depth over the device's limit, a peer
# killed mid-run, SIGINT. Each ends with its documented exit code and message, in bounded time.
source "$TESTLIB"
require_device
program=$1

port=$((20000 + RANDOM % 20000))
run_cmd refused "$program" -d "$RDMA_DEVICE" -p "$port" --timeout 1 127.0.0.1
expect_exit refused 6
expect_line refused err "step05_endpoint: cannot connect to 127.0.0.1:$port: Connection refused (for 1 s)"

run_cmd nodev "$program" -d nosuchdev0
expect_exit nodev 5
expect_line nodev err "step05_endpoint: no RDMA device named 'nosuchdev0' (found: $RDMA_DEVICE)"

run_cmd depth "$program" -d "$RDMA_DEVICE" -r 16000000
expect_exit depth 2
expect_match depth err "^step05_endpoint: rx depth 16000000 is over $RDMA_DEVICE's limit max_qp_wr = [0-9]+\$"

run_cmd noport "$program" -d "$RDMA_DEVICE" -i 7
expect_exit noport 5
expect_match noport err "^step05_endpoint: $RDMA_DEVICE has no port 7 \(ports: 1\.\.[0-9]+\)\$"

port=$((20000 + RANDOM % 20000))
run_cmd first "$program" -d "$RDMA_DEVICE" -p "$port" --timeout 20 &
first=$!
wait_for_listen "$port" 30
run_cmd inuse "$program" -d "$RDMA_DEVICE" -p "$port" --timeout 2
expect_exit inuse 6
expect_line inuse err "step05_endpoint: cannot listen on port $port: Address already in use"
# SIGINT while waiting for a client: a clean teardown and 130.
kill -INT "$(pgrep -f -- "-p $port --timeout 20" | head -n 1)"
wait "$first"
expect_exit first 130
expect_line first err "step05_endpoint: interrupted"

# A client killed mid-run: the server ends within seconds, naming the completion status or the
# timeout; it never hangs.
port=$((20000 + RANDOM % 20000))
run_cmd survivor "$program" -d "$RDMA_DEVICE" -p "$port" -n 100000000 -s 64 --timeout 3 &
server=$!
wait_for_listen "$port" 30
"$program" -d "$RDMA_DEVICE" -p "$port" -n 100000000 -s 64 --timeout 3 127.0.0.1 >/dev/null 2>&1 &
victim=$!
sleep 3
kill -KILL "$victim"
start=$SECONDS
wait "$server"
((SECONDS - start <= 10)) || fail "the survivor took $((SECONDS - start)) s to notice"
rc=$(<"$TEST_TMP/survivor.rc")
[[ $rc == 1 || $rc == 7 ]] || fail "survivor: expected exit 1 or 7, got $rc"
expect_match survivor err "^step05_endpoint: (work completion failed: IBV_WC_RETRY_EXC_ERR|no completion for 3 s)"
echo PASS
