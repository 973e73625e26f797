#!/usr/bin/env bash
# step04_pingpong: different -n on the two sides is named, not blamed on a dead peer. The side
# that was to run longer says that its peer ended the session after so many messages (exit 6) as
# soon as the peer's last message arrives; the other side completes its run (exit 0).
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
prog=$1
port=$(new_port)

# run_pair NAME SERVER-ARGS... -- CLIENT-ARGS...: both step04, the client's time recorded.
run_pair() {
    local name=$1 server=() client=() t0
    shift
    while [[ $1 != -- ]]; do server+=("$1"); shift; done
    shift
    client=("$@")
    port=$((port + 1))
    t0=$(ms_now)
    run_cmd "${name}_server" timeout 90 "$prog" -p "$port" --timeout 30 "${server[@]}" &
    wait_for_listen "$port" 30 $!
    run_cmd "${name}_client" timeout 90 "$prog" -p "$port" --timeout 30 "${client[@]}" 127.0.0.1
    wait
    # Far below --timeout 30: the mismatch is seen when the last message arrives, not by waiting.
    expect_within "$t0" 25 "$name"
}
# ended NAME SIDE ROLE COUNT: SIDE (of run NAME) exits 6 with the exact lines.
ended() {
    expect_exit "$1_$2" 6
    expect_line "$1_$2" err "step04_pingpong: the $3 ended the session after $4 messages; both sides must use the same -n"
    expect_match "$1_$2" err "^hint: this side was to run [0-9]+ \(-n plus --warmup\); the handshake does not carry -n\$"
    expect_no_match "$1_$2" err 'probing|RETRY_EXC|died'
}
completed() {  # NAME SIDE ITERS
    expect_exit "$1_$2" 0
    expect_match "$1_$2" out "^$3 iters in [0-9.]+ seconds = [0-9.]+ usec/iter\$"
}

# The server ends first: the client (-n 200) is told after the server's 100th message.
run_pair srv_short -n 100 -- -n 200
completed srv_short server 100
ended srv_short client server 100

# The client ends first: the server answers the client's last message, then says so.
run_pair cli_short -n 200 -- -n 100
completed cli_short client 100
ended cli_short server client 100

# The same with the plain loop on either side, and --warmup counted in.
run_pair plain_srv --plain -s 64 -n 100 -- -s 64 -n 150
completed plain_srv server 100
ended plain_srv client server 100
run_pair plain_cli -s 64 -n 100 -- --plain -s 64 -n 100 --warmup 30
completed plain_cli server 100
ended plain_cli client server 100
expect_line plain_cli_client err "hint: this side was to run 130 (-n plus --warmup); the handshake does not carry -n"
run_pair plain_both --plain -n 300 -- --plain -n 120
completed plain_both client 120
ended plain_both server client 120
echo PASS
