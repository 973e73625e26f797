#!/usr/bin/env bash
# Every technique against the target on the same host: -t 1, -t 16, -Q (at -m 1024, as
# step07_wire does; the ASan pass leaves that test out), -l with -I, -q 2, a small -a sweep, -D
# and --op send. Each run: both sides exit 0, the target's count matches, and the
# client's table has one row per size with the size, the iterations and positive figures.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
program=$1

# run_pair NAME ROWS "SERVER AND CLIENT OPTIONS": a target and its client; the client's table.
run_pair() {
    local name=$1 rows=$2 port server
    port=$(new_port)
    read -ra args <<<"$3"
    run_cmd "$name-server" "$program" -d "$RDMA_DEVICE" -p "$port" --timeout 10 "${args[@]}" &
    server=$!
    wait_for_listen "$port" 20 "$server"
    run_cmd "$name" "$program" -d "$RDMA_DEVICE" -p "$port" --timeout 10 "${args[@]}" 127.0.0.1
    wait "$server"
    expect_exit "$name" 0
    expect_exit "$name-server" 0
    expect_match "$name-server" out "^server: [0-9]+ (RDMA WRITEs|SENDs) on [0-9]+ QP\(s\) in [0-9]+ size\(s\); every final count matched$"
    expect_line "$name" out " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
    # The data rows: every line between the header and the closing dashed line. The average is
    # printed to 0.01 MB/s, so a 2-byte row may show 0.00 (under ASan, it did): it must be positive
    # from 1 KiB on; the message rate, to 10^-6 Mpps, always.
    awk '/#bytes/ {on = 1; next} /^-+$/ && on {exit} on' "$TEST_TMP/$name.out" >"$TEST_TMP/$name.rows"
    local got
    got=$(wc -l <"$TEST_TMP/$name.rows")
    ((got == rows)) || fail "$name: expected $rows table rows, got $got"
    awk 'NF != 5 || $3 !~ /^[0-9]+\.[0-9][0-9]$/ || $4 !~ /^[0-9]+\.[0-9][0-9]$/ ||
         $5 !~ /^[0-9]+\.[0-9][0-9][0-9][0-9][0-9][0-9]$/ || ($1 >= 1024 && $4 + 0 <= 0) ||
         $5 + 0 <= 0 {exit 1}' \
        "$TEST_TMP/$name.rows" || fail "$name: a row is not 5 fields of positive figures"
}

# expect_rows NAME "SIZE ITERS PEAK?" ...: each row's size and iterations, and a positive peak.
expect_rows() {
    local name=$1 i=0 size iters peak
    shift
    while read -r size iters peak _; do
        read -r want_size want_iters <<<"$1"
        [[ $size == "$want_size" && $iters == "$want_iters" ]] ||
            fail "$name: row $i is '$size $iters', expected '$1'"
        awk -v p="$peak" 'BEGIN {exit !(p > 0)}' || fail "$name: row $i has peak $peak"
        shift
        i=$((i + 1))
    done <"$TEST_TMP/$name.rows"
}

run_pair one 1 "-t 1 -n 200 -s 4096"
expect_rows one "4096 200"
expect_line one-server out "server: 200 RDMA WRITEs on 1 QP(s) in 1 size(s); every final count matched"
run_pair window 1 "-t 16 -n 1000 -s 4096"
expect_rows window "4096 1000"
run_pair signal 1 "-t 16 -Q 8 -n 1001 -s 64 -m 1024"
expect_rows signal "64 1001"
# Lists of 5 in a window of 16: after three lists 1 credit is left, and the 16th, signaled work
# request must still be posted (a list that waited for 5 credits would wait for ever: exit 7).
run_pair postlist 1 "-t 16 -Q 16 -l 5 -I 64 -n 1003 -s 64"
expect_rows postlist "64 1003"
run_pair qps 1 "-t 16 -q 2 -n 1000 -s 4096"
expect_rows qps "4096 2000"
expect_line qps-server out "server: 2000 RDMA WRITEs on 2 QP(s) in 1 size(s); every final count matched"
run_pair sweep 5 "-a -s 32 -t 16 -n 100"
expect_rows sweep "2 100" "4 100" "8 100" "16 100" "32 100"
expect_line sweep-server out "server: 500 RDMA WRITEs on 1 QP(s) in 5 size(s); every final count matched"
run_pair send 1 "--op send -t 16 -Q 4 -q 2 -n 1000 -s 4096"
expect_rows send "4096 2000"
expect_line send-server out "server: 2000 SENDs on 2 QP(s) in 1 size(s); every final count matched"
# -D: the count is measured; perftest prints no peak then (0.00).
run_pair duration 1 "-D 1 -t 16 -s 4096"
awk '$1 != 4096 || $2 < 100 || $3 != "0.00" {exit 1}' "$TEST_TMP/duration.rows" ||
    fail "duration: expected 4096 bytes, at least 100 iterations and peak 0.00"
echo PASS
