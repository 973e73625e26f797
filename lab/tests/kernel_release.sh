#!/usr/bin/env bash
# lab/softroce run --kernel trixie boots Debian 13's kernel (Linux 6.12), whose modules are
# compressed, and rxe0's port is ACTIVE there.
#   tests/kernel_release.sh SOFTROCE
# shellcheck source=/dev/null
source "$TESTLIB"
softroce=$1
export SOFTROCE_FORCE_VM=1 SOFTROCE_QUIET=1 TMPDIR=$TEST_TMP

run_cmd trixie "$softroce" run --kernel trixie --timeout 240 -- sh -c 'uname -r; ibv_devinfo -d rxe0'
expect_exit trixie 0
expect_match trixie out '^6\.12\.'
expect_match trixie out 'state:[[:space:]]+PORT_ACTIVE \(4\)'
echo PASS
