#!/usr/bin/env bash
# The answer to step03's exercise 2, run: a client that connects and says nothing ends the
# server after its --timeout 3, with exit 7 and the line and hint the answer quotes.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
prog=$1
port=$((20000 + RANDOM % 20000))

t0=$(date +%s%N)
run_cmd server timeout 60 "$prog" -d "$RDMA_DEVICE" -p "$port" --timeout 3 &
server=$!
wait_for_listen "$port" 30
t1=$(date +%s%N)
bash -c "exec 3<>/dev/tcp/127.0.0.1/$port; sleep 10" &
wait "$server"
waited=$((($(date +%s%N) - t1) / 1000000))
expect_exit server 7
expect_line server err "step03_connect: timed out after 3 s waiting for the peer's QP address (got 0 of 52 bytes)"
expect_line server err "hint: the peer connected but does not speak the handshake: is it ibv_rc_pingpong-compatible?"
((waited >= 2900 && waited <= 8000)) || fail "the server ended ${waited} ms after the client connected, not about 3 s"
echo "the server ended ${waited} ms after the client connected (started $(((t1 - t0) / 1000000)) ms earlier)"
echo PASS
