#!/usr/bin/env bash
# step04_pingpong: --help exits 0 with the usage; a bad option or value exits 2 with one line.
# shellcheck source=/dev/null
source "$TESTLIB"
prog=$1
run_cmd help "$prog" --help
expect_exit help 0
expect_match help out '^usage: step04_pingpong \[options\] +start a server'
expect_match help out '^      --check '
expect_match help out '^      --plain          run the plain loop: one message at a time, every send$'
run_cmd unknown "$prog" --no-such-option
expect_exit unknown 2
expect_line unknown err "step04_pingpong: unknown option '--no-such-option'"
expect_match unknown err '^usage: '
run_cmd novalue0 "$prog" --plain=yes
expect_exit novalue0 2
expect_line novalue0 err "step04_pingpong: option '--plain' takes no value"
run_cmd novalue1 "$prog" --check=1
expect_exit novalue1 2
expect_line novalue1 err "step04_pingpong: option '--check' takes no value"
run_cmd badport "$prog" -p 70000
expect_exit badport 2
expect_line badport err "step04_pingpong: --port must be a whole number from 1 to 65535 (got '70000')"
run_cmd badmtu "$prog" -m 1000
expect_exit badmtu 2
expect_line badmtu err "step04_pingpong: --mtu must be 256, 512, 1024, 2048 or 4096 (got '1000')"
run_cmd iters "$prog" -n 0
expect_exit iters 2
expect_line iters err "step04_pingpong: --iters must be a whole number from 1 to 100000000 (got '0')"
# --latency-file is opened before anything else: a bad path is a usage error (exit 2), even
# where there is no RDMA device at all (which would be exit 3).
run_cmd badfile "$prog" --latency-file /nonexistent-dir/lat.txt
expect_exit badfile 2
expect_line badfile err "step04_pingpong: cannot open --latency-file '/nonexistent-dir/lat.txt': No such file or directory"
echo PASS
