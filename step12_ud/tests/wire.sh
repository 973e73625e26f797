#!/usr/bin/env bash
# step12_ud across the two-host lab: the server on host a, clients on host b, host a's NIC
# captured.
# 1. A clean run (-n 20): host b's pings are UD_SEND_ONLY_IMM packets whose DETH carries the
#    Q_Key 0x11111111 and the client's QP number; host a answers each to that QP number with
#    the same immediate data; no packet has an AETH: nothing is acknowledged.
# 2. Host a's NIC drops everything it sends for a second (netem loss 100%) in the middle of a
#    run: the answers are lost, the client sends pings again and still ends with exit 0; the
#    server saw numbers twice; on the wire, host b sent one ping number more than once.
# (Not the link taken down: on Soft-RoCE a UD send on a host whose link is down fails the QP.)
# shellcheck source=/dev/null
source "$TESTLIB"
require_peer
prog=$1
a=$LAB_ADDR b=$LAB_PEER_ADDR
trap 'tc qdisc del dev eth0 root 2>/dev/null; rm -rf "$TEST_TMP"; kill $(jobs -p) 2>/dev/null || true' EXIT

run_cmd server timeout 120 "$prog" --clients 2 &
server=$!
wait_for_line server out '^server: UD QP [0-9]+ ' 30
qpn=$(field server out '^server: UD QP ([0-9]+) .*')

# 1. A clean run.
start_capture clean
run_cmd clean "$PEER" run --timeout 60 -- "$prog" -s 64 -n 20 "$a" "$qpn"
expect_exit clean 0
stop_capture clean

# 2. A run with a second of loss in its middle: it starts once the second client's first message
# is in (the run takes seconds more: 5000 pings). The capture starts before that client (one
# started while a ping-pong runs at full speed drops packets in the emulated VM: 132 of 2181 once)
# and stops soon after the loss, so that tshark has few packets to decode.
start_capture loss
job=$("$PEER" start -- "$prog" -s 64 -n 5000 --timeout 30 "$a" "$qpn") ||
    fail "lab/peer could not start the client on host b"
for ((i = 0; i < 300; i++)); do
    (($(grep -c ': first message' "$TEST_TMP/server.out") >= 2)) && break
    sleep 0.1
done
tc qdisc add dev eth0 root netem loss 100% || fail "cannot make eth0 drop what it sends (tc, netem)"
sleep 1
tc qdisc del dev eth0 root
stop_capture loss
run_cmd lossy "$PEER" wait --timeout 60 "$job"
wait "$server"

expect_exit lossy 0
resent=$(field lossy out '^([0-9]+) pings sent again after 100 ms without an answer; [0-9]+ late answers dropped$')
((resent >= 1)) || fail "lossy: expected pings sent again, got $resent"
expect_exit server 0
repeats=$(sed -nE 's/^client QPN 0x[0-9a-f]+: last message; [0-9]+ messages answered, ([0-9]+) of them repeats.*/\1/p' "$TEST_TMP/server.out" | sort -n | tail -n 1)
((repeats >= 1)) || fail "server: expected a client with repeated numbers, got ${repeats:-none}"

# The capture: columns of tools/decode-wire --tsv (3 source, 6 opcode name, 7 QP, 13 AETH
# syndrome, 18 DETH Q_Key, 19 DETH source QP, 25 immediate data).
w=$TEST_TMP/both.wire
cat "$TEST_TMP/clean.wire" "$TEST_TMP/loss.wire" >"$w"
[[ $(capture_dropped clean) == 0 && $(capture_dropped loss) == 0 ]] ||
    fail "tcpdump dropped packets: the counts below would not hold"
awk -F'\t' '$13 != "-" {exit 1}' "$w" || fail "a packet carries an AETH: UD acknowledges nothing"
awk -F'\t' -v b="$b" -v a="$a" '($3 == b || $3 == a) && $6 != "UD_SEND_ONLY_IMM" {exit 1}' "$w" ||
    fail "a packet between the hosts is not a UD_SEND_ONLY_IMM"
awk -F'\t' -v b="$b" '$3 == b && $18 != "0x11111111" {exit 1}' "$w" ||
    fail "a ping's DETH does not carry the Q_Key 0x11111111"
clean_qpn=$(awk -F'\t' -v b="$b" '$3 == b {print $19; exit}' "$w")
answers=$(awk -F'\t' -v a="$a" -v q="$clean_qpn" '$3 == a && $7 == q' "$TEST_TMP/clean.wire" | wc -l)
((answers == 20)) || fail "host a sent $answers answers to the first client's QP $clean_qpn, expected 20"
twice=$(awk -F'\t' -v b="$b" '$3 == b {n[$19 " " $25]++} END {for (k in n) if (n[k] > 1) c++; print c + 0}' "$TEST_TMP/loss.wire")
((twice >= 1)) || fail "no ping number was sent twice by host b"
echo "pings sent again: $resent; numbers the server saw twice: $repeats; on the wire: $twice"
echo PASS
