#!/usr/bin/env bash
# step10_srq across the two-host lab's wire: one server on host a, one client process on host b
# with 10 connections, one message in flight each, every message checked.
# 1. An SRQ of 10 receives (the messages in flight), refilled after each completion pass: host a
#    answers some SENDs with an RNR NAK. The capture (host b's SENDs and host a's RNR NAKs only)
#    shows them, each to a client's QP with the server's RNR timer (syndrome 0x20 | 12,
#    0.64 ms), and host b sends each such PSN again (rxe waits for its next timer tick, which can
#    come sooner than 0.64 ms), and nothing fails, since rnr_retry is 7. Ten server QPs show on
#    the wire.
# 2. The same with --srq-limit 6: the limit events come, and so do RNR NAKs: the event cannot
#    interrupt a completion pass.
# 3. An SRQ of 20 receives, twice the messages in flight, refilled after each pass: no RNR NAK.
#    The server replies before it refills, so a client holds at most two receives at once: the
#    one its message took, polled and not yet posted again, and the one its next message takes.
# In each run, host a's count of RNR NAKs sent equals host b's count of those received (rdma
# statistic: rxe's send_rnr_err and rcvd_rnr_err). The wire tests run one at a time, so the
# counters move only with this test's packets.
#   wire.sh BIN [--limit-run]: --limit-run runs run 2 alone, without the capture: step10_wire_asan,
#   the program across the wire under ASan+UBSan. What the capture shows is the device's doing,
#   checked once, in the plain pass (step10_wire).
# shellcheck source=/dev/null
source "$TESTLIB"
require_peer
bin=$1
limit_only=0
case ${2:-} in
    '') ;;
    --limit-run) limit_only=1 ;;
    *) fail "usage: wire.sh BIN [--limit-run]" ;;
esac
port=$(new_port)
dev=$RDMA_DEVICE
n=30
conns=10

# sent_now: host a's count of RNR NAKs sent (rdma statistic, rxe's send_rnr_err).
sent_now() {
    local out v
    out=$(rdma statistic show link "$dev/1")
    v=$(awk '{ for (i = 1; i < NF; i++) if ($i == "send_rnr_err") { print $(i + 1); exit } }' <<<"$out")
    [[ $v =~ ^[0-9]+$ ]] || fail "host a: no counter send_rnr_err in: $out"
    echo "$v"
}

# run NAME SERVER_ARGS...: a server on host a and the client on host b. Sets sent and taken: the
# RNR NAKs host a sent meanwhile, and those host b received. Host b's count is read in the same
# request as its client, before and after it (each request to host b takes seconds in the
# emulated VMs).
run() {
    local name=$1 sent0 counts
    shift
    port=$((port + 1))
    sent0=$(sent_now)
    run_cmd "$name" timeout 120 "$bin" -p "$port" -s 64 -n $n --check --exit-after $conns "$@" &
    local server=$!
    wait_for_listen "$port" 30 "$server"
    # shellcheck disable=SC2016 # expanded on host b
    run_cmd "$name-client" "$PEER" run --timeout 100 -- bash -c 'c() { rdma statistic show link "$RDMA_DEVICE/1" | grep -oE "rcvd_rnr_err [0-9]+"; }; echo "host b: $(c)"; "$@"; rc=$?; echo "host b: $(c)"; exit $rc' client \
        "$bin" -p "$port" -s 64 -n $n --check --connections $conns "$LAB_ADDR"
    wait "$server"
    expect_exit "$name" 0
    expect_exit "$name-client" 0
    expect_line "$name-client" out "client: verified $((n * conns)) of $((n * conns)) replies"
    expect_line "$name" out "server: clients: $conns connected, $conns complete, 0 failed, 0 rejected, 0 aborted"
    sent=$(($(sent_now) - sent0))
    mapfile -t counts < <(sed -nE 's/^host b: rcvd_rnr_err ([0-9]+)$/\1/p' "$TEST_TMP/$name-client.out")
    ((${#counts[@]} == 2)) || fail "$name-client: host b's rcvd_rnr_err was not read before and after"
    taken=$((counts[1] - counts[0]))
    echo "$name: host a sent $sent RNR NAKs, host b received $taken"
    ((sent == taken)) || fail "$name: host a sent $sent RNR NAKs, host b counted $taken"
}

# run_limit10: the SRQ of 10 receives refilled on its limit event (run 2); its events must come.
run_limit10() {
    run limit10 -r $conns --srq-limit 6
    events=$(field limit10 out '^server: shared resources: .*; [0-9]+ refills, ([0-9]+) limit events, .*')
    ((events > 0)) || fail "limit10: no limit event"
}

if ((limit_only)); then
    run_limit10
    echo PASS
    exit 0
fi

# 1. Depth 10, refilled after each pass, captured.
start_capture rnr "(src host $LAB_PEER_ADDR and udp[8] = 0x04) or (src host $LAB_ADDR and udp[8] = 0x11 and udp[20] & 0xe0 = 0x20)"
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
run_limit10
((sent > 0)) || fail "limit10: no RNR NAK with an SRQ of $conns receives for $conns messages in flight"

# 3. Depth 20, refilled after each pass: no receive is missing.
run batch20 -r $((2 * conns))
((sent == 0)) || fail "batch20: $sent RNR NAKs with an SRQ twice the messages in flight"
echo PASS
