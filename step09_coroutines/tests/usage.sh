#!/usr/bin/env bash
# step09_coroutines --help exits 0 with usage; a bad option or value exits 2 with one line then
# usage. step06's tests/usage.sh under step09's name: the program's name in every expected line is
# BIN's file name (step09_coroutines when CTest runs it).
#   tests/usage.sh BIN
# shellcheck source=/dev/null
source "$TESTLIB"
bin=$1
prog=${bin##*/}
run_cmd help "$bin" --help
expect_exit help 0
expect_match help out "^usage: $prog"
run_cmd bad "$bin" --bogus
expect_exit bad 2
expect_line bad err "$prog: unknown option '--bogus'"
expect_match bad err "^usage: $prog"
run_cmd bad_short "$bin" -vx 127.0.0.1
expect_exit bad_short 2
expect_line bad_short err "$prog: unknown option '-x'"
run_cmd novalue0 "$bin" --check=yes
expect_exit novalue0 2
expect_line novalue0 err "$prog: option '--check' takes no value"
run_cmd badn "$bin" -n 12x 127.0.0.1
expect_exit badn 2
expect_line badn err "$prog: --iters must be a whole number from 1 to 100000000 (got '12x')"
run_cmd clientopt "$bin" --rate 10
expect_exit clientopt 2
expect_line clientopt err "$prog: --rate is a client option (give a HOST)"
# Event mode only: step06's -e and --spin-us are not step09's options.
run_cmd events "$bin" -e 127.0.0.1
expect_exit events 2
expect_line events err "$prog: unknown option '-e'"
run_cmd spin "$bin" --spin-us 20 127.0.0.1
expect_exit spin 2
expect_line spin err "$prog: unknown option '--spin-us'"
# Neither step06 nor step09 has --latency-file: no benchmark reads their samples.
run_cmd latfile "$bin" --latency-file x.lat 127.0.0.1
expect_exit latfile 2
expect_line latfile err "$prog: unknown option '--latency-file'"
echo PASS
