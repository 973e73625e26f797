#!/usr/bin/env bash
# The answer to step03's exercise 1, run: a server whose INIT->RTR mask lacks
# IBV_QP_MIN_RNR_TIMER (exercises/rtr_mask.patch) fails that transition with EINVAL and exits 1;
# its client, unpatched, sees the connection close before the server's QP address, and exits 6.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
patched=$1 prog=$2
port=$(new_port)

run_cmd server timeout 60 "$patched" -d "$RDMA_DEVICE" -p "$port" &
wait_for_listen "$port" 30
run_cmd client timeout 60 "$prog" -d "$RDMA_DEVICE" -p "$port" 127.0.0.1
wait
expect_exit server 1
expect_line server err "step03_connect: ibv_modify_qp INIT->RTR: Invalid argument"
expect_exit client 6
expect_line client err "step03_connect: 127.0.0.1:$port closed the connection before sending its QP address"
echo PASS
