#!/usr/bin/env bash
# step02_resources on a real device: creates every object, reports a real qp_num and the
# granted caps, tears down in reverse order; bad input and a low memlock limit exit cleanly.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
prog=$1

run_cmd ok "$prog" -d "$RDMA_DEVICE"
expect_exit ok 0
expect_match ok out "^device:  $RDMA_DEVICE port 1, PORT_ACTIVE, "
expect_match ok out "^recommended GID index for $RDMA_DEVICE port 1: [0-9]+ "
expect_line ok out "PD:      created"
expect_line ok out "buffer:  4096 bytes, page-aligned (page size $(getconf PAGESIZE))"
expect_match ok out '^MR:      lkey 0x[0-9a-f]{8}, rkey 0x[0-9a-f]{8}, 4096 bytes, access LOCAL_WRITE$'
cqe=$(field ok out '^CQ:      ([0-9]+) entries \(asked for 516\)$')
((cqe >= 516)) || fail "CQ has $cqe entries, fewer than the 516 asked for"
qp_num=$(field ok out '^QP:      qp_num ([0-9]+) \(0x[0-9a-f]{6}\), type RC, state INIT$')
((qp_num > 0)) || fail "qp_num is $qp_num"
for cap in max_send_wr:16 max_recv_wr:500 max_send_sge:1 max_recv_sge:1 max_inline_data:64; do
    name=${cap%:*} asked=${cap#*:}
    granted=$(field ok out "^    $name +requested $asked, granted ([0-9]+)\$")
    ((granted > 0)) || fail "$name: granted $granted"
    ((granted >= asked)) || fail "$name: granted $granted, less than the $asked requested"
done
# The teardown, child before parent, is exactly this:
expected=$'teardown: ibv_destroy_qp\nteardown: ibv_destroy_cq\nteardown: ibv_dereg_mr\nteardown: free\nteardown: ibv_dealloc_pd\nteardown: ibv_close_device\nteardown: ibv_free_device_list'
got=$(sed -n '/^tearing down in reverse order of creation:$/,$p' "$TEST_TMP/ok.out" | grep '^teardown:')
[[ $got == "$expected" ]] || fail "teardown order: expected
$expected
got
$got"
[[ ! -s $TEST_TMP/ok.err ]] || fail "ok: stderr should be empty"

# A bigger MR with other depths.
run_cmd big "$prog" -s 1048577 -r 64 -t 4
expect_exit big 0
expect_match big out '^MR:      lkey 0x[0-9a-f]{8}, rkey 0x[0-9a-f]{8}, 1048577 bytes, access LOCAL_WRITE$'
expect_match big out '^    max_recv_wr +requested 64, granted [0-9]+$'

# Bad input: unknown device and port (5), depths over the device's limits (2).
run_cmd nosuch "$prog" -d nosuch
expect_exit nosuch 5
expect_match nosuch err "^step02_resources: no RDMA device named 'nosuch' \(found: ([^)]*, )?$RDMA_DEVICE(, [^)]*)?\)\$"

ports=$(find /sys/class/infiniband/"$RDMA_DEVICE"/ports -mindepth 1 -maxdepth 1 | wc -l)
run_cmd noport "$prog" -d "$RDMA_DEVICE" -i $((ports + 1))
expect_exit noport 5
((ports != 1)) || expect_line noport err "step02_resources: $RDMA_DEVICE has no port 2 (ports: 1)"

max_qp_wr=$(ibv_devinfo -v -d "$RDMA_DEVICE" | sed -nE 's/^\s*max_qp_wr:\s*([0-9]+)$/\1/p')
max_cqe=$(ibv_devinfo -v -d "$RDMA_DEVICE" | sed -nE 's/^\s*max_cqe:\s*([0-9]+)$/\1/p')
[[ -n $max_qp_wr && -n $max_cqe ]] || fail "ibv_devinfo -v did not show max_qp_wr and max_cqe"
if ((max_qp_wr < 16777216)); then
    run_cmd rxdeep "$prog" -d "$RDMA_DEVICE" -r $((max_qp_wr + 1))
    expect_exit rxdeep 2
    expect_line rxdeep err "step02_resources: --rx-depth $((max_qp_wr + 1)) is over the device limit max_qp_wr = $max_qp_wr"
fi
if ((max_cqe < max_qp_wr)); then
    run_cmd cqdeep "$prog" -d "$RDMA_DEVICE" -r "$max_cqe" -t 1
    expect_exit cqdeep 2
    expect_line cqdeep err "step02_resources: --rx-depth $max_cqe + --tx-depth 1 = $((max_cqe + 1)) CQ entries is over the device limit max_cqe = $max_cqe"
fi

# memlock: root has CAP_IPC_LOCK, which ignores ulimit -l, so run as nobody with 64 KiB.
[[ -r /dev/infiniband/uverbs0 && -w /dev/infiniband/uverbs0 ]] || fail "no /dev/infiniband/uverbs0"
# shellcheck disable=SC2016 # "$0" is expanded by the inner bash: it is the program
if [[ $(id -u) == 0 ]]; then
    run_cmd memlock setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all \
        bash -c 'ulimit -l 64 && exec "$0" -s 1048576' "$prog"
    expect_exit memlock 1
    expect_line memlock err "step02_resources: ibv_reg_mr: Cannot allocate memory (registering 1048576 bytes)"
    expect_line memlock err "hint: the memlock limit (ulimit -l, now 64 KiB) is too low to pin 1048576 bytes: raise it with ulimit -l unlimited or in /etc/security/limits.conf"
    expect_no_match memlock out '^MR:'
    # Everything made before the MR is still torn down.
    expect_line memlock out "teardown: ibv_dealloc_pd"
    expect_line memlock out "teardown: ibv_close_device"

    # The same as root with CAP_IPC_LOCK dropped.
    run_cmd nocap capsh --drop=cap_ipc_lock -- -c 'ulimit -l 64 && exec "$0" -s 1048576' "$prog"
    expect_exit nocap 1
    expect_line nocap err "step02_resources: ibv_reg_mr: Cannot allocate memory (registering 1048576 bytes)"
else
    run_cmd memlock bash -c 'ulimit -l 64 && exec "$0" -s 1048576' "$prog"
    expect_exit memlock 1
    expect_line memlock err "step02_resources: ibv_reg_mr: Cannot allocate memory (registering 1048576 bytes)"
fi
echo PASS
