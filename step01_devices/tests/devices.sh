#!/usr/bin/env bash
# step01_devices on a real device: lists it with an ACTIVE port and recommends a GID index;
# an unknown device or port exits 5 and says what exists.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
prog=$1

run_cmd list "$prog"
expect_exit list 0
expect_line list out "device $RDMA_DEVICE"
expect_match list out '^    state: +PORT_ACTIVE \(4\)$'
expect_match list out '^    max_qp_wr: +[1-9][0-9]*$'
expect_match list out '^    max_cqe: +[1-9][0-9]*$'
expect_match list out '^    active MTU: +(256|512|1024|2048|4096) '
expect_match list out '^recommended GID index for '"$RDMA_DEVICE"' port 1: [0-9]+ '
# The lab: rxe0 on lo, whose GID 1 is ::ffff:127.0.0.1 (sysfs spells it in 16-bit groups).
if [[ $RDMA_DEVICE == rxe0 &&
      $(cat /sys/class/infiniband/rxe0/ports/1/gids/1 2>/dev/null) == 0000:0000:0000:0000:0000:ffff:7f00:0001 ]]; then
    expect_line list out "    link layer:         Ethernet"
    expect_match list out '^      \[1\] ::ffff:127\.0\.0\.1 +RoCE v2, IPv4 127\.0\.0\.1$'
    expect_line list out "recommended GID index for rxe0 port 1: 1 (::ffff:127.0.0.1, RoCE v2 with an IPv4-mapped address)"
fi
expect_no_match list err 'warning'

run_cmd one "$prog" -d "$RDMA_DEVICE" -i 1 -v
expect_exit one 0
expect_line one out "device $RDMA_DEVICE"
expect_match one out '^    device_cap_flags: +0x[0-9a-f]{8}$'

run_cmd nosuch "$prog" -d nosuch
expect_exit nosuch 5
expect_match nosuch err "^step01_devices: no RDMA device named 'nosuch' \(found: ([^)]*, )?$RDMA_DEVICE(, [^)]*)?\)\$"
if [[ $RDMA_DEVICE == rxe0 && $(ls /sys/class/infiniband) == rxe0 ]]; then
    expect_line nosuch err "step01_devices: no RDMA device named 'nosuch' (found: rxe0)"
fi
[[ ! -s $TEST_TMP/nosuch.out ]] || fail "nosuch: stdout should be empty"

ports=$(find /sys/class/infiniband/"$RDMA_DEVICE"/ports -mindepth 1 -maxdepth 1 | wc -l)
run_cmd noport "$prog" -d "$RDMA_DEVICE" -i $((ports + 1))
expect_exit noport 5
if ((ports == 1)); then
    expect_line noport err "step01_devices: $RDMA_DEVICE has no port 2 (ports: 1)"
fi
echo PASS
