#!/usr/bin/env bash
# step04_pingpong interoperates with rdma-core's ibv_rc_pingpong in both directions, and with
# itself at sizes 1, 64, 4096 and 65536 (multi-packet), with --check and --warmup, and
# --latency-file at 64 bytes.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
prog=$1
port=$(new_port)
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
    client_extra=()
    ((size == 64)) && client_extra=(--latency-file "$TEST_TMP/client64.lat")
    run_cmd client_$size timeout 90 "$prog" -p "$port" -s $size -n $iters "${extra[@]}" \
        "${client_extra[@]}" 127.0.0.1
    wait
    for side in server client; do
        expect_summary ${side}_$size $size $iters
        expect_table ${side}_$size $size $iters
    done
done
# -t 1: one send in the queue at a time, every send signaled (it used to wait for ever); with
# -m 1024, whose other runs are across the wire, which the ASan pass leaves out.
port=$((port + 1))
run_cmd t1_server timeout 60 "$prog" -p "$port" -s 64 -n $iters -t 1 -m 1024 --timeout 10 &
wait_for_listen "$port" 30
run_cmd t1_client timeout 60 "$prog" -p "$port" -s 64 -n $iters -t 1 -m 1024 --timeout 10 127.0.0.1
wait
expect_summary t1_server 64 $iters
expect_summary t1_client 64 $iters
# --latency-file (64 bytes): the header, iters - 1 one-way samples with 3 decimals, and the
# median of all but the 2 largest (perftest's rule) is the table's t_typical.
lat=$TEST_TMP/client64.lat
samples=$((iters - 1))
expected=$'# label: step04 busy poll\n# program: step04_pingpong\n# size: 64\n# iterations: '$samples$'\n# unit: usec one-way (round trip / 2)'
[[ $(head -n 5 "$lat") == "$expected" ]] || fail "client64.lat: unexpected header: $(head -n 5 "$lat")"
[[ $(grep -cE '^[0-9]+\.[0-9]{3}$' "$lat") == "$samples" && $(wc -l <"$lat") == $((samples + 5)) ]] ||
    fail "client64.lat: expected $samples samples with 3 decimals"
median=$(grep -v '^#' "$lat" | sort -g | awk -v m=$((samples - 2)) '
    { s[NR - 1] = $1 }
    END { print (m % 2 == 0) ? (s[m / 2] + s[m / 2 - 1]) / 2 : s[int(m / 2)] }')
typical=$(awk '/t_typical/ { getline; print $5; exit }' "$TEST_TMP/client_64.out")
awk -v a="$median" -v b="$typical" 'BEGIN { d = a - b; exit !(d < 0.006 && d > -0.006) }' ||
    fail "client64.lat: median $median, but the table says t_typical $typical"
# Inline sends are used exactly when the message fits the QP's max_inline_data.
echo PASS
