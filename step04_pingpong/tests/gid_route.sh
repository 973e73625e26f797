#!/usr/bin/env bash
# step04_pingpong across the two-host lab's wire: the GID follows the route, and the traffic class
# reaches the IP header.
#   1. Host a gets a second address on the wire's subnet, so its port has two RoCE v2 IPv4 GIDs.
#      Host b's client connects to each of host a's addresses in turn. Each time, host a's server
#      says it chose the GID of the address the client connected to, and the captured RoCE v2
#      packets go from and to that address.
#   2. --tclass: the server sends with traffic class 0x68 (DSCP 26), the client with 0xb8 (DSCP
#      46); every RoCE v2 packet from each host carries its own in the IPv4 header's TOS byte.
#   3. --pkey-index beyond the port's P_Key table is refused, naming the limit.
# shellcheck source=/dev/null
source "$TESTLIB"
require_peer
prog=$1
port=$(new_port)
server=  # serve (testlib) sets it
a=$LAB_ADDR b=$LAB_PEER_ADDR
second=${a%.*}.11  # host a's second address on the wire's /24

# The second address, and its GIDs: rxe adds them when the address appears. Gone again at exit.
ip addr add "$second/24" dev eth0 || fail "cannot add $second to eth0"
trap 'ip addr del "$second/24" dev eth0 2>/dev/null' EXIT
# Not grep -q after it: cat would take SIGPIPE, and pipefail fail the pipeline.
gids() { cat /sys/class/infiniband/"$RDMA_DEVICE"/ports/1/gids/* 2>/dev/null; }
mapped() {
    local octets
    IFS=. read -ra octets <<<"$1"
    printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "${octets[@]}"
}
for ((i = 0; i < 50; i++)); do
    gids | grep -x "$(mapped "$second")" >/dev/null && break
    sleep 0.1
done
gids | grep -x "$(mapped "$second")" >/dev/null || fail "no GID for $second on $RDMA_DEVICE after 5 s"
echo "host a: $a and $second, each with its RoCE v2 GID"

# ip_pairs NAME: the RoCE v2 packets' "source destination" pairs, each once.
ip_pairs() { awk -F'\t' '{ print $3, $4 }' "$TEST_TMP/$1.wire" | sort -u | tr '\n' ';'; }

# 1. One connection to each of host a's addresses.
for target in "$a" "$second"; do
    run=to_${target//./_}
    start_capture "$run"
    serve "${run}_server" "$prog" -s 64 -n 3 --timeout 60
    run_cmd "${run}_client" "$PEER" run --timeout 120 -- "$prog" -s 64 -n 3 --timeout 60 -p "$port" "$target"
    wait "$server"
    stop_capture "$run"
    expect_exit "${run}_server" 0
    expect_exit "${run}_client" 0
    expect_match "${run}_server" out "^GID index [0-9]+ \\(::ffff:${target//./\\.}\\): the TCP connection's local address\$"
    expect_match "${run}_client" out "^GID index [0-9]+ \\(::ffff:${b//./\\.}\\): the TCP connection's local address\$"
    pairs=$(ip_pairs "$run")
    [[ $pairs == "$b $target;$target $b;" || $pairs == "$target $b;$b $target;" ]] ||
        fail "$run: the RoCE v2 packets went between $pairs, not only between $target and $b"
    echo "$run: host a's server chose the GID of $target, and every packet went between $target and $b"
done
first_index=$(sed -nE 's/^GID index ([0-9]+) .*/\1/p' "$TEST_TMP/to_${a//./_}_server.out")
second_index=$(sed -nE 's/^GID index ([0-9]+) .*/\1/p' "$TEST_TMP/to_${second//./_}_server.out")
[[ $first_index != "$second_index" ]] || fail "the server chose GID index $first_index both times"

# 2. The traffic class of each side, in the TOS byte of each side's packets.
start_capture tclass
serve tclass_server "$prog" -s 64 -n 3 --tclass 104 --timeout 60
run_cmd tclass_client "$PEER" run --timeout 120 -- "$prog" -s 64 -n 3 --tclass 184 --timeout 60 -p "$port" "$a"
wait "$server"
stop_capture tclass
expect_exit tclass_server 0
expect_exit tclass_client 0
for pair in "$a 0x68" "$b 0xb8"; do
    read -r from tos <<<"$pair"
    seen=$(tshark -n -r "$TEST_TMP/tclass.pcap" -Y "infiniband.bth && ip.src == $from" -T fields -e ip.dsfield 2>/dev/null | sort -u | tr '\n' ' ')
    [[ $seen == "$tos " ]] || fail "tclass: the packets from $from carried TOS $seen, not only $tos"
    echo "tclass: every RoCE v2 packet from $from carried TOS $tos"
done

# 3. A P_Key index the port does not have (rxe's table has one entry).
run_cmd pkey "$prog" --pkey-index 1 -p "$port"
expect_exit pkey 2
expect_line pkey err "$(basename "$prog"): --pkey-index 1 is beyond port 1's P_Key table, whose pkey_tbl_len is 1"

echo PASS
