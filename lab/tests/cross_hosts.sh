#!/usr/bin/env bash
# Inside the two-host lab (lab/softroce run --hosts 2), on host a: rdma-core's ibv_rc_pingpong
# across the wire both ways (server on b and client on a, then the other way round), and
# lab/peer itself: the peer's environment, its output and exit status, a signal to a job.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
[[ ${LAB_HOST:-} == a && -n ${LAB_PEER_ADDR:-} ]] ||
    fail "run this on host a of the two-host lab: lab/softroce run --hosts 2 -- $0"
peer=$(dirname -- "${BASH_SOURCE[0]}")/../peer
port=$((20000 + RANDOM % 20000))
pingpong=(ibv_rc_pingpong -d "$RDMA_DEVICE" -g 1 -s 4096 -n 200)

# peer_wait_for_listen PORT: a server on the peer listens on PORT within 30 s.
peer_wait_for_listen() {
    local i
    for ((i = 0; i < 100; i++)); do
        "$peer" run -- ss -Hltn "sport = :$1" | grep -q . && return 0
        sleep 0.2
    done
    fail "nothing listened on the peer's port $1 within 30 s"
}

expect_pingpong() { # NAME: one side of a 200 x 4096 B ping-pong that completed
    expect_exit "$1" 0
    expect_match "$1" out '^1638400 bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec$'
    expect_match "$1" out '^200 iters in [0-9.]+ seconds = [0-9.]+ usec/iter$'
}

# 1. The server on b, the client on a.
job=$("$peer" start -- "${pingpong[@]}" -p "$port")
peer_wait_for_listen "$port"
run_cmd client_a "${pingpong[@]}" -p "$port" "$LAB_PEER_ADDR"
run_cmd server_b "$peer" wait --timeout 60 "$job"
expect_pingpong client_a
expect_pingpong server_b
# The addresses each side printed are the wire's: GIDs ::ffff:192.0.2.x, not the loopback's.
expect_match client_a out "remote address: .*GID ::ffff:$LAB_PEER_ADDR\$"
expect_match server_b out "remote address: .*GID ::ffff:$LAB_ADDR\$"

# 2. The server on a, the client on b.
port=$((port + 1))
run_cmd server_a "${pingpong[@]}" -p "$port" &
server=$!
wait_for_listen "$port" 10 "$server"
run_cmd client_b "$peer" run --timeout 60 -- "${pingpong[@]}" -p "$port" "$LAB_ADDR"
wait "$server"
expect_pingpong server_a
expect_pingpong client_b

# 3. lab/peer: the peer's own environment, stdout, stderr and exit status.
# shellcheck disable=SC2016 # expanded on the peer
run_cmd env_b "$peer" run -- sh -c 'echo "$LAB_HOST $LAB_ADDR $LAB_PEER_ADDR $RDMA_DEVICE"; echo to-stderr >&2; exit 7'
expect_exit env_b 7
expect_line env_b out "b $LAB_PEER_ADDR $LAB_ADDR rxe0"
expect_line env_b err "to-stderr"

# 4. Signals to jobs on the peer, SIGINT too (a job does not start with it ignored), and to
# every process of a job.
job=$("$peer" start -- sleep 60)
"$peer" signal TERM "$job"
run_cmd slept "$peer" wait --timeout 10 "$job"
expect_exit slept 143
job=$("$peer" start -- sleep 60)
"$peer" signal INT "$job"
run_cmd interrupted "$peer" wait --timeout 10 "$job"
expect_exit interrupted 130
job=$("$peer" start -- sh -c 'sleep 61 & sleep 62; wait')
"$peer" signal KILL "$job"
run_cmd killed "$peer" wait --timeout 10 "$job"
expect_exit killed 137
# (The patterns do not match themselves in pgrep's own sh -c command line.)
run_cmd leftover "$peer" run -- sh -c 'pgrep -f "sleep 6[12]" || true'
expect_no_match leftover out .
# A job that outlives its wait's --timeout: 124, and the job is killed.
job=$("$peer" start -- sleep 63)
run_cmd outlived "$peer" wait --timeout 2 "$job"
expect_exit outlived 124
run_cmd leftover2 "$peer" run -- sh -c 'sleep 1; pgrep -f "sleep 6[3]" || true'
expect_no_match leftover2 out .
echo PASS
