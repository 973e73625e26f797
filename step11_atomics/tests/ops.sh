#!/usr/bin/env bash
# Each --op against one server: the lost update (lockstep READ and WRITE loses exactly
# (connections - 1) x M), fetch-add (exact, every original value distinct), the seqlock (no
# mixed record accepted), the window (a WRITE after the invalidation refused, and rxe's range
# check); an unaligned --offset refused before any post; a lock left held (written by a
# read-write run at offset 8) timing a writer out; SIGTERM on a client, then on the server,
# which prints the target's words.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
bin=$1
dev=(-d "$RDMA_DEVICE")
port=$(new_port)
run_cmd server "$bin" "${dev[@]}" -p "$port" &
server=$!
wait_for_listen "$port" 30 "$server"
client=("$bin" "${dev[@]}" -p "$port" 127.0.0.1)

run_cmd read_write "${client[@]}" --op read-write --connections 4 -n 500
expect_exit read_write 0
expect_line read_write out "client: read-write: counter 0 -> 500: 500 of 4 x 500 = 2000 updates landed, 1500 lost"

run_cmd fetch_add "${client[@]}" --op fetch-add --connections 4 -n 500 --window 4
expect_exit fetch_add 0
expect_line fetch_add out "client: fetch-add: counter 500 -> 2500: 2000 of 4 x 500 = 2000 updates landed, 0 lost"
expect_line fetch_add out "client: fetch-add: the 2000 original values are all distinct"

run_cmd cas "${client[@]}" --op cas --connections 4 -n 300
expect_exit cas 0
expect_match cas out '^client: cas: 1 writer\(s\) x 300 records, 3 reader\(s\): [1-9][0-9]* reads accepted, [0-9]+ torn and retried, 0 mixed records accepted; 0 lock attempts found it held$'

run_cmd cas_two "${client[@]}" --op cas --connections 4 --readers 2 -n 100
expect_exit cas_two 0
expect_match cas_two out '^client: cas: 2 writer\(s\) x 100 records, 2 reader\(s\): [1-9][0-9]* reads accepted, [0-9]+ torn and retried, 0 mixed records accepted; [0-9]+ lock attempts found it held$'

run_cmd window "${client[@]}" --op window
expect_exit window 0
expect_match window out '^client: window: 2048 bytes at 0x[0-9a-f]+, rkey 0x[0-9a-f]{8}$'
expect_line window out "client: window: WRITE through it: IBV_WC_SUCCESS"
expect_line window out "client: window: WRITE after the server invalidated it: IBV_WC_REM_ACCESS_ERR; both QPs are in ERR now: connecting again"
# rxe checks a window's rkey against the whole MR, not the window (rxe_resp.c check_rkey()):
# the spec asks for IBV_WC_REM_ACCESS_ERR here. A kernel that fixes it fails this line.
expect_line window out "client: window: WRITE just past its end, inside the server's MR: IBV_WC_SUCCESS (the device checked the MR's range, not the window's)"

run_cmd unaligned "${client[@]}" --op fetch-add --offset 4
expect_exit unaligned 2
expect_line unaligned err "step11_atomics: --offset: remote address 0x4 is not 8-byte aligned: an atomic needs an aligned 8-byte word"

# A holder that died with the lock: a read-write run at the lock's offset leaves it at 1.
run_cmd lock_left "${client[@]}" --op read-write --offset 8 -n 1
expect_exit lock_left 0
run_cmd lock_held "${client[@]}" --op cas -n 1 --timeout 2
expect_exit lock_held 7
expect_line lock_held err "step11_atomics: the lock has been held by 0x1 for 2 s (--timeout): its holder may have died holding it"
expect_line lock_held err "hint: a real system gives the lock a lease that expires"

run_cmd stopped "${client[@]}" --op read-write -n 100000000 &
stopped=$!
wait_for_line stopped out "remote address" 30
sleep 0.5
kill -TERM "$(program_pid "$stopped")"
wait "$stopped"
expect_exit stopped 130
expect_line stopped err "step11_atomics: interrupted by SIGTERM"

wait_for_line server out "^server: client 21 " 30
kill -TERM "$(program_pid "$server")"
wait "$server"
expect_exit server 0
expect_line server out "server: clients: 21 connected, 21 complete, 0 failed, 0 rejected, 0 aborted"
expect_match server out '^server: target: counter [0-9]+, lock 1, version 1000$'
expect_line server out "server: windows: 2 bound, 1 invalidated; 0 stale completions"
echo PASS
