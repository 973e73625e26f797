#!/usr/bin/env bash
# The main page's one-file program on a real device: both QPs connect, the SEND delivers its
# message, the WRITE's bytes are read back from the target, and stderr stays empty.
# With --no-device, on a machine without a device: it exits 1 with the one line that says so.
# shellcheck source=/dev/null
source "$TESTLIB"
prog=$1

if [[ ${2:-} == --no-device ]]; then
    # A machine without a device, as the host that runs the unit tests: libibverbs lists devices
    # over netlink first, so one that has a device cannot hide it (SYSFS_PATH hides sysfs only).
    for d in /sys/class/infiniband/*; do
        [[ -e $d ]] || continue
        echo "SKIP: this machine has an RDMA device (${d##*/}); the test needs one without"
        exit 77
    done
    mkdir "$TEST_TMP/sys"
    run_cmd nodev env SYSFS_PATH="$TEST_TMP/sys" "$prog"
    expect_exit nodev 1
    [[ ! -s $TEST_TMP/nodev.out ]] || fail "nodev: stdout should be empty"
    expected="rdma_in_one_page: no RDMA device: load your NIC's driver, or add Soft-RoCE (modprobe rdma_rxe; rdma link add rxe0 type rxe netdev eth0)"
    [[ $(<"$TEST_TMP/nodev.err") == "$expected" ]] || fail "nodev: expected exactly this on stderr: $expected"
    echo PASS
    exit 0
fi

require_device

run_cmd page "$prog"
expect_exit page 0
mapfile -t out <"$TEST_TMP/page.out"
((${#out[@]} == 7)) || fail "page: expected 7 lines on stdout, got ${#out[@]}"
[[ ${out[0]} =~ ^device:\ [^\ ]+,\ port\ 1$ ]] || fail "page: line 1: ${out[0]}"
[[ ${out[1]} =~ ^QPs\ 0x[0-9a-f]{6}\ and\ 0x[0-9a-f]{6}\ connected,\ GID\ index\ [0-9]+$ ]] ||
    fail "page: line 2: ${out[1]}"
# The SEND's and the RECV's completions may come in either order.
case "${out[2]}|${out[3]}" in
    "completion: SEND|completion: RECV" | "completion: RECV|completion: SEND") ;;
    *) fail "page: lines 3 and 4 should be the SEND's and the RECV's completions: ${out[2]}|${out[3]}" ;;
esac
[[ ${out[4]} == "B received: Hello from QP A" ]] || fail "page: line 5: ${out[4]}"
[[ ${out[5]} == "completion: RDMA WRITE" ]] || fail "page: line 6: ${out[5]}"
[[ ${out[6]} == "B's memory after the WRITE: Written by A" ]] || fail "page: line 7: ${out[6]}"
[[ ! -s $TEST_TMP/page.err ]] || fail "page: stderr should be empty"
echo PASS
