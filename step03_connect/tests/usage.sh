#!/usr/bin/env bash
# step03_connect: --help exits 0 with the usage; a bad option or value exits 2 with one line.
# shellcheck source=/dev/null
source "$TESTLIB"
prog=$1
run_cmd help "$prog" --help
expect_exit help 0
expect_match help out '^usage: step03_connect \[options\] +start a server'
run_cmd unknown "$prog" --no-such-option
expect_exit unknown 2
expect_line unknown err "step03_connect: unknown option '--no-such-option'"
run_cmd novalue "$prog" --help=1
expect_exit novalue 2
expect_line novalue err "step03_connect: option '--help' takes no value"
expect_match unknown err '^usage: '
run_cmd badport "$prog" -p 70000
expect_exit badport 2
expect_line badport err "step03_connect: --port must be a whole number from 1 to 65535 (got '70000')"
run_cmd badmtu "$prog" -m 1000
expect_exit badmtu 2
expect_line badmtu err "step03_connect: --mtu must be 256, 512, 1024, 2048 or 4096 (got '1000')"
echo PASS
