#!/usr/bin/env bash
# rdma-core's ibv_rc_pingpong completes between a server and a client.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
port=$((20000 + RANDOM % 20000))
gid=(); [[ -z ${RDMA_GID_INDEX:-} ]] || gid=(-g "$RDMA_GID_INDEX")
[[ ${#gid[@]} -gt 0 || $RDMA_DEVICE != rxe* ]] || gid=(-g 1)
run_cmd server ibv_rc_pingpong -d "$RDMA_DEVICE" "${gid[@]}" -p "$port" -n 200 &
server=$!
wait_for_listen "$port"
run_cmd client ibv_rc_pingpong -d "$RDMA_DEVICE" "${gid[@]}" -p "$port" -n 200 127.0.0.1
wait "$server"
for side in server client; do
    expect_exit $side 0
    expect_match $side out '^1638400 bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec$'
    expect_match $side out '^200 iters in [0-9.]+ seconds = [0-9.]+ usec/iter$'
done
echo PASS
