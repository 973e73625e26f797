#!/usr/bin/env bash
# step12_ud: one server answers three clients at once from one UD QP (one address handle, a GRH
# line per client); --handshake with rdma-core's ibv_ud_pingpong both ways, the first with -r 1,
# the second at 1 byte with step12's --warmup (ibv_ud_pingpong's -n counts the warm-up too).
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
prog=$1
dev=(-d "$RDMA_DEVICE")
gid=(-g "${RDMA_GID_INDEX:-1}")  # ibv_ud_pingpong sends no GID without -g; RoCE needs one
iters=200

# expect_summary NAME SIZE ITERS: ibv_ud_pingpong's two lines.
expect_summary() {
    expect_exit "$1" 0
    expect_match "$1" out "^$(($2 * $3 * 2)) bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec\$"
    expect_match "$1" out "^$3 iters in [0-9.]+ seconds = [0-9.]+ usec/iter\$"
}
expect_table() {
    expect_match "$1" out "^ $2 +$3 +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2}[[:space:]]+[0-9]+\.[0-9]{2}"
}

# 1. One server, three clients at once. All three come from 127.0.0.1: one address handle.
run_cmd server timeout 120 "$prog" "${dev[@]}" --clients 3 &
server=$!
wait_for_line server out '^server: UD QP [0-9]+ ' 30
qpn=$(field server out '^server: UD QP ([0-9]+) .*')
clients=()
for c in 1 2 3; do
    run_cmd client$c timeout 90 "$prog" "${dev[@]}" -n $iters 127.0.0.1 "$qpn" &
    clients+=($!)
done
wait "${clients[@]}"
wait "$server"
for c in 1 2 3; do
    expect_summary client$c 1024 $iters
    expect_table client$c 1024 $iters
    expect_match client$c out '^GID index [0-9]+ \(::ffff:127\.0\.0\.1\): the local address of the route to the peer$'
    expect_match client$c out '^[0-9]+ pings sent again after 100 ms without an answer; [0-9]+ late answers dropped$'
done
expect_exit server 0
answered=$(field server out '^server: ([0-9]+) messages answered, 3 clients finished, 1 address handles; 0 refused \(no address handle\), 0 receives failed$')
((answered >= 3 * iters)) || fail "server: $answered messages answered, expected at least $((3 * iters))"
firsts=$(grep -cE '^client QPN 0x[0-9a-f]{6}: first message; GRH: bytes 20-39 hold an IPv4 header: 127\.0\.0\.1 -> 127\.0\.0\.1, TTL [0-9]+$' "$TEST_TMP/server.out")
lasts=$(grep -cE "^client QPN 0x[0-9a-f]{6}: last message; [0-9]+ messages answered, [0-9]+ of them repeats \(our answer was lost or late\)$" "$TEST_TMP/server.out")
[[ $firsts == 3 && $lasts == 3 ]] || fail "server: expected 3 first and 3 last lines, got $firsts and $lasts"
expect_match server out '^port 1: [0-9]+ datagrams dropped for a wrong Q_Key while we ran \(qkey_viol_cntr\)$'

# 2. ibv_ud_pingpong server, step12 client; 3. step12 server, ibv_ud_pingpong client.
# The client posts one receive (-r 1): with no other posted, it posts it again before it sends.
port=$(new_port)
run_cmd ud_server timeout 90 ibv_ud_pingpong "${dev[@]}" "${gid[@]}" -p "$port" -n $iters &
wait_for_listen "$port" 30 $!
run_cmd s12_client timeout 90 "$prog" "${dev[@]}" --handshake -r 1 -p "$port" -n $iters 127.0.0.1
wait
expect_summary ud_server 1024 $iters
expect_summary s12_client 1024 $iters
expect_table s12_client 1024 $iters
port=$((port + 1))
# The server waits 60 s for its client, not the default 10: on a busy lo a dropped SYN is sent
# again after 1, 3, 7 and 15 s, and a server that gave up at 10 s made ibv_ud_pingpong's late
# connect fail ("Couldn't connect", once, with the host overloaded).
# step12 leaves its first 20 iterations out of its figures; ibv_ud_pingpong, which has no warm-up,
# runs them all: its -n is step12's -n plus --warmup.
run_cmd s12_server timeout 90 "$prog" "${dev[@]}" --handshake --timeout 60 -p "$port" -s 1 -n $((iters - 20)) --warmup 20 &
wait_for_listen "$port" 30 $!
run_cmd ud_client timeout 90 ibv_ud_pingpong "${dev[@]}" "${gid[@]}" -p "$port" -s 1 -n $iters 127.0.0.1
wait
expect_summary s12_server 1 $((iters - 20))
expect_table s12_server 1 $((iters - 20))
expect_summary ud_client 1 $iters
echo PASS
