#!/usr/bin/env bash
# step11_atomics --help exits 0 with usage; a bad option or value exits 2 with one line then usage.
# shellcheck source=/dev/null
source "$TESTLIB"
bin=$1
run_cmd help "$bin" --help
expect_exit help 0
expect_match help out '^usage: step11_atomics'
run_cmd bad_op "$bin" --op swap 127.0.0.1
expect_exit bad_op 2
expect_line bad_op err "step11_atomics: --op must be read-write, fetch-add, cas or window (got 'swap')"
expect_match bad_op err '^usage: step11_atomics'
run_cmd server_op "$bin" --op cas
expect_exit server_op 2
expect_line server_op err "step11_atomics: --op, --connections, --window, --readers and --offset are client options (give a HOST)"
run_cmd window "$bin" --window 0 127.0.0.1
expect_exit window 2
expect_line window err "step11_atomics: --window must be a whole number from 1 to 255 (got '0')"
run_cmd offset "$bin" --offset 4096 127.0.0.1
expect_exit offset 2
expect_line offset err "step11_atomics: --offset must be a whole number from 0 to 4088 (got '4096')"
echo PASS
