#!/usr/bin/env bash
# step07_bandwidth --help exits 0 with the usage; a bad option or value exits 2 with one line;
# -Q or -l larger than -t is refused before anything is created, saying why.
# shellcheck source=/dev/null
source "$TESTLIB"
program=$1
usage="usage: step07_bandwidth [options]          start the target (server) and wait"
run_cmd help "$program" --help
expect_exit help 0
expect_line help out "$usage"
expect_match help out '^  -Q, --cq-mod=N '
run_cmd bad "$program" --frobnicate
expect_exit bad 2
expect_line bad err "step07_bandwidth: unknown option '--frobnicate'"
expect_line bad err "$usage"
run_cmd badop "$program" --op read
expect_exit badop 2
expect_line badop err "step07_bandwidth: --op must be write or send (got 'read')"
run_cmd cqmod "$program" -t 16 -Q 32
expect_exit cqmod 2
expect_line cqmod err "step07_bandwidth: -Q 32 is larger than -t 16: the send queue could fill with no signaled work request to retire it"
run_cmd postlist "$program" -t 4 -l 8
expect_exit postlist 2
expect_line postlist err "step07_bandwidth: -l 8 is larger than -t 4: a post list must fit in the send queue"
run_cmd sweep "$program" -a -D 2
expect_exit sweep 2
expect_line sweep err "step07_bandwidth: -a and -D do not go together: a sweep runs -n messages per size"
echo PASS
