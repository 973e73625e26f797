#!/usr/bin/env bash
# step02_resources: --help, an unknown option and bad values (no device needed).
# shellcheck source=/dev/null
source "$TESTLIB"
prog=$1

run_cmd help "$prog" --help
expect_exit help 0
expect_line help out "usage: step02_resources [options]"
expect_line help out "  -s, --size=BYTES     buffer and MR size, 1-1073741824 (default 4096)"
[[ ! -s $TEST_TMP/help.err ]] || fail "help: stderr should be empty"

run_cmd unknown "$prog" --frobnicate
expect_exit unknown 2
expect_line unknown err "step02_resources: unknown option '--frobnicate'"
expect_line unknown err "usage: step02_resources [options]"
run_cmd novalue "$prog" --help=1
expect_exit novalue 2
expect_line novalue err "step02_resources: option '--help' takes no value"
[[ ! -s $TEST_TMP/unknown.out ]] || fail "unknown: stdout should be empty"

run_cmd size0 "$prog" -s 0
expect_exit size0 2
expect_line size0 err "step02_resources: --size must be a whole number from 1 to 1073741824 (got '0')"

run_cmd sizehuge "$prog" --size=99999999999999999999
expect_exit sizehuge 2
expect_line sizehuge err "step02_resources: --size must be a whole number from 1 to 1073741824 (got '99999999999999999999')"

run_cmd rx0 "$prog" -r 0
expect_exit rx0 2
expect_line rx0 err "step02_resources: --rx-depth must be a whole number from 1 to 16777216 (got '0')"

run_cmd txbad "$prog" -t ten
expect_exit txbad 2
expect_line txbad err "step02_resources: --tx-depth must be a whole number from 1 to 16777216 (got 'ten')"
echo PASS
