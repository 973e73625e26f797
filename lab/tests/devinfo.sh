#!/usr/bin/env bash
# ibv_devinfo sees the device with an ACTIVE port.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
run_cmd devinfo ibv_devinfo -d "$RDMA_DEVICE"
expect_exit devinfo 0
expect_match devinfo out "hca_id:[[:space:]]+$RDMA_DEVICE\$"
expect_match devinfo out "state:[[:space:]]+PORT_ACTIVE \(4\)"
echo PASS
