#!/usr/bin/env bash
# step01_devices: --help, an unknown option and bad values (no device needed).
# shellcheck source=/dev/null
source "$TESTLIB"
prog=$1

run_cmd help "$prog" --help
expect_exit help 0
expect_line help out "usage: step01_devices [options]"
expect_line help out "  -d, --ib-dev=NAME   only this device (default: every device)"
[[ ! -s $TEST_TMP/help.err ]] || fail "help: stderr should be empty"

run_cmd unknown "$prog" --frobnicate
expect_exit unknown 2
expect_line unknown err "step01_devices: unknown option '--frobnicate'"
expect_line unknown err "usage: step01_devices [options]"
run_cmd novalue "$prog" --help=1
expect_exit novalue 2
expect_line novalue err "step01_devices: option '--help' takes no value"
[[ ! -s $TEST_TMP/unknown.out ]] || fail "unknown: stdout should be empty"

run_cmd port0 "$prog" -i 0
expect_exit port0 2
expect_line port0 err "step01_devices: --ib-port must be a whole number from 1 to 255 (got '0')"

run_cmd portx "$prog" --ib-port=one
expect_exit portx 2
expect_line portx err "step01_devices: --ib-port must be a whole number from 1 to 255 (got 'one')"

run_cmd novalue "$prog" -d
expect_exit novalue 2
expect_line novalue err "step01_devices: option '-d' needs a value"
# A host with no RDMA at all (the usual build machine) gets exit 3 and the three ways to a device.
if ! compgen -G '/sys/class/infiniband/*' >/dev/null; then
    run_cmd nodevice "$prog"
    expect_exit nodevice 3
    expect_line nodevice err "step01_devices: no RDMA device found"
    expect_line nodevice err "hint: get one of: a real RDMA NIC; Soft-RoCE on this host (sudo modprobe rdma_rxe && sudo rdma link add rxe0 type rxe netdev eth0); or the lab (lab/softroce run -- ./step01_devices)"
fi
echo PASS
