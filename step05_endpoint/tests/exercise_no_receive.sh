#!/usr/bin/env bash
# The answer to step05's exercise 2, run: a --op write server that posts no receive
# (exercises/no_receive.patch). The client's WRITEs land, but its final write-with-immediate needs
# a receive at the server: the server's QP answers RNR NAKs, which rnr_retry 7 retries for ever,
# so neither side gets its last completion, and both give up with exit 7, the client first.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
patched=$1
port=$(new_port)
common=(-d "$RDMA_DEVICE" -p "$port" --op write -n 100)

# The server waits longer than the client: had it given up first, its QP would be gone, and the
# client's resends would end in IBV_WC_RETRY_EXC_ERR (exit 1) instead.
run_cmd server timeout 60 "$patched" "${common[@]}" --timeout 6 &
wait_for_listen "$port" 30
run_cmd client timeout 60 "$patched" "${common[@]}" --timeout 3 127.0.0.1
wait
# On a device that resends RNR NAKs for ever, the client gives up at its --timeout (exit 7). rxe
# ends some runs in IBV_WC_RETRY_EXC_ERR instead (exit 1), as the chapter's answer says. Either
# way, it is the write-with-immediate (wr_id UINT64_MAX - 2) that never completes.
if [[ $RDMA_DEVICE == rxe* && $(<"$TEST_TMP/client.rc") == 1 ]]; then
    expect_line client err "step05_endpoint: work completion failed: IBV_WC_RETRY_EXC_ERR (transport retry counter exceeded) for wr_id 18446744073709551613, vendor_err 0x0"
else
    expect_exit client 7
    expect_line client err "step05_endpoint: no completion for wr_id 18446744073709551613 within 3 s"
fi
expect_no_match client out '^client: 100 RDMA WRITEs'
expect_exit server 7
expect_line server err "step05_endpoint: no completion for wr_id 18446744073709551615 within 7 s"
echo PASS
