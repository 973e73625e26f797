#!/usr/bin/env bash
# step08_rdma_cm's --tos across the two-host lab's wire: the client on host b sets the ToS 0x68
# (DSCP 26) on its id before the route is resolved; the RC packets of both sides carry it in the
# IPv4 header's TOS byte, the server's too, which took it from the connect request. (Without -T,
# rdma_cm's default, 0: every other capture.)
# shellcheck source=/dev/null
source "$TESTLIB"
require_peer
bin=$1
port=$(new_port)
start_capture tos
run_cmd server timeout 90 "$bin" -p "$port" -s 64 -n 3 --exit-after 1 &
server=$!
wait_for_line server out "^server: listening on rdma_cm port $port;" 30
run_cmd client "$PEER" run --timeout 60 -- "$bin" -p "$port" -s 64 -n 3 -T 104 "$LAB_ADDR"
wait "$server"
stop_capture tos
expect_exit server 0
expect_exit client 0
for from in "$LAB_ADDR" "$LAB_PEER_ADDR"; do
    # The connection's packets, not the CM's MADs (those go to QP 1).
    seen=$(tshark -n -r "$TEST_TMP/tos.pcap" -Y "infiniband.bth && !infiniband.mad && ip.src == $from" -T fields -e ip.dsfield 2>/dev/null | sort -u | tr '\n' ' ')
    [[ $seen == "0x68 " ]] || fail "the RC packets from $from carried TOS $seen, not only 0x68"
    echo "every RC packet from $from carried TOS 0x68"
done
echo PASS
