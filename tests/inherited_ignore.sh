#!/usr/bin/env bash
# A SIGINT that the parent ignores stays ignored (steps 03-07 and 09-12): nohup, or a shell that
# starts a background job without job control, ignores it on purpose. Each server is started
# with SIGINT ignored and sent one: the servers that wait for one client (steps 03-05, 07, 12's --handshake) go
# on until their --timeout 5 ends the wait (exit 7, not 130; 2 s was too short once: on a loaded
# lab the server listened and gave up between two looks of wait_for_listen's `ss`, and the
# test saw a server that ended without listening); those of steps 06, 09, 10 and 11, which
# serve until a signal, are still running a second later and stop on SIGTERM (exit 0).
# usage: inherited_ignore.sh PROGRAM...
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
port=$(new_port)
for prog in "$@"; do
    name=$(basename "$prog")
    port=$((port + 1))
    extra=()
    [[ $name == step12_ud ]] && extra=(--handshake)  # its TCP server: ibv_ud_pingpong's mode
    env --ignore-signal=INT "$prog" -d "$RDMA_DEVICE" -p "$port" --timeout 5 "${extra[@]}" \
        >"$TEST_TMP/$name.out" 2>"$TEST_TMP/$name.err" &
    server=$!
    wait_for_listen "$port" 30 "$server"
    kill -INT "$server"
    case $name in
        step06_epoll | step09_coroutines | step10_srq | step11_atomics)
            sleep 1
            kill -0 "$server" 2>/dev/null || fail "$name: ended on a SIGINT its parent ignores"
            kill -TERM "$server"
            rc=0
            wait "$server" || rc=$?
            echo "$rc" >"$TEST_TMP/$name.rc"
            expect_exit "$name" 0
            ;;
        *)
            rc=0
            wait "$server" || rc=$?
            echo "$rc" >"$TEST_TMP/$name.rc"
            expect_exit "$name" 7
            expect_line "$name" err "$name: no client connected to port $port within 5 s"
            ;;
    esac
    echo "$name: kept its parent's SIGINT ignore (exit $rc)"
done
echo PASS
