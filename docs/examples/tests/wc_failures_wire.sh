#!/usr/bin/env bash
# Every row of the page "Failures on the wire", across the two-host lab on Linux 6.1: for each
# fault, tools/capture-run-it runs wc_failures (the responder on host a, the requester on host
# b), and its packet sequence must match the committed capture that the page's ladder is drawn
# from (docs/captures/wire_failures_*.txt, compared as capture-run-it --check compares). Then,
# from the new captures: each side's statuses, the NAKs and retries on the wire, and the counters
# that moved on each host.
#   wc_failures_wire.sh BUILD_DIR
# shellcheck source=/dev/null
source "$TESTLIB"
require_peer
require_kernel 6.1
build=$1
# (no-recv-forever is left out: on 6.1 its outcome depends on timing; the page says so.)
faults=(none peer-gone wrong-gid no-recv wrong-rkey no-remote-access wrong-lkey short-recv mtu-send
        mtu-write)
names=()
for f in "${faults[@]}"; do names+=("wire_failures_${f//-/_}"); done
mkdir "$TEST_TMP/new"
run_cmd check env CAPTURE_RUN_IT_KEEP="$TEST_TMP/new" "$TUTORIAL_ROOT/tools/capture-run-it" \
    --check --wire "$build" "${names[@]}"
expect_exit check 0
# Each new capture as the output of a run named after its fault, for testlib's expect_*.
for f in "${faults[@]}"; do
    cp "$TEST_TMP/new/wire_failures_${f//-/_}.txt" "$TEST_TMP/$f.out" || fail "$f: no new capture"
    : >"$TEST_TMP/$f.err"
done

# completes FAULT SIDE WORK STATUS: SIDE's WORK (e.g. "SEND 1") completed with STATUS.
completes() {
    expect_match "$1" out "^$2: $3: $4 \\([a-zA-Z ]+\\), vendor_err 0x[0-9a-f]+, [0-9.]+ ms after the first post\$"
}
# moved FAULT HOST COUNTER N: the counter moved by N on HOST (a or b) during the run.
moved() { expect_line "$1" out "host $2: $3 +$4"; }
# packets FAULT FROM [MORE]: how many packets the capture shows from host FROM (a or b) whose
# opcode and "more" columns, together, match the regex MORE.
packets() {
    local from=$LAB_ADDR
    [[ $2 == b ]] && from=$LAB_PEER_ADDR
    awk -v from="$from" -v more="${3:-}" '
        $1 ~ /^[0-9]+$/ && $4 == "->" && $3 == from {
            rest = $7; for (i = 10; i <= NF; i++) rest = rest " " $i
            if (rest ~ more) n++ }
        END { print n + 0 }' "$TEST_TMP/$1.out"
}
expect_packets() { # expect_packets FAULT FROM MORE N
    local n
    n=$(packets "$1" "$2" "$3")
    ((n == $4)) || fail "$1: the capture shows $n packets from host $2 matching /$3/, not $4"
}
# gaps FAULT: the milliseconds between host b's copies of its first packet's PSN, in order.
gaps() {
    awk -v b="$LAB_PEER_ADDR" '$1 ~ /^[0-9]+$/ && $4 == "->" && $3 == b {
        if (psn == "") psn = $9
        if ($9 == psn) { if (t != "") printf "%.1f ", $2 - t; t = $2 } }' "$TEST_TMP/$1.out"
}

# none: the WRITE and the SEND succeed, one ACK each.
completes none requester "RDMA WRITE 1" IBV_WC_SUCCESS
completes none requester "SEND 2" IBV_WC_SUCCESS
completes none responder "RECV 100" IBV_WC_SUCCESS
expect_packets none a '^ACK ACK, MSN' 2

# peer-gone: SEND 1 four times (1 + retry_cnt 3), a timeout (67 ms) apart, then RETRY_EXC_ERR.
expect_match peer-gone out '^exit 137$'
completes peer-gone requester "SEND 1" IBV_WC_RETRY_EXC_ERR
completes peer-gone requester "SEND 2" IBV_WC_WR_FLUSH_ERR
completes peer-gone requester "RECV 100" IBV_WC_WR_FLUSH_ERR
expect_packets peer-gone b '^SEND_ONLY' 4
expect_packets peer-gone a '' 0
peer_gaps=$(gaps peer-gone)
for gap in $peer_gaps; do
    [[ ${gap%.*} -ge 60 && ${gap%.*} -lt 1000 ]] || fail "peer-gone: SEND 1 sent again after $gap ms; the ACK timeout is 67 ms"
done
echo "peer-gone: SEND 1 sent again after ${peer_gaps}ms"
moved peer-gone b retry_exceeded_err 1
moved peer-gone b completer_retry_err 3

# wrong-gid: the requester's move to RTR fails (no neighbour answers for the address); nothing
# reaches the wire, and the responder sees its TCP connection reset.
expect_line wrong-gid out "wc_failures: ibv_modify_qp to RTR: Connection timed out"
expect_match wrong-gid out '^exit 1$'
expect_line wrong-gid out "wc_failures: recv: Connection reset by peer"
expect_packets wrong-gid a '' 0
expect_packets wrong-gid b '' 0
expect_no_match wrong-gid out '^host [ab]: '

# no-recv: four RNR NAKs (1 + rnr_retry 3), then RNR_RETRY_EXC_ERR.
completes no-recv requester "SEND 1" IBV_WC_RNR_RETRY_EXC_ERR
completes no-recv requester "SEND 2" IBV_WC_WR_FLUSH_ERR
expect_packets no-recv b '^SEND_ONLY' 4
expect_packets no-recv a '^ACK RNR NAK' 4
moved no-recv a send_rnr_err 4
moved no-recv b rcvd_rnr_err 4
moved no-recv b retry_rnr_exceeded_err 1

# wrong-rkey and no-remote-access: a NAK "remote access error"; both QPs go to ERR.
for f in wrong-rkey no-remote-access; do
    completes $f requester "RDMA WRITE 1" IBV_WC_REM_ACCESS_ERR
    completes $f requester "SEND 2" IBV_WC_WR_FLUSH_ERR
    completes $f responder "RECV 100" IBV_WC_WR_FLUSH_ERR
    completes $f responder "RECV 101" IBV_WC_WR_FLUSH_ERR
    expect_match $f out '^responder: QP state ERR; 2 of 2 receives completed$'
    expect_packets $f a '^ACK NAK access err' 1
done

# wrong-lkey: the requester fails the SEND locally (6.1: LOC_QP_OP_ERR); nothing on the wire.
completes wrong-lkey requester "SEND 1" IBV_WC_LOC_QP_OP_ERR
completes wrong-lkey requester "SEND 2" IBV_WC_WR_FLUSH_ERR
expect_match wrong-lkey out '^responder: QP state RTS; 0 of 2 receives completed$'
expect_packets wrong-lkey b '' 0

# short-recv: the responder's receive fails (LOC_QP_OP_ERR), and it NAKs "remote operational
# error": the requester's REM_OP_ERR.
completes short-recv responder "RECV 100" IBV_WC_LOC_QP_OP_ERR
completes short-recv requester "SEND 1" IBV_WC_REM_OP_ERR
expect_packets short-recv a '^ACK NAK op err' 1

# mtu-send (6.1): a SEND longer than the responder's path MTU is delivered.
completes mtu-send requester "SEND 1" IBV_WC_SUCCESS
completes mtu-send responder "RECV 100" IBV_WC_SUCCESS
expect_packets mtu-send a '^ACK ACK, MSN' 2

# mtu-write: a WRITE packet longer than the responder's path MTU draws a NAK "invalid request".
completes mtu-write requester "RDMA WRITE 1" IBV_WC_REM_INV_REQ_ERR
completes mtu-write responder "RECV 100" IBV_WC_WR_FLUSH_ERR
expect_packets mtu-write a '^ACK NAK invalid req' 1
echo PASS
