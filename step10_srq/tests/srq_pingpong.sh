#!/usr/bin/env bash
# --srq-pingpong-compat: rdma-core's ibv_srq_pingpong client (its defaults, 16 QPs and 4096-byte
# messages, with -n 320) against step10's server, all its QPs on the one shared CQ
# and SRQ; then bad input, refused with exit 6 and one line: a malformed table entry, a table
# cut short, and a client without -g on RoCE (which must see a reset, not wait for ever).
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
bin=$1
command -v ibv_srq_pingpong >/dev/null || fail "ibv_srq_pingpong is not installed (ibverbs-utils)"
dev=(-d "$RDMA_DEVICE")
gid=(); [[ $RDMA_DEVICE != rxe* ]] || gid=(-g 1)

# srq_pingpong.c's summary: -s x -n x 2 bytes, -n iterations, whichever QPs carried them.
expect_summary() { # NAME SIZE ITERS
    expect_match "$1" out "^$(($2 * $3 * 2)) bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec\$"
    expect_match "$1" out "^$3 iters in [0-9.]+ seconds = [0-9.]+ usec/iter\$"
}

# One run: srq_pingpong's defaults (16 QPs, 4096-byte messages), with -n 320 messages in all.
n=320
port=$(new_port)
run_cmd server "$bin" "${dev[@]}" -p "$port" -n $n --srq-pingpong-compat &
server=$!
wait_for_listen "$port" 10 "$server"
run_cmd client timeout 60 ibv_srq_pingpong "${dev[@]}" "${gid[@]}" -p "$port" -n $n 127.0.0.1
wait "$server"
expect_exit client 0
expect_exit server 0
expect_summary client 4096 $n
expect_summary server 4096 $n
[[ $(grep -c '^  remote address: LID 0x0000, QPN 0x[0-9a-f]\{6\}, PSN 0x[0-9a-f]\{6\}, GID ' "$TEST_TMP/client.out") == 16 ]] ||
    fail "client: expected 16 remote addresses, one per QP"
expect_line server out "server: waiting for one ibv_srq_pingpong client on TCP port $port"
expect_match server out '^server: 16 QPs on one shared CQ of [0-9]+ entries and SRQ of 500 receives$'

# Bad input: the table, 256 entries of 52 bytes, the unused ones as address 0.
unused() { local i; for ((i = 0; i < $1; i++)); do printf '0000:000000:000000:00000000000000000000000000000000\0'; done; }
port=$((port + 1))
run_cmd bad_entry "$bin" "${dev[@]}" -p "$port" --srq-pingpong-compat &
server=$!
wait_for_listen "$port" 10 "$server"
exec 3<>"/dev/tcp/127.0.0.1/$port"
{ printf '0000:000011:000001:fe800000000000000000000000000001\0'
  printf '0000:00zz12:000001:fe800000000000000000000000000001\0'
  unused 254; } >&3
exec 3>&-
wait "$server"
expect_exit bad_entry 6
expect_line bad_entry err "step10_srq: ibv_srq_pingpong's table, entry 1: QPN is not hex ('00zz12'); received \"0000:00zz12:000001:fe800000000000000000000000000001\\0\""

port=$((port + 1))
run_cmd short "$bin" "${dev[@]}" -p "$port" --srq-pingpong-compat &
server=$!
wait_for_listen "$port" 10 "$server"
exec 3<>"/dev/tcp/127.0.0.1/$port"
unused 2 >&3
exec 3>&-
wait "$server"
expect_exit short 6
expect_line short err "step10_srq: the client closed the connection after 104 of 13312 bytes of ibv_srq_pingpong's address table"

# Without -g the client's GIDs are zero: refused, and its read ends with a reset at once.
port=$((port + 1))
run_cmd server_nogid "$bin" "${dev[@]}" -p "$port" --srq-pingpong-compat &
server=$!
wait_for_listen "$port" 10 "$server"
run_cmd nogid timeout 20 ibv_srq_pingpong "${dev[@]}" -p "$port" -q 2 127.0.0.1
wait "$server"
if [[ $RDMA_DEVICE == rxe* ]]; then
    expect_exit server_nogid 6
    expect_line server_nogid err "step10_srq: the peer sent GID :: (all zeros), but RoCE routes by GID"
    expect_exit nogid 1
    expect_line nogid err "client read: Connection reset by peer"
fi
echo PASS
