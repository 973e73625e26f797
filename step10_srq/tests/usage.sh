#!/usr/bin/env bash
# step10_srq --help exits 0 with usage; a bad option or value exits 2 with one line then usage.
# shellcheck source=/dev/null
source "$TESTLIB"
bin=$1
run_cmd help "$bin" --help
expect_exit help 0
expect_match help out '^usage: step10_srq'
run_cmd bad "$bin" --bogus
expect_exit bad 2
expect_line bad err "step10_srq: unknown option '--bogus'"
expect_match bad err '^usage: step10_srq'
run_cmd bad_short "$bin" -ex 127.0.0.1
expect_exit bad_short 2
expect_line bad_short err "step10_srq: unknown option '-x'"
run_cmd novalue0 "$bin" --check=yes
expect_exit novalue0 2
expect_line novalue0 err "step10_srq: option '--check' takes no value"
run_cmd badn "$bin" -n 12x 127.0.0.1
expect_exit badn 2
expect_line badn err "step10_srq: --iters must be a whole number from 1 to 100000000 (got '12x')"
run_cmd clientopt "$bin" -e
expect_exit clientopt 2
expect_line clientopt err "step10_srq: -e, --spin-us and --rate are client options (give a HOST)"
run_cmd serverspin "$bin" --spin-us 20
expect_exit serverspin 2
expect_line serverspin err "step10_srq: -e, --spin-us and --rate are client options (give a HOST)"
run_cmd compat_client "$bin" --srq-pingpong-compat 127.0.0.1
expect_exit compat_client 2
expect_line compat_client err "step10_srq: --exit-after, --bind and --srq-pingpong-compat are server options (drop the HOST)"
run_cmd compat_help "$bin" --help
expect_match compat_help out '^      --srq-pingpong-compat$'
echo PASS
