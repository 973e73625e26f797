#!/usr/bin/env bash
# step08_rdma_cm against rdma-core's own examples (Debian's rdmacm-utils), across the two-host
# lab's wire, both ways: step08's server on host a answers rdma_client on host b, and step08's
# client on host a talks to rdma_server on host b. Neither example sends private data: each
# gets their exchange, one 16-byte SEND each way, on the examples' port 7471.
# shellcheck source=/dev/null
source "$TESTLIB"
require_peer
bin=$1
command -v rdma_server >/dev/null || fail "rdma_server is missing: tools/install-deps.sh installs rdmacm-utils"

run_cmd server timeout 60 "$bin" --exit-after 1 &
server=$!
wait_for_line server out '^server: listening on rdma_cm port 7471;' 30
run_cmd rdma_client "$PEER" run --timeout 40 -- rdma_client -s "$LAB_ADDR"
wait "$server"
expect_exit rdma_client 0
expect_line rdma_client out "rdma_client: end 0"
expect_exit server 0
expect_line server out "server: client 1 ($LAB_PEER_ADDR): complete; rdma-core's example exchange"

job=$("$PEER" start -- timeout 40 rdma_server -s "$LAB_PEER_ADDR")
for ((i = 0; i < 100; i++)); do  # rdma_server prints "start" before it listens: try again
    run_cmd client "$bin" "$LAB_PEER_ADDR"
    [[ $(<"$TEST_TMP/client.rc") == 6 ]] || break
    sleep 0.2
done
run_cmd rdma_server "$PEER" wait --timeout 40 "$job"
expect_exit client 0
expect_line client out "client: connected to $LAB_PEER_ADDR port 7471 (no private data: rdma-core's example exchange), QPN $(field client out '.*QPN (0x[0-9a-f]{6})$')"
expect_match client out '^1 iters in [0-9.]+ seconds = [0-9.]+ usec/iter$'
expect_exit rdma_server 0
expect_line rdma_server out "rdma_server: end 0"
echo PASS
