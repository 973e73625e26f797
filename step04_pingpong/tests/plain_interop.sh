#!/usr/bin/env bash
# step04_pingpong --plain (the plain loop) interoperates with ibv_rc_pingpong in both directions
# and with step04's default (optimised) loop, and prints the same lines: ibv_rc_pingpong's two
# summary lines and the latency table, with figures that agree with each other.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
prog=$1
port=$(new_port)
gid=(-g "${RDMA_GID_INDEX:-1}")  # ibv_rc_pingpong sends no GID without -g; RoCE needs one
iters=100

expect_summary() {  # NAME SIZE ITERS
    expect_exit "$1" 0
    expect_match "$1" out "^$(($2 * $3 * 2)) bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec\$"
    expect_match "$1" out "^$3 iters in [0-9.]+ seconds = [0-9.]+ usec/iter\$"
}
# expect_figures NAME SIZE ITERS: the table's row, and figures that fit together: t_min <=
# t_typical <= t_max, and the one-way median below the round trip (usec/iter).
expect_figures() {
    local row usec
    expect_line "$1" out " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
    row=$(awk -v s="$2" -v n="$3" '$1 == s && $2 == n && NF == 9 { print; exit }' "$TEST_TMP/$1.out")
    [[ -n $row ]] || fail "$1: no table row for $2 bytes, $3 iterations"
    usec=$(field "$1" out '^[0-9]+ iters in [0-9.]+ seconds = ([0-9.]+) usec.iter$') || exit 1
    awk -v u="$usec" '{ exit !($3 > 0 && $3 <= $5 && $5 <= $4 && $5 < u) }' <<<"$row" ||
        fail "$1: figures do not fit together: row '$row', $usec usec/iter"
    echo "$1: t_typical $(awk '{ print $5 }' <<<"$row") usec, $usec usec/iter"
}
# pair NAME SERVER-CMD... -- CLIENT-CMD...: runs the server on a new port, then the client.
pair() {
    local name=$1 server=() client=()
    shift
    while [[ $1 != -- ]]; do server+=("$1"); shift; done
    shift
    client=("$@")
    port=$((port + 1))
    run_cmd "${name}_server" timeout 90 "${server[@]}" -p "$port" &
    wait_for_listen "$port" 30 $!
    run_cmd "${name}_client" timeout 90 "${client[@]}" -p "$port" 127.0.0.1
    wait
}

# 1. step04 --plain server, ibv_rc_pingpong client (its defaults: -s 4096 -r 500, and -n).
pair rc1 "$prog" --plain -n $iters --timeout 60 -- \
    ibv_rc_pingpong -d "$RDMA_DEVICE" "${gid[@]}" -n $iters
expect_summary rc1_server 4096 $iters
expect_figures rc1_server 4096 $iters
expect_summary rc1_client 4096 $iters

# 2. ibv_rc_pingpong server, step04 --plain client.
pair rc2 ibv_rc_pingpong -d "$RDMA_DEVICE" "${gid[@]}" -n $iters -- \
    "$prog" --plain -n $iters --timeout 60
expect_summary rc2_server 4096 $iters
expect_summary rc2_client 4096 $iters
expect_figures rc2_client 4096 $iters

# 3. --plain with step04's default loop, each role, small and multi-packet messages; the
#    second pair verifies every byte (--check) after a warm-up.
pair mix1 "$prog" --plain -s 2 -n $iters --timeout 60 -- "$prog" -s 2 -n $iters --timeout 60
pair mix2 "$prog" -s 65536 -n $iters --check --warmup 20 --timeout 60 -- \
    "$prog" --plain -s 65536 -n $iters --check --warmup 20 --timeout 60
for side in server client; do
    expect_summary mix1_$side 2 $iters
    expect_figures mix1_$side 2 $iters
    expect_summary mix2_$side 65536 $iters
    expect_figures mix2_$side 65536 $iters
done

# 4. --plain on both sides, with --latency-file: n - 1 samples after the 5 header lines.
pair both "$prog" --plain -s 64 -n $iters --timeout 60 -- \
    "$prog" --plain -s 64 -n $iters --timeout 60 --latency-file "$TEST_TMP/plain.lat"
expect_summary both_server 64 $iters
expect_summary both_client 64 $iters
expect_figures both_client 64 $iters
[[ $(grep -cE '^[0-9]+\.[0-9]{3}$' "$TEST_TMP/plain.lat") == $((iters - 1)) ]] ||
    fail "plain.lat: expected $((iters - 1)) samples"
echo PASS
