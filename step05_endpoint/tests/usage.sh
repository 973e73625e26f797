#!/usr/bin/env bash
# step05_endpoint --help exits 0 with the usage; a bad option or value exits 2 with one line.
# shellcheck source=/dev/null
source "$TESTLIB"
program=$1
run_cmd help "$program" --help
expect_exit help 0
expect_line help out "usage: step05_endpoint [options]          start a server and wait for a client"
expect_match help out '^      --check '
run_cmd bad "$program" --frobnicate
expect_exit bad 2
expect_line bad err "step05_endpoint: unknown option '--frobnicate'"
expect_line bad err "usage: step05_endpoint [options]          start a server and wait for a client"
run_cmd badshort "$program" -x
expect_exit badshort 2
expect_line badshort err "step05_endpoint: unknown option '-x'"
run_cmd novalue0 "$program" --check=1
expect_exit novalue0 2
expect_line novalue0 err "step05_endpoint: option '--check' takes no value"
run_cmd novalue1 "$program" --rc-pingpong-compat=1
expect_exit novalue1 2
expect_line novalue1 err "step05_endpoint: option '--rc-pingpong-compat' takes no value"
run_cmd badsize "$program" -s 4k
expect_exit badsize 2
expect_line badsize err "step05_endpoint: --size must be a whole number from 1 to 1073741824 (got '4k')"
run_cmd compat "$program" --rc-pingpong-compat --op read
expect_exit compat 2
expect_match compat err "^step05_endpoint: --rc-pingpong-compat carries no buffer address or rkey"
echo PASS
