#!/usr/bin/env bash
# step08_rdma_cm against itself across the two-host lab's wire: one server on host a, three
# clients on host b at once (busy, events, a --note), every message checked; each client's one
# WRITE shows in the server's line. A client with another -n is rejected, and names the option
# (the chapter's exercise 1). The server and the --note client run with --trace: their QPs' states
# after rdma_accept, ESTABLISHED and rdma_disconnect.
# The capture holds the CM's exchange, which tshark decodes: ConnectRequest, ConnectReply,
# ReadyToUse, then DisconnectRequest and DisconnectReply, for each client.
# shellcheck source=/dev/null
source "$TESTLIB"
require_peer
bin=$1
port=$(new_port)
n=20
start_capture cm
run_cmd server timeout 90 "$bin" -p "$port" -s 64 -n $n --check --exit-after 4 --trace &
server=$!
wait_for_line server out "^server: listening on rdma_cm port $port;" 30
run_cmd busy "$PEER" run --timeout 60 -- "$bin" -p "$port" -s 64 -n $n --check "$LAB_ADDR" &
c1=$!
run_cmd event "$PEER" run --timeout 60 -- "$bin" -p "$port" -s 64 -n $n --check -e "$LAB_ADDR" &
c2=$!
run_cmd note "$PEER" run --timeout 60 -- "$bin" -p "$port" -s 64 -n $n --check --note "third client" --trace "$LAB_ADDR" &
c3=$!
run_cmd iters "$PEER" run --timeout 60 -- "$bin" -p "$port" -s 64 -n 10 "$LAB_ADDR"
wait $c1 $c2 $c3 "$server"
stop_capture cm
for c in busy event; do
    expect_exit $c 0
    expect_match $c out "^$n iters in [0-9.]+ seconds = [0-9.]+ usec/iter$"
    expect_line $c out "client: verified $n of $n replies"
    expect_match $c out "^client: connected to $LAB_ADDR port $port \\(a step08 server\\), QPN 0x[0-9a-f]{6}$"
done
expect_exit note 0
expect_match note err '^trace [0-9]+\.[0-9]{6} rdma_connect; QP INIT$'
expect_match note err '^trace [0-9]+\.[0-9]{6} RDMA_CM_EVENT_ESTABLISHED; QP RTS$'
expect_match note err '^trace [0-9]+\.[0-9]{6} rdma_disconnect; QP ERR$'
(($(grep -cE '^trace [0-9.]+ rdma_accept; QP RTS$' "$TEST_TMP/server.err") == 3)) ||
    fail "server: expected --trace's rdma_accept line, QP RTS, for the three accepted clients"
expect_exit iters 6
expect_line iters err "step08_rdma_cm: the server uses -n $n, this client -n 10: both sides must use the same -n"
expect_exit server 0
(($(grep -c "^server: client [0-9] ($LAB_PEER_ADDR): complete; its WRITE says it received $n replies\$" "$TEST_TMP/server.out") == 2)) ||
    fail "server: expected two clients complete with their WRITE's report"
expect_match server out "^server: client [0-9] \\($LAB_PEER_ADDR, third client\\): complete; its WRITE says it received $n replies\$"
expect_match server out "^server: client [0-9] \\($LAB_PEER_ADDR\\): rejected: the client uses -n 10, this server -n $n: both sides must use the same -n"

# The CM's messages are MADs (management datagrams) sent to QP 1 over the same UDP port 4791.
tshark -n -r "$TEST_TMP/cm.pcap" -Y infiniband.mad -T fields -e ip.src -e infiniband.bth.destqp \
    -e _ws.col.Info >"$TEST_TMP/cm.tsv" 2>/dev/null || fail "tshark cannot read the capture"
sed 's/^/  cm| /' "$TEST_TMP/cm.tsv"
# expect_cm FROM MESSAGE AT_LEAST: FROM sent MESSAGE to QP 1 at least AT_LEAST times.
expect_cm() {
    local got
    got=$(awk -F'\t' -v from="$1" -v m="CM: $2" '$1 == from && $2 ~ /^0x0*1$/ && $3 == m' "$TEST_TMP/cm.tsv" | wc -l)
    ((got >= $3)) || fail "the capture has $got $2 from $1, expected at least $3"
}
expect_cm "$LAB_PEER_ADDR" ConnectRequest 4
expect_cm "$LAB_ADDR" ConnectReply 3
expect_cm "$LAB_ADDR" ConnectReject 1
expect_cm "$LAB_PEER_ADDR" ReadyToUse 3
expect_cm "$LAB_PEER_ADDR" DisconnectRequest 3
expect_cm "$LAB_ADDR" DisconnectReply 3
echo PASS
