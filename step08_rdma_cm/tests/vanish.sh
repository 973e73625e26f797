#!/usr/bin/env bash
# A client that vanishes without a DisconnectRequest, in the two-host lab: the server ends it
# after --timeout seconds without a completion, disconnects it and frees what it held. First a
# client that connects and never sends (a patched copy: tests/silent_client.patch), then a client
# stopped mid-run on host b (SIGSTOP: nothing of the server's is left outstanding) whose link
# then goes down. Each time, the server's line, and its QPs, CQs, MRs and PDs back to none.
# shellcheck source=/dev/null
source "$TESTLIB"
require_peer
command -v rdma >/dev/null || fail "the rdma tool (iproute2) is missing"
silent=$1 bin=$2
port=$(new_port)
long=(-p "$port" -s 64 -n 100000000 --timeout 30)
job=
# shellcheck disable=SC2046 # a list of pids
trap '"$PEER" link up >/dev/null 2>&1; [[ -n $job ]] && "$PEER" signal KILL "$job"; kill $(jobs -p) 2>/dev/null; rm -rf "$TEST_TMP"' EXIT

env --default-signal=INT "$bin" -p "$port" -s 64 -n 100000000 --timeout 3 >"$TEST_TMP/server.out" 2>"$TEST_TMP/server.err" &
server=$!
wait_for_line server out "^server: listening on rdma_cm port $port;" 30
none="qp 0 cq 0 mr 0 pd 0" one="qp 1 cq 1 mr 2 pd 1"  # a client: its buffer's MR and its window's
[[ $(held_by $server) == "$none" ]] || fail "the listening server holds $(held_by $server)"

# 1. Connected, then silent from the start.
job=$("$PEER" start -- "$silent" "${long[@]}" "$LAB_ADDR")
wait_for_peer_line "$job" "^client: connected" 30
began=$(ms_now)
wait_for_held $server "$one" 5
wait_for_line server out "^server: client 1 \\($LAB_PEER_ADDR\\): no completion for 3 s after 0 messages \\(the client's host is gone, or the client stalled\\); disconnected, its resources freed\$" 15
expect_within "$began" 8 "the silent client's end"
(($(ms_now) - began >= 1500)) || fail "the silent client was ended long before the 3 s deadline"
wait_for_held $server "$none" 5
"$PEER" signal KILL "$job"
run_cmd silent_client "$PEER" wait --timeout 30 "$job"
job=

# 2. Stopped mid-run, then its link down: no DisconnectRequest, no reply to ours.
job=$("$PEER" start -- "$bin" "${long[@]}" "$LAB_ADDR")
wait_for_peer_line "$job" "^client: connected" 30
wait_for_held $server "$one" 5
stopped=$(ms_now)  # its last completion came at most moments before
"$PEER" signal STOP "$job"
run_cmd link_down "$PEER" link down
expect_exit link_down 0
began=$(ms_now)
wait_for_line server out "^server: client 2 \\($LAB_PEER_ADDR\\): no completion for 3 s after [0-9]+ messages \\(the client's host is gone, or the client stalled\\); disconnected, its resources freed\$" 15
expect_within "$began" 8 "the vanished client's end"
(($(ms_now) - stopped >= 1500)) || fail "the vanished client was ended long before the 3 s deadline"
wait_for_held $server "$none" 5
run_cmd link_up "$PEER" link up
expect_exit link_up 0
"$PEER" signal KILL "$job"
run_cmd stopped_client "$PEER" wait --timeout 30 "$job"
job=

kill -INT $server
rc=0
wait $server || rc=$?
sed 's/^/  server| /' "$TEST_TMP/server.out" "$TEST_TMP/server.err"
((rc == 0)) || fail "the server exited $rc after SIGINT, not 0"
! grep -q 'destroy failed' "$TEST_TMP/server.err" || fail "server: a destroy failed"
echo PASS
