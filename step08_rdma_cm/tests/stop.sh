#!/usr/bin/env bash
# Ends that are not the ping-pong's, in the two-host lab, with four clients on host b at once. A
# client killed mid-run, and a client stopped with Ctrl-C (SIGINT: exit 130), are each a line in
# the server's log: the kernel disconnects a dead process's ids. `rdma res show` counts the
# server's QPs, CQs, MRs and PDs before, with four clients and with the two left. Then SIGINT
# to the server while they run: it exits 0, each client exits 6 naming the disconnect, and
# nothing of the server is left.
# shellcheck source=/dev/null
source "$TESTLIB"
require_peer
command -v rdma >/dev/null || fail "the rdma tool (iproute2) is missing"
bin=$1
port=$(new_port)
long=(-p "$port" -s 64 -n 100000000 --timeout 30)

env --default-signal=INT "$bin" "${long[@]}" >"$TEST_TMP/server.out" 2>"$TEST_TMP/server.err" &
server=$!
wait_for_line server out "^server: listening on rdma_cm port $port;" 30
before=$(held_by $server)
[[ $before == "qp 0 cq 0 mr 0 pd 0" ]] || fail "the listening server holds $before before its first client"

# Four clients at once: the first is killed, the second stopped by Ctrl-C, two stay.
jobs=()
for i in 1 2 3 4; do jobs+=("$("$PEER" start -- "$bin" "${long[@]}" "$LAB_ADDR")"); done
for j in "${jobs[@]}"; do wait_for_peer_line "$j" "^client: connected" 30; done
during=$(held_by $server)
# One QP and CQ per client, and two MRs: its buffer and its report window; the PD is
# librdmacm's, one per device for every id on it.
[[ $during == "qp 4 cq 4 mr 8 pd 1" ]] || fail "with 4 clients the server holds $during"
"$PEER" signal KILL "${jobs[0]}"
"$PEER" signal INT "${jobs[1]}"
run_cmd killed "$PEER" wait --timeout 30 "${jobs[0]}"
run_cmd ctrl_c "$PEER" wait --timeout 30 "${jobs[1]}"
expect_exit ctrl_c 130
expect_line ctrl_c err "step08_rdma_cm: interrupted by SIGINT"
ended="^server: client [0-9] \\($LAB_PEER_ADDR\\): the client disconnected during the run\$"
for ((i = 0; i < 300; i++)); do
    (($(grep -cE "$ended" "$TEST_TMP/server.out") == 2)) && break
    sleep 0.1
done
(($(grep -cE "$ended" "$TEST_TMP/server.out") == 2)) || fail "server: not two lines matching $ended within 30 s"
after=$(held_by $server)
echo "server (pid $server): before $before; with 4 clients $during; with 2 $after"
[[ $after == "qp 2 cq 2 mr 4 pd 1" ]] || fail "the server holds $after with 2 clients left"

kill -INT $server
rc=0
wait $server || rc=$?
sed 's/^/  server| /' "$TEST_TMP/server.out" "$TEST_TMP/server.err"
((rc == 0)) || fail "the server exited $rc after SIGINT, not 0"
grep -qxF "server: SIGINT received: disconnect 2 client(s)" "$TEST_TMP/server.out" ||
    fail "server: no line 'server: SIGINT received: disconnect 2 client(s)'"
! grep -q 'destroy failed' "$TEST_TMP/server.err" || fail "server: a destroy failed"
for j in "${jobs[@]:2}"; do
    run_cmd "client$j" "$PEER" wait --timeout 30 "$j"
    expect_exit "client$j" 6
    expect_line "client$j" err "step08_rdma_cm: the server disconnected during the run"
done
left=$(held_by $server)
[[ $left == "qp 0 cq 0 mr 0 pd 0" ]] || fail "after the server exited, rdma res show holds $left of it"
echo PASS
