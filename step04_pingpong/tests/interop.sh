# step04_pingpong interoperates with rdma-core's ibv_rc_pingpong in both directions, and with
# itself at sizes 1, 64, 4096 and 65536 (multi-packet), with --check and --warmup.
source "$TESTLIB"
require_device
prog=$1
port=$((20000 + RANDOM % 20000))
gid=(-g "${RDMA_GID_INDEX:-1}")  # ibv_rc_pingpong sends no GID without -g; RoCE needs one
iters=100

# expect_summary NAME SIZE ITERS: ibv_rc_pingpong's two lines (and, for step04, the table).
expect_summary() {
    expect_exit "$1" 0
    expect_match "$1" out "^$(($2 * $3 * 2)) bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec\$"
    expect_match "$1" out "^$3 iters in [0-9.]+ seconds = [0-9.]+ usec/iter\$"
}
expect_table() {
    expect_line "$1" out " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
    expect_match "$1" out "^ $2 +$3 +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2}[[:space:]]+[0-9]+\.[0-9]{2}[[:space:]]+[0-9]+\.[0-9]{2}[[:space:]]+[0-9]+\.[0-9]{2}[[:space:]]+[0-9]+\.[0-9]{2}"
}

# 1. step04 server, ibv_rc_pingpong client (all defaults but -n).
port=$((port + 1))
run_cmd s04_server timeout 90 "$prog" -p "$port" -n $iters --timeout 90 &
wait_for_listen "$port" 30
run_cmd rc_client timeout 90 ibv_rc_pingpong -d "$RDMA_DEVICE" "${gid[@]}" -p "$port" -n $iters 127.0.0.1
wait
expect_summary s04_server 4096 $iters
expect_table s04_server 4096 $iters
expect_summary rc_client 4096 $iters

# 2. ibv_rc_pingpong server, step04 client.
port=$((port + 1))
run_cmd rc_server timeout 90 ibv_rc_pingpong -d "$RDMA_DEVICE" "${gid[@]}" -p "$port" -n $iters &
wait_for_listen "$port" 30
run_cmd s04_client timeout 90 "$prog" -p "$port" -n $iters 127.0.0.1
wait
expect_summary rc_server 4096 $iters
expect_summary s04_client 4096 $iters
expect_table s04_client 4096 $iters

# 3. step04 with step04 at every size; the last two also verify the payload.
for size in 1 64 4096 65536; do
    extra=()
    ((size >= 4096)) && extra=(--check --warmup 20)
    port=$((port + 1))
    run_cmd server_$size timeout 90 "$prog" -p "$port" -s $size -n $iters --timeout 90 "${extra[@]}" &
    wait_for_listen "$port" 30
    run_cmd client_$size timeout 90 "$prog" -p "$port" -s $size -n $iters "${extra[@]}" 127.0.0.1
    wait
    for side in server client; do
        expect_summary ${side}_$size $size $iters
        expect_table ${side}_$size $size $iters
    done
done
# Inline sends are used exactly when the message fits the QP's max_inline_data.
echo PASS
