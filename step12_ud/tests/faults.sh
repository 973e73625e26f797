#!/usr/bin/env bash
# step12_ud's bad input and vanishing peers: a message over the MTU refused before posting; on
# one server, a wrong Q_Key (the client gives up, the server's port counted the drops), a killed
# client (the server notices nothing) and Ctrl-C on a client, then on the server, whose last
# client gives up; a -s and a -n mismatch in --handshake mode. (One server for four clients: each
# program started under ASan in the emulated lab costs seconds.)
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
prog=$1
dev=(-d "$RDMA_DEVICE")

# start NAME [OPTIONS...]: the program in the background, SIGINT at its default (a background job
# of a script starts with it ignored, and the program keeps an ignored SIGINT ignored); sets
# shell (run_cmd's subshell, to wait for) and pid (the program, to signal).
start() {
    local name=$1
    shift
    run_cmd "$name" env --default-signal=INT "$prog" "${dev[@]}" "$@" &
    shell=$!
    pid=$(program_pid "$shell")
}
# start_server NAME [OPTIONS...]: a server; sets qpn, server_shell and server_pid.
start_server() {
    start "$@"
    server_shell=$shell server_pid=$pid
    wait_for_line "$1" out '^server: UD QP [0-9]+ ' 30
    qpn=$(field "$1" out '^server: UD QP ([0-9]+) .*')
}

# 1. Over the MTU: refused before anything is posted (no IB MTU is over 4096).
run_cmd big "$prog" "${dev[@]}" -s 4097 127.0.0.1 17
expect_exit big 2
expect_match big err "^step12_ud: --size 4097 is over port 1's active MTU [0-9]+: a UD message must fit in one packet\$"

# 2. One server, four clients that fail in turn, and its Ctrl-C. A wrong Q_Key: the client's
# datagrams are dropped by the server's QP, without a trace but the port's counter. A client
# killed mid-run: nothing breaks on the server's side. A client's Ctrl-C mid-run (its handlers
# are in place once its pings flow). Each next client's answers show the server unharmed; its
# Ctrl-C ends it with its figures (exit 130), the Q_Key drops among them. Its last client, left
# without answers, sends again and again, then gives up: to a client, a server that is gone
# (killed, interrupted or unreachable) is only silence.
start_server one_server
run_cmd qk_client "$prog" "${dev[@]}" --qkey 5 --timeout 2 -n 5 127.0.0.1 "$qpn"
expect_exit qk_client 7
expect_line qk_client err "step12_ud: no answer to ping 0 for 2 s"
expect_line qk_client err "hint: is the server running, with this QP number and the same --qkey? A datagram to a wrong QP or Q_Key is dropped without a trace"
start gone_client -n 100000000 127.0.0.1 "$qpn"
wait_for_line gone_client out '^server:  ' 30
kill -KILL "$pid"
wait "$shell" || true
start int_client -n 100000000 127.0.0.1 "$qpn"
wait_for_line int_client out '^server:  ' 30
kill -INT "$pid"
wait "$shell" || true
expect_exit int_client 130
expect_line int_client err "step12_ud: interrupted by SIGINT"
run_cmd last_client "$prog" "${dev[@]}" --timeout 2 -n 100000000 127.0.0.1 "$qpn" &
client=$!
wait_for_line last_client out '^server:  ' 30
kill -INT "$server_pid"
wait "$server_shell" || true
wait "$client"
expect_exit last_client 7
expect_match last_client err '^step12_ud: no answer to ping [0-9]+ for 2 s$'
expect_exit one_server 130
expect_line one_server err "step12_ud: interrupted by SIGINT"
expect_match one_server out '^server: [0-9]+ messages answered, 0 clients finished, 1 address handles; 0 refused \(no address handle\), 0 receives failed$'
dropped=$(field one_server out '^port 1: ([0-9]+) datagrams dropped for a wrong Q_Key while we ran \(qkey_viol_cntr\)$')
((dropped >= 1)) || fail "one_server: expected wrong-Q_Key drops counted, got $dropped"

# 3. --handshake, -s differs: the server names it; its client, never answered, gives up. The
# server's --timeout bounds its wait for the client too, and it ends at the client's first message.
port=$(new_port)
run_cmd s_server "$prog" "${dev[@]}" --handshake -p "$port" -s 512 --timeout 30 &
wait_for_listen "$port" 30 $!
run_cmd s_client "$prog" "${dev[@]}" --handshake -p "$port" -s 256 --timeout 3 127.0.0.1
wait
expect_exit s_server 6
expect_line s_server err "step12_ud: received a 256-byte message, but -s is 512"
expect_exit s_client 7
expect_match s_client err '^step12_ud: nothing from the peer for 3 s \(after 0 of 1000 messages\)$'

# 4. --handshake, -n differs: the server's last message is marked; the client names it.
port=$((port + 1))
run_cmd n_server "$prog" "${dev[@]}" --handshake -p "$port" -n 10 &
wait_for_listen "$port" 30 $!
run_cmd n_client "$prog" "${dev[@]}" --handshake -p "$port" -n 20 127.0.0.1
wait
expect_exit n_server 0
expect_exit n_client 6
expect_line n_client err "step12_ud: the server ended the session after 10 messages; both sides must use the same -n"
echo PASS
