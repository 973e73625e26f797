#!/usr/bin/env bash
# The answer to step01's exercise 1, run on host a of the two-host lab (rxe0 on eth0, an Ethernet
# interface: the kernel follows address changes only there). Each IPv4 address added takes the
# lowest free GID index; deleting one frees its index and moves no other entry; the recommended
# index stays that of the host's own address.
# shellcheck source=/dev/null
source "$TESTLIB"
require_peer
prog=$1
netdev=$(rdma link show "$RDMA_DEVICE/1" | sed -nE 's/.* netdev ([^ ]+).*/\1/p')
[[ -n $netdev ]] || fail "no netdev under $RDMA_DEVICE port 1"
cleanup() {
    local a
    for a in 3 4 5; do ip addr del "10.1.2.$a/32" dev "$netdev" 2>/dev/null; done
    rm -rf "$TEST_TMP"
}
trap cleanup EXIT

# gid_at NAME INDEX ADDRESS: within 10 s, the GID table shows ADDRESS (or, for "-", nothing) at
# INDEX.
gid_at() {
    local name=$1 index=$2 address=$3 i
    for ((i = 0; i < 20; i++)); do
        run_cmd "$name" "$prog" -d "$RDMA_DEVICE"
        if [[ $address == - ]]; then
            ! grep -qE "^ +\[$index\] " "$TEST_TMP/$name.out" && break
        else
            grep -qE "^ +\[$index\] ::ffff:${address//./\\.} " "$TEST_TMP/$name.out" && break
        fi
        sleep 0.5
    done
    expect_exit "$name" 0
    if [[ $address == - ]]; then
        expect_no_match "$name" out "^ +\[$index\] "
    else
        expect_match "$name" out "^ +\[$index\] ::ffff:${address//./\\.} +RoCE v2"
    fi
}

run_cmd before "$prog" -d "$RDMA_DEVICE"
expect_exit before 0
recommended=$(field before out "^recommended GID index for $RDMA_DEVICE port 1: ([0-9]+) .*$")
ip addr add 10.1.2.3/32 dev "$netdev" || fail "ip addr add 10.1.2.3"
gid_at add3 2 10.1.2.3
ip addr add 10.1.2.4/32 dev "$netdev" || fail "ip addr add 10.1.2.4"
gid_at add4 3 10.1.2.4
ip addr del 10.1.2.3/32 dev "$netdev" || fail "ip addr del 10.1.2.3"
gid_at del3 2 -
expect_match del3 out '^ +\[3\] ::ffff:10\.1\.2\.4 '
ip addr add 10.1.2.5/32 dev "$netdev" || fail "ip addr add 10.1.2.5"
gid_at add5 2 10.1.2.5
expect_match add5 out '^ +\[3\] ::ffff:10\.1\.2\.4 '
expect_match add5 out "^recommended GID index for $RDMA_DEVICE port 1: $recommended \\(::ffff:${LAB_ADDR//./\\.}, "
echo PASS
