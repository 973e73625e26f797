#!/usr/bin/env bash
# The answers to step04's exercises 1 and 2, run. Exercise 2 (the program as it is): a server
# stopped with SIGSTOP still has its QP, which acknowledges the client's probe: the client exits 7
# about 3 s after the stop, naming a stuck peer. Exercise 1 (kAckTimeout 18,
# exercises/ack_timeout.patch): a server stopped, then killed, acknowledges nothing; the probe's
# retries (about 7.5 s) outlast the probe's 5 s wait, so the client exits 7 asking whether the
# peer still runs, where kAckTimeout 14's half second of retries ends in IBV_WC_RETRY_EXC_ERR.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
patched=$1 prog=$2

# stop_server NAME PROGRAM [kill]: a server and a client of PROGRAM; once they exchange
# messages, SIGSTOP to the server (and SIGKILL a second later with "kill"). Leaves the client's
# run as NAME-client; prints the milliseconds from the stop to the client's end.
stop_server() {
    local name=$1 program=$2 port server client stopped
    port=$(new_port)
    local common=(-d "$RDMA_DEVICE" -p "$port" -n 100000000 --timeout 3)
    run_cmd "$name-server" timeout 120 "$program" "${common[@]}" &
    server=$!
    wait_for_listen "$port" 30 "$server"
    run_cmd "$name-client" timeout 120 "$program" "${common[@]}" 127.0.0.1 &
    client=$!
    wait_for_line "$name-client" out '^  remote address:' 30
    sleep 1  # messages are flowing
    local pid
    pid=$(program_pid "$(program_pid "$server")")
    kill -STOP "$pid"
    stopped=$(ms_now)
    if [[ ${3:-} == kill ]]; then
        sleep 1
        kill -KILL "$pid"
    fi
    wait "$client"
    echo $(($(ms_now) - stopped)) >"$TEST_TMP/$name.ms"
    kill -KILL "$pid" 2>/dev/null
    wait "$server"
}

stop_server stopped "$prog"
expect_exit stopped-client 7
expect_match stopped-client err '^step04_pingpong: nothing from the peer for 3 s \(after [0-9]+ of 100000000 messages\); probing its QP$'
expect_line stopped-client err "hint: its QP acknowledged a probe, so the peer's program is alive but stuck (or stopped)"
ms=$(<"$TEST_TMP/stopped.ms")
((ms >= 2900 && ms <= 12000)) || fail "the client ended ${ms} ms after the stop, not about 3 s"

stop_server killed "$patched" kill
expect_exit killed-client 7
expect_line killed-client err "hint: is the peer still running?"
ms=$(<"$TEST_TMP/killed.ms")
((ms >= 7500 && ms <= 20000)) || fail "the client ended ${ms} ms after the stop, not about 8 s"
echo PASS
