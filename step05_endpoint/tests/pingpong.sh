# step05's ping-pong (handshake v2) between two step05s, at several sizes: both sides print
# rc_pingpong's two summary lines and the latency table.
source "$TESTLIB"
require_device
program=$1
for size in 1 4096; do
    port=$((20000 + RANDOM % 20000))
    run_cmd "server$size" "$program" -d "$RDMA_DEVICE" -p "$port" -s "$size" -n 100 --timeout 30 &
    server=$!
    wait_for_listen "$port" 30
    run_cmd "client$size" "$program" -d "$RDMA_DEVICE" -p "$port" -s "$size" -n 100 --timeout 30 127.0.0.1
    wait "$server"
    for side in server client; do
        expect_exit "$side$size" 0
        expect_match "$side$size" out "^  local address:  LID 0x[0-9a-f]{4}, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:127.0.0.1\$"
        expect_match "$side$size" out "^  remote address: LID 0x[0-9a-f]{4}, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:127.0.0.1\$"
        expect_match "$side$size" out "^$((size * 200)) bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec\$"
        expect_match "$side$size" out '^100 iters in [0-9.]+ seconds = [0-9.]+ usec/iter$'
        expect_match "$side$size" out "^ $size[[:space:]]+100([[:space:]]+[0-9.]+){7}[[:space:]]*\$"
    done
    # The client's QPN is the server's remote QPN: the handshake carried it.
    client_qpn=$(field "client$size" out '^  local address:  LID 0x[0-9a-f]+, QPN (0x[0-9a-f]+),.*')
    expect_match "server$size" out "^  remote address: LID 0x[0-9a-f]+, QPN $client_qpn,"
done
echo PASS
