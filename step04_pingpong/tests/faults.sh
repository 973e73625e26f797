#!/usr/bin/env bash
# step04_pingpong: every fault ends with a clear line, the documented exit code, in bounded time.
# Usage: faults.sh PROGRAM [untimed|timed]: the faults whose time is bounded (timed: the test
# that runs alone, step04_faults_timed) or the others (untimed: step04_faults); both by default.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
prog=$1
gid=(-g "${RDMA_GID_INDEX:-1}")

# timed NAME CMD...: run_cmd that also records the seconds it took; elapsed_max NAME S checks it.
timed() { local name=$1 t0; shift; t0=$(date +%s%N); run_cmd "$name" "$@"; echo $((($(date +%s%N) - t0) / 1000000000)) >"$TEST_TMP/$name.secs"; }
elapsed_max() { local s; s=$(<"$TEST_TMP/$1.secs"); ((s <= $2)) || fail "$1 took ${s}s, more than $2s"; echo "$1: ${s}s (bound $2s)"; }
next_port() { port=$(new_port); }

# untimed_faults: the faults whose message and exit code are checked, not their time.
untimed_faults() {
    # Port in use.
    next_port
    run_cmd holder timeout 90 "$prog" -p "$port" --timeout 60 &
    holder=$!
    wait_for_listen "$port" 30
    run_cmd in_use timeout 30 "$prog" -p "$port"
    expect_exit in_use 6
    expect_line in_use err "step04_pingpong: cannot listen on port $port: Address already in use"
    expect_line in_use err "hint: another program (another server, or ibv_rc_pingpong) listens there: stop it or choose another port with -p"

    # Garbage from a client, then a short message, then nothing at all. The holder takes the first.
    printf 'GET / HTTP/1.1\r\nHost: x\r\n\r\n------------------------\0' >"/dev/tcp/127.0.0.1/$port"
    wait $holder
    expect_exit holder 6
    expect_match holder err "^step04_pingpong: bad handshake from 127\.0\.0\.1:[0-9]+: expected 4 fields LID:QPN:PSN:GID separated by ':', found 2; received 52 bytes: \"GET / HTTP/1\.1\\\\x0d\\\\x0aHost: x"

    next_port
    run_cmd short timeout 90 "$prog" -p "$port" --timeout 60 &
    wait_for_listen "$port" 30
    printf '0000:000011:a1b2c3:0000' >"/dev/tcp/127.0.0.1/$port"
    wait
    expect_exit short 6
    expect_match short err '^step04_pingpong: bad handshake from 127\.0\.0\.1:[0-9]+: expected 52 bytes, got 23; received 23 bytes: "0000:000011:a1b2c3:0000"$'

    next_port
    timed silent timeout 60 "$prog" -p "$port" --timeout 15 &
    wait_for_listen "$port" 30
    exec 3<>"/dev/tcp/127.0.0.1/$port" || fail "cannot connect to the server"
    wait
    exec 3>&-
    expect_exit silent 7
    expect_line silent err "step04_pingpong: timed out after 15 s waiting for the peer's QP address (got 0 of 52 bytes)"

    # A server that answers with garbage.
    next_port
    /usr/bin/python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1)
c, _ = s.accept(); c.recv(52); c.sendall(b"0000:zzzzzz:000000:00000000000000000000ffff7f000001\0"); c.recv(10)
    ' "$port" &
    wait_for_listen "$port" 30
    run_cmd bad_server timeout 60 "$prog" -p "$port" --timeout 10 127.0.0.1
    wait
    expect_exit bad_server 6
    expect_match bad_server err "^step04_pingpong: bad handshake from 127\.0\.0\.1:$port: QPN is not hex \('zzzzzz'\); received 52 bytes"

    # Mismatched -s: the small receiver's receive fails (IBV_WC_LOC_LEN_ERR on most NICs,
    # IBV_WC_LOC_QP_OP_ERR on Soft-RoCE), then the sender's send (REM_INV_REQ_ERR or REM_OP_ERR).
    next_port
    run_cmd small_server timeout 60 "$prog" -p "$port" -s 64 --timeout 60 &
    wait_for_listen "$port" 30
    run_cmd big_client timeout 60 "$prog" -p "$port" -s 4096 --timeout 10 127.0.0.1
    wait
    expect_exit small_server 1
    expect_match small_server err '^step04_pingpong: receive failed: IBV_WC_(LOC_LEN_ERR|LOC_QP_OP_ERR) '
    expect_match small_server err '^hint: .*both sides must use the same -s$'
    expect_exit big_client 1
    expect_match big_client err '^step04_pingpong: send failed: IBV_WC_(REM_INV_REQ_ERR|REM_OP_ERR) '
    expect_match big_client err '^hint: .*both sides must use the same -s$'

    # A bigger -s at the receiver: the message arrives, shorter than expected.
    next_port
    run_cmd big_server timeout 60 "$prog" -p "$port" -s 4096 --timeout 60 &
    wait_for_listen "$port" 30
    run_cmd small_client timeout 60 "$prog" -p "$port" -s 64 --timeout 8 127.0.0.1
    wait
    expect_exit big_server 6
    expect_line big_server err "step04_pingpong: received a 64-byte message, but -s is 4096"
    expect_line big_server err "hint: both sides must use the same -s"
    expect_exit small_client 1
    expect_match small_client err '^step04_pingpong: send failed: IBV_WC_RETRY_EXC_ERR '

    # A peer that sends a valid handshake, then disappears before "done".
    next_port
    run_cmd vanishing timeout 60 "$prog" -p "$port" --timeout 60 &
    wait_for_listen "$port" 30
    printf '0000:000011:a1b2c3:00000000000000000000ffff7f000001\0' >"/dev/tcp/127.0.0.1/$port"
    wait
    expect_exit vanishing 6
    # (Our answer may still go out, or meet the reset: three wordings, all exit 6.)
    expect_match vanishing err '^step04_pingpong: (bad handshake from 127\.0\.0\.1:[0-9]+: expected "done" and a NUL, received 0 bytes: ""|cannot send our QP address: .*|cannot read "done": .*)$'


    # --check on one side only: both refuse; against ibv_rc_pingpong too.
    next_port
    run_cmd plain_server timeout 60 "$prog" -p "$port" --timeout 60 &
    wait_for_listen "$port" 30
    run_cmd check_client timeout 60 "$prog" -p "$port" --check --timeout 60 127.0.0.1
    wait
    expect_exit check_client 6
    expect_line check_client err "step04_pingpong: --check is on here, but 127.0.0.1:$port did not offer it"
    expect_exit plain_server 6
    expect_match plain_server err '^step04_pingpong: 127\.0\.0\.1:[0-9]+ runs with --check, but this side does not$'
    next_port
    run_cmd check_server timeout 60 "$prog" -p "$port" -n 10 --check --timeout 60 &
    wait_for_listen "$port" 30
    # (ibv_rc_pingpong then sends to a QP that is gone. With its retry_cnt 7, which Soft-RoCE reads as
    # "for ever", it never gives up: timeout stops it. We assert nothing about it.)
    run_cmd rc_client timeout 8 ibv_rc_pingpong -d "$RDMA_DEVICE" "${gid[@]}" -p "$port" -n 10 127.0.0.1
    wait
    expect_exit check_server 6
    expect_match check_server err '^step04_pingpong: --check is on here, but 127\.0\.0\.1:[0-9]+ did not offer it$'
    expect_line check_server err "hint: start both sides with --check; ibv_rc_pingpong has no --check"

}

# timed_faults: the faults whose time is bounded too.
timed_faults() {
    # How long the program takes to start here (device setup; slow under emulation): a server that
    # nobody connects to gives up after --timeout 1.
    next_port
    timed baseline timeout 60 "$prog" -p "$port" --timeout 1
    expect_exit baseline 7
    expect_line baseline err "step04_pingpong: no client connected to port $port within 1 s"
    startup=$(($(<"$TEST_TMP/baseline.secs") - 1))

    # No server: refused until the timeout.
    next_port
    timed refused timeout 60 "$prog" -p "$port" --timeout 2 127.0.0.1
    expect_exit refused 6
    expect_line refused err "step04_pingpong: cannot connect to 127.0.0.1 port $port: Connection refused (tried for 2 s)"
    elapsed_max refused $((2 + 2 * startup + 5))

    # The server is killed mid-run: the client notices within --timeout plus the retry budget.
    next_port
    run_cmd victim "$prog" -p "$port" -n 100000000 --timeout 60 &
    victim=$!
    wait_for_listen "$port" 30
    timed survivor timeout 120 "$prog" -p "$port" -n 100000000 --timeout 6 127.0.0.1 &
    survivor=$!
    for ((i = 0; i < 300; i++)); do  # until both sides are in RTS
        grep -q 'RTR -> RTS' "$TEST_TMP/victim.out" 2>/dev/null && break  # modify_qp flushes
        sleep 0.1
    done
    wait_for_packets "$(sent_packets)" 200 30  # messages are flowing (this test runs alone)
    pkill -KILL -P $victim  # the program itself, a child of the run_cmd subshell
    t0=$(date +%s%N)
    wait $survivor
    killed_secs=$((($(date +%s%N) - t0) / 1000000000))
    wait
    expect_exit survivor 1
    expect_line survivor err "step04_pingpong: send failed: IBV_WC_RETRY_EXC_ERR (transport retry counter exceeded)"
    expect_line survivor err "hint: the peer's QP stopped acknowledging (after retries): the peer process died or was killed, the network link between the hosts is down, or the path (GID, MTU) is wrong"
    # The bound: --timeout (6 s) of silence, then a probe that fails after its retries (about 0.5 s).
    ((killed_secs <= 12)) || fail "the survivor took ${killed_secs}s after the kill, more than the 12s bound"
    echo "survivor exited ${killed_secs}s after the kill"
}

case ${2:-both} in
    untimed) untimed_faults ;;
    timed) timed_faults ;;
    both) untimed_faults; timed_faults ;;
    *) fail "usage: faults.sh PROGRAM [untimed|timed]" ;;
esac
echo PASS
