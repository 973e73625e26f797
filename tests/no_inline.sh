#!/usr/bin/env bash
# A device that allows no inline data (no_inline_qp.so, LD_PRELOAD, refuses max_inline_data above
# 0 with EINVAL): steps 03-07 and 09-12 ask again for none and run. Each program's server and
# client, on rxe0, with the injector.
# usage: no_inline.sh NO_INLINE_QP_SO PROGRAM...
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
seam=$1
shift
port=$(new_port)
server=  # serve (testlib) sets it
# An ASan build wants its runtime first among the preloaded libraries; the seam has none.
asan_options=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0
for prog in "$@"; do
    name=$(basename "$prog")
    args=(-d "$RDMA_DEVICE" --timeout 20)
    case $name in
        step03_connect) ;;
        step05_endpoint) args+=(-n 10 -s 64) ;;
        step07_bandwidth) args+=(-n 100 -s 64) ;;
        step11_atomics) args+=(-n 10) ;;  # no -s: its verbs move 8-byte words
        step12_ud) args+=(--handshake -n 10 -s 64) ;;  # its pair over TCP: ibv_ud_pingpong's mode
        *) args+=(-n 10 -s 64) ;;
    esac
    serves_on=0  # a server that serves until a signal or --exit-after
    [[ $name == step06_epoll || $name == step09_coroutines || $name == step10_srq ||
        $name == step11_atomics ]] && serves_on=1
    ((serves_on)) && args+=(--exit-after 1)
    serve "${name}_server" env LD_PRELOAD="$seam" ASAN_OPTIONS="$asan_options" "$prog" "${args[@]}"
    client_args=("${args[@]}")
    ((serves_on)) && client_args=(-d "$RDMA_DEVICE" --timeout 20 -n 10 -s 64)
    [[ $name == step11_atomics ]] && client_args=(-d "$RDMA_DEVICE" --timeout 20 -n 10)
    run_cmd "${name}_client" env LD_PRELOAD="$seam" ASAN_OPTIONS="$asan_options" "$prog" "${client_args[@]}" -p "$port" 127.0.0.1
    wait "$server"
    for side in server client; do
        expect_exit "${name}_$side" 0
        expect_line "${name}_$side" err "no_inline_qp: ibv_create_qp refuses max_inline_data 64"
        expect_line "${name}_$side" err "no_inline_qp: ibv_create_qp with max_inline_data 0"
    done
    echo "$name: asked again with no inline data, and ran"
done
echo PASS
