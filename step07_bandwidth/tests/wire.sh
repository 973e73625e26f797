#!/usr/bin/env bash
# step07_bandwidth across the two-host lab's wire: the target on host a, the client on host b,
# 32 RDMA WRITEs of 1024 bytes at MTU 1024 with -t 16 -Q 8, captured on a's NIC. Host a's NIC
# holds every packet it sends for 20 ms (netem), as a longer wire would: without it, the
# round trip on the lab's wire can be shorter than host b's emulated CPU takes to post a WRITE
# (0.7 ms a post in one slow CI run, where the ACKs came back in 0.1 to 0.4 ms), and then
# no window can show. 20 ms is below the QPs' ACK timeout (67 ms), but a slow host can add more
# (one CI run: 134 ms from a WRITE to its ACK), and then host b sends WRITEs again. Each PSN
# counts once, and a capture with such retransmissions must pass. Checked:
#   1. the window: at some moment at least 4 WRITEs are on the wire, sent and not yet ACKed;
#   2. the end: exactly one WRITE_ONLY_IMM, the last request, its immediate = 32 (big-endian);
#   3. the ACKs: they acknowledge packets, not signaled work requests: more ACKs than the 5
#      signaled WRs (4 of -Q 8, and the final), never more than the requests, the last one
#      acknowledging the final's PSN. (Soft-RoCE sets AckReq on every WRITE and ACKs each.)
# The checks are run once on altered copies of the capture too, and must reject them.
# shellcheck source=/dev/null
source "$TESTLIB"
require_peer
prog=$1
port=$(new_port)
a=$LAB_ADDR b=$LAB_PEER_ADDR
args=(-s 1024 -m 1024 -n 32 -t 16 -Q 8)

# The delay goes again at exit, whatever happens: the wire tests after this one share the wire.
tc qdisc add dev eth0 root netem delay 20ms || fail "cannot add a 20 ms delay to eth0 (tc, netem)"
trap 'tc qdisc del dev eth0 root 2>/dev/null; rm -rf "$TEST_TMP"; kill $(jobs -p) 2>/dev/null || true' EXIT

start_capture window
run_cmd server timeout 120 "$prog" -p "$port" --timeout 60 "${args[@]}" &
server=$!
wait_for_listen "$port" 30 "$server"
run_cmd client "$PEER" run --timeout 120 -- "$prog" -p "$port" --timeout 60 "${args[@]}" "$a"
wait "$server"
stop_capture window
expect_exit server 0
expect_exit client 0
expect_line server out "server: 32 RDMA WRITEs on 1 QP(s) in 1 size(s); every final count matched"
[[ $(capture_dropped window) == 0 ]] || fail "window: tcpdump dropped packets"

# window NAME: the most WRITEs from b sent and not yet acknowledged by an ACK from a (PSNs in
# decimal, column 17; a retransmission counted once, and an ACK of an older PSN acknowledges
# nothing new).
window() {
    awk -F'\t' -v a="$a" -v b="$b" '
        $3 == b && $6 ~ /^WRITE/ && !seen[$17]++ { if (first == "") first = $17; sent = $17 }
        $3 == a && $6 == "ACK" && (acked == "" || $17 + 0 > acked + 0) { acked = $17 }
        $3 == b && $6 ~ /^WRITE/ { n = sent - (acked == "" ? first - 1 : acked); if (n > max) max = n }
        END { print max + 0 }' "$TEST_TMP/$1.wire"
}
check_window() {
    local most
    most=$(window "$1")
    ((most >= 4)) || fail "$1: at most $most WRITEs were unacknowledged at once, expected a window of 4 or more"
    echo "$1: up to $most WRITEs on the wire before their ACK"
}

# check_end NAME: one WRITE_ONLY_IMM, the last request from b, and (from the pcap) immediate 32.
check_end() {
    expect_opcodes "$1" "$b" '(WRITE_ONLY ){32}WRITE_ONLY_IMM' "32 WRITEs, then one write-with-immediate"
    local imm
    # (tshark shows the field twice per packet, "00000020,00000020": the first is enough.)
    imm=$(tshark -r "$TEST_TMP/window.pcap" -Y 'infiniband.bth.opcode == 11' -T fields \
        -e infiniband.immdt 2>/dev/null | cut -d, -f1 | sort -u)
    [[ $imm == 00000020 || $imm == 00:00:00:20 ]] ||
        fail "$1: the write-with-immediate carries '$imm', not the count 32 (0x00000020)"
    echo "$1: the write-with-immediate's immediate is 0x00000020 = 32"
}

# check_acks NAME: more ACKs than signaled WRs, no more than requests, the last one for the final.
check_acks() {
    local acks requests final last
    acks=$(awk -F'\t' -v a="$a" '$3 == a && $6 == "ACK" && !seen[$17]++' "$TEST_TMP/$1.wire" | wc -l)
    requests=$(awk -F'\t' -v b="$b" '$3 == b && $6 ~ /^WRITE/ && !seen[$17]++' "$TEST_TMP/$1.wire" | wc -l)
    ((acks > 5 && acks <= requests)) ||
        fail "$1: $acks ACKs for $requests requests; expected more than the 5 signaled, at most $requests"
    final=$(awk -F'\t' -v b="$b" '$3 == b && $6 == "WRITE_ONLY_IMM" { print $17 }' "$TEST_TMP/$1.wire" | tail -n 1)
    # (the highest PSN acknowledged: an ACK of a WRITE sent again may come last)
    last=$(awk -F'\t' -v a="$a" '$3 == a && $6 == "ACK" && (p == "" || $17 + 0 > p + 0) { p = $17 }
        END { print p }' "$TEST_TMP/$1.wire")
    [[ -n $final && $last == "$final" ]] || fail "$1: the last ACK is for PSN $last, not the final's $final"
    echo "$1: $acks ACKs for $requests requests (5 of them signaled); the last ACK is the final's"
}

check_window window
check_end window
check_acks window

# A copy with retransmissions, as after an ACK timeout: after the first ACK, host b sends again
# every WRITE it had sent that this ACK did not acknowledge. The checks must accept it (and still
# reject its lock-step form, below).
awk -F'\t' -v a="$a" -v b="$b" '{ print }
    $3 == b && $6 ~ /^WRITE/ { line[++n] = $0; psn[n] = $17 }
    $3 == a && $6 == "ACK" && !again++ { for (i = 1; i <= n; i++) if (psn[i] > $17) print line[i] }' \
    "$TEST_TMP/window.wire" >"$TEST_TMP/resent.wire"
(check_window resent && check_end resent && check_acks resent) >/dev/null ||
    fail "the checks rejected a capture with WRITEs sent again"
echo "the checks accept a capture with WRITEs sent again"

# The checks reject altered captures: each must fail (in a subshell, as fail exits).
must_reject() {
    sed -E "$3" "$TEST_TMP/window.wire" >"$TEST_TMP/altered.wire"
    cmp -s "$TEST_TMP/window.wire" "$TEST_TMP/altered.wire" && fail "the alteration '$3' changed nothing"
    if ("$2" altered >/dev/null 2>&1); then fail "the checks accepted a capture with $1"; fi
    echo "the checks reject a capture with $1"
}
# An ACK right after every WRITE (lock-step): each WRITE's line followed by an ACK of its PSN;
# of the capture, and of its copy with retransmissions.
for name in window resent; do
    awk -F'\t' -v OFS='\t' -v a="$a" -v b="$b" '$3 == a && $6 == "ACK" { next }
        { print } $3 == b && $6 ~ /^WRITE/ { $3 = a; $4 = b; $6 = "ACK"; print }' \
        "$TEST_TMP/$name.wire" >"$TEST_TMP/altered.wire"
    if (check_window altered >/dev/null 2>&1); then fail "the checks accepted a lock-step capture ($name)"; fi
    echo "the checks reject a lock-step capture ($name)"
done
must_reject "a plain WRITE at the end" check_end 's/\tWRITE_ONLY_IMM\t/\tWRITE_ONLY\t/'
# Only 5 ACKs, as if the target acknowledged signaled work requests: the last five kept.
total=$(grep -c $'\tACK\t' "$TEST_TMP/window.wire")
awk -F'\t' -v total="$total" '$6 == "ACK" && ++n <= total - 5 { next } { print }' \
    "$TEST_TMP/window.wire" >"$TEST_TMP/altered.wire"
if (check_acks altered >/dev/null 2>&1); then fail "the checks accepted 5 ACKs for 33 requests"; fi
echo "the checks reject a capture with one ACK per signaled WR only"
echo PASS
