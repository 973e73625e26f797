#!/usr/bin/env bash
# lab/softroce answers --help with exit 0 and a bad call with exit 2.
# shellcheck source=/dev/null
source "$TESTLIB"
softroce=$1
run_cmd help "$softroce" --help
expect_exit help 0
expect_line help out "usage: lab/softroce run [--timeout S] -- CMD [ARGS...]"
run_cmd bad "$softroce" frobnicate
expect_exit bad 2
expect_line bad err "usage: lab/softroce run [--timeout S] -- CMD [ARGS...]"
run_cmd badtimeout "$softroce" run --timeout soon -- true
expect_exit badtimeout 125
expect_line badtimeout err "softroce: --timeout needs a whole number of seconds"
echo PASS
