#!/usr/bin/env bash
# Both sides must use the same -s and -n. step06's client speaks handshake v3, which carries them:
# a mismatch is an error at connect time (the client exits 6; the server rejects that client and
# serves on), naming the option and both values. ibv_rc_pingpong stays a valid client; its
# handshake cannot carry -n, so when it ends early the server says so instead of blaming a dead
# client. A version 2 peer is refused, naming both versions.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
bin=$1
dev=(-d "$RDMA_DEVICE")
gid=(); [[ $RDMA_DEVICE != rxe* ]] || gid=(-g 1)
peer='127\.0\.0\.1:[0-9]+'

port=$(new_port)
run_cmd server "$bin" "${dev[@]}" -p "$port" -s 64 --timeout 30 --exit-after 4 &
server=$!
wait_for_listen "$port" 30 "$server"
run_cmd iters "$bin" "${dev[@]}" -p "$port" -s 64 -n 2000 --timeout 30 127.0.0.1
expect_exit iters 6
expect_line iters err "step06_epoll: the server uses -n 1000, this client -n 2000: both sides must use the same -n"
expect_no_match iters out "iters in"
run_cmd size "$bin" "${dev[@]}" -p "$port" -s 128 --timeout 30 127.0.0.1
expect_exit size 6
expect_line size err "step06_epoll: the server uses -s 64, this client -s 128: both sides must use the same -s"
run_cmd both "$bin" "${dev[@]}" -p "$port" -s 4096 -n 5 -e --timeout 30 127.0.0.1
expect_exit both 6
expect_line both err "step06_epoll: the server uses -s 64 -n 1000, this client -s 4096 -n 5: both sides must use the same -s and -n"
# A peer speaking handshake version 2 (the same 64 bytes, version 2).
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'RDMA\x00\x02' >&3
head -c 58 /dev/zero >&3
exec 3>&-
wait "$server"
expect_exit server 0  # a server serves many clients: a rejected one is a line in its log
expect_match server out "^server: client 1 \\($peer\\): rejected: the client uses -n 2000, this server -n 1000: both sides must use the same -n\$"
expect_match server out "^server: client 2 \\($peer\\): rejected: the client uses -s 128, this server -s 64: both sides must use the same -s\$"
expect_match server out "^server: client 3 \\($peer\\): rejected: the client uses -s 4096 -n 5, this server -s 64 -n 1000: both sides must use the same -s and -n\$"
expect_match server out "^server: client 4 \\($peer\\): rejected: handshake v3: the peer speaks version 2, this program speaks version 3\$"
expect_line server out "server: clients: 0 connected, 0 complete, 0 failed, 4 rejected, 0 aborted"

# ibv_rc_pingpong as a client with fewer messages than the server: it ends after its -n, and
# the server, once --timeout has passed without a message, names the early end.
port=$(new_port)
run_cmd rc_server "$bin" "${dev[@]}" -p "$port" -s 64 -n 100 --timeout 3 --exit-after 1 &
server=$!
wait_for_listen "$port" 30 "$server"
run_cmd rc_client ibv_rc_pingpong "${dev[@]}" "${gid[@]}" -p "$port" -s 64 -n 50 127.0.0.1
wait "$server"
expect_exit rc_client 0
expect_exit rc_server 0
expect_match rc_server out "^server: client 1 \\($peer\\): failed: the client ended the session after 50 messages; both sides must use the same -n \\(this server uses -n 100; ibv_rc_pingpong's handshake cannot carry -n to compare it\\); 50 received, 50 sent, "
expect_no_match rc_server out "killed or stalled"
expect_line rc_server out "server: clients: 1 connected, 0 complete, 1 failed, 0 rejected, 0 aborted"
echo PASS
