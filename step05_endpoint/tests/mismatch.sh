#!/usr/bin/env bash
# Both sides must use the same -s and -n. Handshake v3 carries them: a mismatch is an error at
# connect time on both sides (exit 6) that names the option and both values. ibv_rc_pingpong's
# handshake cannot carry them: a side whose peer ends the session early says so (exit 6) instead
# of blaming a dead peer. A version 2 peer is refused, naming both versions.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
program=$1
dev=(-d "$RDMA_DEVICE")
gid=(); [[ $RDMA_DEVICE != rxe* ]] || gid=(-g 1)

# pair NAME SERVER_ARGS -- CLIENT_ARGS: a step05 server and a step05 client on a fresh port.
pair() {
    local name=$1 server_args=() port server
    shift
    while [[ $1 != -- ]]; do server_args+=("$1"); shift; done
    shift
    port=$(new_port)
    run_cmd "${name}_server" "$program" "${dev[@]}" -p "$port" --timeout 30 "${server_args[@]}" &
    server=$!
    wait_for_listen "$port" 30 "$server"
    run_cmd "${name}_client" "$program" "${dev[@]}" -p "$port" --timeout 30 "$@" 127.0.0.1
    wait "$server"
}

# -n: the server runs the default 1000.
pair iters -s 64 -- -s 64 -n 2000
expect_exit iters_server 6
expect_exit iters_client 6
expect_line iters_server err "step05_endpoint: the client uses -n 2000, this server -n 1000: both sides must use the same -n"
expect_line iters_client err "step05_endpoint: the server uses -n 1000, this client -n 2000: both sides must use the same -n"
expect_no_match iters_client out "iters in"

# -s, and both at once.
pair size -s 64 -n 10 -- -s 128 -n 10
expect_exit size_server 6
expect_exit size_client 6
expect_line size_server err "step05_endpoint: the client uses -s 128, this server -s 64: both sides must use the same -s"
expect_line size_client err "step05_endpoint: the server uses -s 64, this client -s 128: both sides must use the same -s"
pair both -s 64 -n 10 --op write -- -s 128 -n 20 --op write
expect_exit both_server 6
expect_exit both_client 6
expect_line both_client err "step05_endpoint: the server uses -s 64 -n 10, this client -s 128 -n 20: both sides must use the same -s and -n"

# A peer speaking handshake version 2 (the same 64 bytes, version 2): the server answers with its
# own message (so that such a peer can name both versions too) and refuses it.
port=$(new_port)
run_cmd v2_server "$program" "${dev[@]}" -p "$port" -s 64 --timeout 30 &
server=$!
wait_for_listen "$port" 30 "$server"
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'RDMA\x00\x02' >&3
head -c 58 /dev/zero >&3
answer=$(head -c 6 <&3 | od -An -tx1 | tr -d ' \n')
exec 3<&-
wait "$server"
[[ $answer == 52444d410003 ]] || fail "v2 peer: expected the server's v3 answer (52444d410003...), got '$answer'"
expect_exit v2_server 6
expect_line v2_server err "step05_endpoint: handshake v3: the peer speaks version 2, this program speaks version 3"
expect_line v2_server err "hint: both sides must be built from the same version of the tutorial"

# ibv_rc_pingpong's format cannot carry -n. A server with fewer messages ends its session after
# them; this client's next send is never acknowledged.
port=$(new_port)
run_cmd rc_server ibv_rc_pingpong "${dev[@]}" "${gid[@]}" -p "$port" -s 64 -n 100 &
server=$!
wait_for_listen "$port" 30 "$server"
run_cmd compat_client "$program" "${dev[@]}" -p "$port" -s 64 -n 200 --rc-pingpong-compat --timeout 3 127.0.0.1
wait "$server"
expect_exit rc_server 0
expect_exit compat_client 6
expect_line compat_client err "step05_endpoint: the server ended the session after 100 messages; both sides must use the same -n"
expect_line compat_client err "hint: this client uses -n 200; ibv_rc_pingpong's handshake cannot carry -n to compare it"
expect_no_match compat_client err "died or was killed"

# And a client with fewer messages: this server probes the silent peer and names the early end.
# The server's --timeout also bounds its wait for the client, and ibv_rc_pingpong connects once,
# only after opening the device and making its QP: on a loaded lab that took more than 3 s, and
# the client found the port closed ("Couldn't connect"). So 10 s, which this test then waits
# after the client's end.
port=$(new_port)
run_cmd compat_server "$program" "${dev[@]}" -p "$port" -s 64 -n 200 --rc-pingpong-compat --timeout 10 &
server=$!
wait_for_listen "$port" 30 "$server"
run_cmd rc_client ibv_rc_pingpong "${dev[@]}" "${gid[@]}" -p "$port" -s 64 -n 100 127.0.0.1
wait "$server"
expect_exit rc_client 0
expect_exit compat_server 6
expect_line compat_server err "step05_endpoint: the client ended the session after 100 messages; both sides must use the same -n"
expect_line compat_server err "hint: this server uses -n 200; ibv_rc_pingpong's handshake cannot carry -n to compare it"
echo PASS
