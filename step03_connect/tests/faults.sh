#!/usr/bin/env bash
# step03_connect: handshake faults end with a clear line, the documented exit code, in bounded time.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
prog=$1
port=$(new_port)

# elapsed_max NAME SECONDS: run NAME took at most SECONDS.
timed() { local name=$1; shift; local t0=$SECONDS; run_cmd "$name" "$@"; echo $((SECONDS - t0)) >"$TEST_TMP/$name.secs"; }
elapsed_max() { local s; s=$(<"$TEST_TMP/$1.secs"); ((s <= $2)) || fail "$1 took ${s}s, more than $2s"; }

# How long the program takes to start here (device setup; slow under emulation): a server that
# nobody connects to gives up after --timeout 1.
timed baseline timeout 60 "$prog" -d "$RDMA_DEVICE" -p "$port" --timeout 1
expect_exit baseline 7
startup=$(($(<"$TEST_TMP/baseline.secs") - 1))

# No server: the client retries a refused connection until --timeout, then gives up.
timed refused timeout 60 "$prog" -d "$RDMA_DEVICE" -p "$port" --timeout 2 127.0.0.1
expect_exit refused 6
expect_line refused err "step03_connect: cannot connect to 127.0.0.1 port $port: Connection refused (tried for 2 s)"
expect_line refused err "hint: no server listens there: start the server first, or check -p"
elapsed_max refused $((2 + 2 * startup + 5))

# A client that connects and says nothing: the server's read times out 3 s after the accept. This
# is also the answer to the chapter's exercise 2, run.
timed silent_server timeout 60 "$prog" -d "$RDMA_DEVICE" -p "$port" --timeout 3 &
wait_for_listen "$port" 30
t1=$(date +%s%N)
exec 3<>"/dev/tcp/127.0.0.1/$port" || fail "cannot connect to the server"
wait
waited=$((($(date +%s%N) - t1) / 1000000))
exec 3>&-
expect_exit silent_server 7
expect_line silent_server err "step03_connect: timed out after 3 s waiting for the peer's QP address (got 0 of 52 bytes)"
expect_line silent_server err "hint: the peer connected but does not speak the handshake: is it ibv_rc_pingpong-compatible?"
((waited >= 2900 && waited <= 8000)) || fail "the silent client's server ended ${waited} ms after the connect, not about 3 s"

# A client that sends 52 bytes of garbage.
port=$((port + 1))
run_cmd garbage timeout 60 "$prog" -d "$RDMA_DEVICE" -p "$port" --timeout 60 &
wait_for_listen "$port" 30
exec 3<>"/dev/tcp/127.0.0.1/$port" || fail "cannot connect to the server"
printf 'GET / HTTP/1.1\r\nHost: x\r\n\r\n------------------------\0' >&3
wait
exec 3>&-
expect_exit garbage 6
expect_match garbage err '^step03_connect: bad handshake from 127\.0\.0\.1:[0-9]+: expected 4 fields LID:QPN:PSN:GID separated by .:., found 2; received 52 bytes: "GET / HTTP/1\.1\\x0d\\x0aHost: x'

# A short message, then the client closes.
port=$((port + 1))
run_cmd short timeout 60 "$prog" -d "$RDMA_DEVICE" -p "$port" --timeout 60 &
wait_for_listen "$port" 30
exec 3<>"/dev/tcp/127.0.0.1/$port" || fail "cannot connect to the server"
printf '0000:000011:a1b2c3:0000' >&3
exec 3>&-
wait
expect_exit short 6
expect_match short err '^step03_connect: bad handshake from 127\.0\.0\.1:[0-9]+: expected 52 bytes, got 23; received 23 bytes: "0000:000011:a1b2c3:0000"$'

# The port is taken by another server.
port=$((port + 1))
run_cmd holder timeout 90 "$prog" -d "$RDMA_DEVICE" -p "$port" --timeout 60 &
wait_for_listen "$port" 30
run_cmd in_use timeout 60 "$prog" -d "$RDMA_DEVICE" -p "$port" --timeout 2
expect_exit in_use 6
expect_line in_use err "step03_connect: cannot listen on port $port: Address already in use"
expect_match in_use err '^hint: another program'
exec 3<>"/dev/tcp/127.0.0.1/$port" || fail "cannot connect to the holder"  # it sees EOF and ends
exec 3>&-
wait
echo PASS
