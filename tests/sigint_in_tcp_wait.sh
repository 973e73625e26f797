#!/usr/bin/env bash
# A SIGINT that lands during any TCP wait ends the program at once (steps 03-07 and 09-12),
# however close to the wait it lands. sigint_in_window.so (LD_PRELOAD) raises SIGINT at the program's first POLLIN
# wait, after its stop-flag check and before the real poll() or ppoll(). A program that checks the
# flag and then calls poll() waits out its whole --timeout 10 there (and exits 7); one that keeps
# the signal blocked until ppoll() unblocks it ends with 130 within 1 s.
# usage: sigint_in_tcp_wait.sh SIGINT_IN_WINDOW_SO PROGRAM...
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
seam=$1
shift
port=$(new_port)
# An ASan build wants its runtime first among the preloaded libraries; the seam has none.
asan_options=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0

# interrupt NAME PROGRAM ARGS...: runs it with the seam and checks that it exits 130, naming the
# signal, within 1 s of the seam's SIGINT (the seam's own clock: a shell's forks are slow under
# emulation).
interrupt() {
    local name=$1 prog=$2 ms
    shift 2
    run_cmd "$name" env --default-signal=INT LD_PRELOAD="$seam" ASAN_OPTIONS="$asan_options" \
        "$prog" -d "$RDMA_DEVICE" -p "$port" --timeout 10 "$@"
    expect_line "$name" err "sigint_in_window: SIGINT before the wait"
    expect_exit "$name" 130
    expect_line "$name" err "$(basename "$prog"): interrupted by SIGINT"
    ms=$(sed -n 's/^sigint_in_window: exit \([0-9]*\) ms after the SIGINT$/\1/p' "$TEST_TMP/$name.err")
    [[ -n $ms ]] || fail "$name: the seam reported no exit"
    ((ms <= 1000)) || fail "$name: exited ${ms} ms after the SIGINT, more than 1000"
    echo "$name: exit ${ms} ms after the SIGINT (bound 1000)"
    port=$((port + 1))
}

for prog in "$@"; do
    case $(basename "$prog") in
        step06_epoll | step09_coroutines | step10_srq | step11_atomics)
            # Their servers wait in epoll; their clients wait in tcp.hpp, here for the handshake
            # of a server that accepts and never answers.
            python3 -c 'import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); time.sleep(60)' "$port" &
            listener=$!
            wait_for_listen "$port" 30 "$listener"
            interrupt "$(basename "$prog")_client" "$prog" 127.0.0.1
            kill "$listener" 2>/dev/null
            ;;
        step12_ud)  # only ibv_ud_pingpong's mode waits on TCP
            interrupt "$(basename "$prog")_server" "$prog" --handshake
            ;;
        *)
            interrupt "$(basename "$prog")_server" "$prog"  # waiting for a client to connect
            ;;
    esac
done
echo "every program ended within 1 s of a SIGINT in its TCP wait"
