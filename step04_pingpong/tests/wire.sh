#!/usr/bin/env bash
# step04_pingpong across the two-host lab's wire: the server on host a, the client on host b.
#   1. three iterations of the plain loop: one Send Only each way per iteration, PSNs one apart,
#      the last one with immediate data (the session's end mark);
#   2. 10000-byte messages at MTU 1024: Send First, 8 Send Middle, Send Last, PSNs one apart;
#   3. interop with rdma-core's ibv_rc_pingpong, both ways across the hosts;
#   4. the server killed mid-run: host b sends one PSN retry_cnt + 1 = 7 times, then nothing, and
#      the client exits 1 with IBV_WC_RETRY_EXC_ERR.
# (tests/link_down.sh takes host b's link down mid-run.)
# shellcheck source=/dev/null
source "$TESTLIB"
require_peer
prog=$1
port=$(new_port)
server=  # serve (testlib) sets it
gid=(-g "${RDMA_GID_INDEX:-1}")  # ibv_rc_pingpong sends no GID without -g; RoCE needs one
a=$LAB_ADDR b=$LAB_PEER_ADDR

# psns_consecutive NAME FROM OPCODE_REGEX: the PSNs of those packets from FROM go up by one (a
# packet with a PSN seen before is a retransmission, go-back-N from an unacknowledged PSN:
# skipped).
psns_consecutive() {
    awk -F'\t' -v from="$2" -v re="$3" '$3 == from && $6 ~ re && !(($17 + 0) in sent) {
            psn = $17 + 0
            sent[psn] = 1
            if (seen && psn != (last + 1) % 16777216) { print "PSN " $8 " after " prev; bad = 1 }
            last = psn; prev = $8; seen = 1
        } END { exit bad }' "$TEST_TMP/$1.wire" || fail "$1: PSNs from $2 skip"
    echo "$1: PSNs of /$3/ from $2 go up by one"
}

# 1. The plain loop, three iterations of 64 bytes.
start_capture plain
serve plain_server "$prog" -s 64 -n 3 --plain --timeout 60
run_cmd plain_client "$PEER" run --timeout 120 -- "$prog" -s 64 -n 3 --plain --timeout 60 -p "$port" "$a"
wait "$server"
stop_capture plain
expect_exit plain_server 0
expect_exit plain_client 0
expect_match plain_client out '^3 iters in [0-9.]+ seconds = [0-9.]+ usec/iter$'
for from in "$a" "$b"; do
    expect_opcodes plain "$from" '(ACK )*SEND_ONLY( ACK)* SEND_ONLY( ACK)* SEND_ONLY_IMM( ACK)*' "three pings or pongs, the last marked"
    psns_consecutive plain "$from" '^SEND_ONLY'
done

# 2. A message of 10000 bytes at MTU 1024: 10 packets, the last one 784 bytes of payload.
start_capture big
serve big_server "$prog" -s 10000 -m 1024 -n 2 --timeout 60
run_cmd big_client "$PEER" run --timeout 120 -- "$prog" -s 10000 -m 1024 -n 2 --timeout 60 -p "$port" "$a"
wait "$server"
stop_capture big
expect_exit big_server 0
expect_exit big_client 0
message='SEND_FIRST( SEND_MIDDLE){8} SEND_LAST'
for from in "$a" "$b"; do
    seq=$(wire_opcodes big "$from" | sed -E 's/ ?ACK//g; s/^ //')
    grep -qxE "$message $message""_IMM" <<<"$seq" ||
        fail "big: the packets from $from were \"$seq\", not two of /$message/, the second one _IMM"
    psns_consecutive big "$from" '^SEND_'
done
echo "big: two messages each way, each $message"
lengths=$(awk -F'\t' -v b="$b" '$3 == b && $6 ~ /^SEND_/ { print $15 }' "$TEST_TMP/big.wire" | sort -u | tr '\n' ' ')
[[ $lengths == "1082 842 846 " ]] ||
    fail "big: frame sizes from host b were $lengths, not 1082 (1024 of payload), 842 (784) and 846 (784 and 4 of immediate data)"

# 3. ibv_rc_pingpong both ways across the hosts.
serve s04_server "$prog" -n 100 --timeout 60
run_cmd rc_client "$PEER" run --timeout 120 -- ibv_rc_pingpong "${gid[@]}" -n 100 -p "$port" "$a"
wait "$server"
serve rc_server ibv_rc_pingpong -d "$RDMA_DEVICE" "${gid[@]}" -n 100
run_cmd s04_client "$PEER" run --timeout 120 -- "$prog" -n 100 --timeout 60 -p "$port" "$a"
wait "$server"
for run in s04_server rc_client rc_server s04_client; do
    expect_exit $run 0
    expect_match $run out '^819200 bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec$'
    expect_match $run out '^100 iters in [0-9.]+ seconds = [0-9.]+ usec/iter$'
done

# 4. The server killed mid-run (the capture starts then, to keep it short).
serve killed_server "$prog" -s 64 -n 1000000 --timeout 60
run_cmd killed_client "$PEER" run --timeout 120 -- "$prog" -s 64 -n 1000000 --timeout 2 -p "$port" "$a" &
client=$!
wait_for_line killed_server out '^  remote address' 30
start_capture killed
kill -KILL "$(program_pid "$(program_pid "$server")")"  # step04 itself, not the timeout around it
wait "$client"
stop_capture killed
expect_exit killed_client 1
expect_line killed_client err "$(basename "$prog"): send failed: IBV_WC_RETRY_EXC_ERR (transport retry counter exceeded)"
# Host b's last 7 packets: one PSN, sent retry_cnt + 1 = 7 times, and only those 7; host a was
# silent from the first of them on.
read -r first_b op psn < <(awk -F'\t' -v b="$b" '$3 == b { print $1, $6, $8 }' "$TEST_TMP/killed.wire" | tail -n 7 | head -n 1)
[[ -n ${psn:-} ]] || fail "killed: no packet from host b"
sent=$(awk -F'\t' -v b="$b" -v f="$first_b" '$3 == b && $1 >= f { print $6, $8 }' "$TEST_TMP/killed.wire" | sort | uniq -c | sed 's/^ *//')
[[ $sent == "7 $op $psn" ]] || fail "killed: host b's last 7 packets were not $op $psn 7 times: $sent"
times=$(awk -F'\t' -v b="$b" -v p="$psn" '$3 == b && $8 == p' "$TEST_TMP/killed.wire" | wc -l)
((times == 7)) || fail "killed: host b sent PSN $psn $times times, not 7"
answers=$(awk -F'\t' -v b="$b" -v f="$first_b" '$3 != b && $1 > f' "$TEST_TMP/killed.wire" | wc -l)
((answers == 0)) || fail "killed: host a sent $answers packets after host b's first try of PSN $psn"
echo "killed: host b sent $op PSN $psn 7 times from frame $first_b on, and host a said nothing"

echo PASS
