#!/usr/bin/env bash
# step08_rdma_cm --help exits 0 with usage; a bad option or value exits 2 with one line then
# usage; the options rdma_cm decides (-g, -m) are gone.
# shellcheck source=/dev/null
source "$TESTLIB"
bin=$1
run_cmd help "$bin" --help
expect_exit help 0
expect_match help out '^usage: step08_rdma_cm'
expect_match help out '^  -p, --port=PORT +rdma_cm port \(default 7471, as rdma-core.s examples\)$'
run_cmd bad "$bin" --bogus
expect_exit bad 2
expect_line bad err "step08_rdma_cm: unknown option '--bogus'"
expect_match bad err '^usage: step08_rdma_cm'
run_cmd gid "$bin" -g 1 192.0.2.1
expect_exit gid 2
expect_line gid err "step08_rdma_cm: unknown option '-g'"
run_cmd badn "$bin" -n 12x 192.0.2.1
expect_exit badn 2
expect_line badn err "step08_rdma_cm: --iters must be a whole number from 1 to 100000000 (got '12x')"
run_cmd clientopt "$bin" -e
expect_exit clientopt 2
expect_line clientopt err "step08_rdma_cm: -e, --note and --tos are client options (give a HOST)"
run_cmd serveropt "$bin" --exit-after 1 192.0.2.1
expect_exit serveropt 2
expect_line serveropt err "step08_rdma_cm: --exit-after, --bind and --busy-poll are server options (drop the HOST)"
# Private data over the connect request's 56 bytes: the --note field holds 27 characters.
run_cmd long "$bin" --note "a note of 28 characters, 123" 192.0.2.1
expect_exit long 2
expect_line long err "step08_rdma_cm: --note of 28 characters does not fit the connect request's private data: at most 27"
echo PASS
