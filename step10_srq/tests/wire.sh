#!/usr/bin/env bash
# step10_srq across the two-host lab's wire: one server on host a, one client process on host b
# with 10 connections, one message in flight each, every message checked.
# 1. An SRQ of 10 receives (the messages in flight), refilled after each completion pass: host a
#    answers some SENDs with an RNR NAK. The capture shows them, each to a client's QP with the
#    server's RNR timer (syndrome 0x20 | 12, 0.64 ms), and host b sends each such PSN again (rxe
#    waits for its next timer tick, which can come sooner than 0.64 ms), and nothing fails,
#    since rnr_retry is 7. Ten server QPs show on the wire.
# 2. The same with --srq-limit 6: the limit events come, and so do RNR NAKs: the event cannot
#    interrupt a completion pass.
# 3. An SRQ of 20 receives, twice the messages in flight, refilled after each pass: no RNR NAK.
#    The server replies before it refills, so a client holds at most two receives at once: the
#    one its message took, polled and not yet posted again, and the one its next message takes.
# Over the three runs, host a's count of RNR NAKs sent equals host b's count of those received
# (rdma statistic: rxe's send_rnr_err and rcvd_rnr_err). The wire tests run one at a time, so
# the counters move only with this test's packets.
# shellcheck source=/dev/null
source "$TESTLIB"
require_peer
bin=$1
port=$(new_port)
dev=$RDMA_DEVICE
n=30
conns=10

# counter a|b NAME: a counter of the port (rdma statistic), on host a (here) or host b.
counter() {
    local out v
    if [[ $1 == a ]]; then
        out=$(rdma statistic show link "$dev/1")
    else
        out=$("$PEER" run --timeout 30 -- rdma statistic show link "$dev/1")
    fi
    v=$(awk -v k="$2" '{ for (i = 1; i < NF; i++) if ($i == k) { print $(i + 1); exit } }' <<<"$out")
    [[ $v =~ ^[0-9]+$ ]] || fail "host $1: no counter $2 in: $out"
    echo "$v"
}

# run NAME SERVER_ARGS...: a server on host a and the client on host b; sets sent (RNR NAKs host
# a sent meanwhile). Host b's count, read through the peer agent (seconds in the emulated VMs),
# is compared once, over the three runs together.
sent_at=$(counter a send_rnr_err)
sent_first=$sent_at
taken_first=$(counter b rcvd_rnr_err)
run() {
    local name=$1 sent0=$sent_at
    shift
    port=$((port + 1))
    run_cmd "$name" timeout 120 "$bin" -p "$port" -s 64 -n $n --check --exit-after $conns "$@" &
    local server=$!
    wait_for_listen "$port" 30 "$server"
    run_cmd "$name-client" "$PEER" run --timeout 100 -- \
        "$bin" -p "$port" -s 64 -n $n --check --connections $conns "$LAB_ADDR"
    wait "$server"
    expect_exit "$name" 0
    expect_exit "$name-client" 0
    expect_line "$name-client" out "client: verified $((n * conns)) of $((n * conns)) replies"
    expect_line "$name" out "server: clients: $conns connected, $conns complete, 0 failed, 0 rejected, 0 aborted"
    sent_at=$(counter a send_rnr_err)
    sent=$((sent_at - sent0))
    echo "$name: host a sent $sent RNR NAKs"
}

# 1. Depth 10, refilled after each pass, captured.
start_capture rnr
run batch10 -r $conns
stop_capture rnr
expect_match batch10 out "^server: shared resources: 1 CQ of [0-9]+ entries, 1 SRQ of $conns receives in 1 MR of $((64 * conns)) bytes; [0-9]+ refills, 0 limit events, 0 stale completions$"
((sent > 0)) || fail "batch10: no RNR NAK with an SRQ of $conns receives for $conns messages in flight"
servers=$(awk -F'\t' -v b="$LAB_PEER_ADDR" '$3 == b && $6 ~ /^SEND_ONLY/ { print $7 }' "$TEST_TMP/rnr.wire" | sort -u | wc -l)
((servers == conns)) || fail "host b sent to $servers QPs of host a, not $conns"
# The RNR NAKs in the capture: AETH syndrome 0x20 | timer, and the timer is the server's 12.
naks=$(awk -F'\t' -v a="$LAB_ADDR" '$3 == a && $13 >= 32 && $13 < 64' "$TEST_TMP/rnr.wire")
seen=$(awk 'END { print NR }' <<<"$naks")
[[ -n $naks ]] || seen=0
dropped=$(capture_dropped rnr)
echo "the capture shows $seen RNR NAKs ($dropped packets dropped by tcpdump)"
((seen > 0)) || fail "the capture shows no RNR NAK, and the counters say $sent"
((seen <= sent && seen >= sent - dropped)) || fail "the capture shows $seen RNR NAKs; host a sent $sent, and tcpdump dropped $dropped"
timers=$(awk -F'\t' '{ print $13 - 32 }' <<<"$naks" | sort -u | tr '\n' ' ')
[[ $timers == "12 " ]] || fail "the RNR NAKs carry the timers $timers, not the server's min_rnr_timer 12"
# Each SEND that drew an RNR NAK comes again from host b: its PSN, to the same QP. (A PSN can
# draw more than one NAK: its resend can meet an empty SRQ too.)
gaps=$(awk -F'\t' -v a="$LAB_ADDR" -v b="$LAB_PEER_ADDR" '
    $3 == b && $6 ~ /^SEND_ONLY/ && ($8 in nak) && qp[$8] == $7 {
        gap = $2 - nak[$8]; if (min == "" || gap < min) min = gap
        if (!($8 in resent)) { resent[$8]; r++ }
        delete nak[$8] }
    $3 == b && $6 ~ /^SEND_ONLY/ { dest[$8] = $7 }
    $3 == a && $13 >= 32 && $13 < 64 { if (!($8 in nak)) nak[$8] = $2
                                       if (!($8 in psns)) { psns[$8]; n++ }; qp[$8] = dest[$8] }
    END { printf "%d %d %.3f\n", n, r, min }' "$TEST_TMP/rnr.wire")
read -r nak_psns resent min_gap <<<"$gaps"
echo "$nak_psns PSNs drew an RNR NAK, $resent of them came again; the shortest wait ${min_gap} ms"
((resent > 0)) || fail "no SEND that drew an RNR NAK was seen again on the wire"
((dropped > 0 || resent == nak_psns)) || fail "of $nak_psns PSNs that drew an RNR NAK, $resent came again"

# 2. Depth 10, refilled on the limit event.
run limit10 -r $conns --srq-limit 6
events=$(field limit10 out '^server: shared resources: .*; [0-9]+ refills, ([0-9]+) limit events, .*')
((events > 0)) || fail "limit10: no limit event"
((sent > 0)) || fail "limit10: no RNR NAK with an SRQ of $conns receives for $conns messages in flight"

# 3. Depth 20, refilled after each pass: no receive is missing.
run batch20 -r $((2 * conns))
((sent == 0)) || fail "batch20: $sent RNR NAKs with an SRQ twice the messages in flight"
sent=$((sent_at - sent_first))
taken=$(($(counter b rcvd_rnr_err) - taken_first))
echo "the three runs: host a sent $sent RNR NAKs, host b received $taken"
((sent == taken)) || fail "host a sent $sent RNR NAKs, host b counted $taken"
echo PASS
