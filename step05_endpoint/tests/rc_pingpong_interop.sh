#!/usr/bin/env bash
# --rc-pingpong-compat: step05's ping-pong and rdma-core's ibv_rc_pingpong complete in both
# directions; without it, a v2 server tells an ibv_rc_pingpong client off clearly.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
program=$1
command -v ibv_rc_pingpong >/dev/null || fail "ibv_rc_pingpong is missing (package ibverbs-utils)"
ref=(ibv_rc_pingpong -d "$RDMA_DEVICE" -g 1 -n 100)
ours=("$program" -d "$RDMA_DEVICE" -n 100 --rc-pingpong-compat --timeout 30)
check_pair() {  # $1 = server run, $2 = client run, $3 = size
    for side in "$1" "$2"; do
        expect_exit "$side" 0
        expect_match "$side" out "^$(($3 * 200)) bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec\$"
        expect_match "$side" out '^100 iters in [0-9.]+ seconds = [0-9.]+ usec/iter$'
    done
}
# shellcheck disable=SC2043 # one size today; add sizes to the list
for size in 4096; do
    port=$(new_port)
    run_cmd "ours_server$size" "${ours[@]}" -p "$port" -s "$size" &
    server=$!
    wait_for_listen "$port" 30
    run_cmd "ref_client$size" "${ref[@]}" -p "$port" -s "$size" 127.0.0.1
    wait "$server"
    check_pair "ours_server$size" "ref_client$size" "$size"

    port=$(new_port)
    run_cmd "ref_server$size" "${ref[@]}" -p "$port" -s "$size" &
    server=$!
    wait_for_listen "$port" 30
    run_cmd "ours_client$size" "${ours[@]}" -p "$port" -s "$size" 127.0.0.1
    wait "$server"
    check_pair "ref_server$size" "ours_client$size" "$size"
done

port=$(new_port)
run_cmd v2server "$program" -d "$RDMA_DEVICE" -p "$port" -n 10 --timeout 60 &
server=$!
wait_for_listen "$port" 30
run_cmd refclient timeout 60 "${ref[@]}" -p "$port" 127.0.0.1
wait "$server"
expect_exit v2server 6
expect_line v2server err 'step05_endpoint: handshake v3: bad magic 0x30303030 (expected 0x52444d41 "RDMA"); received "0000"'
expect_line v2server err "hint: the peer does not speak handshake v3; with ibv_rc_pingpong or step04, use --rc-pingpong-compat"
echo PASS
