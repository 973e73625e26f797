#!/usr/bin/env bash
# The per-kernel labels work: this test, registered twice, as kernel_label_6.1 (label
# kernel_6.1) and kernel_label_6.12 (label kernel_6.12), runs only in its own kernel's pass. In
# the other pass it would fail, naming the label (require_kernel with RDMA_REQUIRE_DEVICE=1).
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
require_kernel "$1"
echo "PASS: Linux $(uname -r) runs the test labelled kernel_$1"
