#!/usr/bin/env bash
# A server at its open-file limit keeps serving the client it has, refuses the next ones with a
# line that names the limit (at accept, and when the endpoint's completion channel finds no fd),
# and serves again once fds are free. The limit is lowered on the running server with prlimit, so
# that it leaves exactly 0, then 1, free fds: a client needs 2 (its socket and its channel).
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
bin=$1
port=$(new_port)
common=(-d "$RDMA_DEVICE" -p "$port" -s 64 -n 2000 --check --timeout 30)
# Under UBSan (the asan presets) the channel case below cannot run: UBSan's vptr check reads a
# vtable through a pipe that it opens itself, and with no fd free it calls the server's valid
# std::system_error an object with an invalid vptr, and stops the program. The plain build runs
# that case; the sanitized one runs the others.
# (Not `ldd | grep -q`: grep can end before ldd has written everything, and with pipefail ldd's
# SIGPIPE then makes the pipeline fail, as it did under load.)
sanitized=0
[[ $(ldd "$bin") == *libubsan* ]] && sanitized=1
"$bin" "${common[@]}" --exit-after $((3 - sanitized)) >"$TEST_TMP/server.out" 2>"$TEST_TMP/server.err" &
server=$!
a_pid=
on_exit() {
    [[ -z $a_pid ]] || kill -KILL "$a_pid" 2>/dev/null || true  # a stopped client A, on failure
    sed 's/^/  server| /' "$TEST_TMP/server.out" "$TEST_TMP/server.err"
}
trap on_exit EXIT
wait_for_listen "$port" 10 "$server"

# Client A connects, paced to last 4 s, then is stopped mid-run: the server holds its channel.
run_cmd client_a "$bin" "${common[@]}" --rate 500 127.0.0.1 &
a=$!
wait_for_line client_a out 'remote address:' 30
a_pid=$(program_pid "$a")
kill -STOP "$a_pid"
# RLIMIT_NOFILE bounds the fd numbers, not their count: a new fd takes the lowest free number.
# So the limits set below are the lowest and second-lowest free numbers.
mapfile -t used < <(find "/proc/$server/fd" -mindepth 1 -printf '%f\n' | sort -n)
free=()
for ((n = 0; ${#free[@]} < 2; n++)); do
    [[ " ${used[*]} " == *" $n "* ]] || free+=("$n")
done
echo "server's fds with client A connected: ${used[*]}; the lowest free: ${free[*]}"

# No fd free: accept4 fails with EMFILE; the client is accepted on the spare fd and closed.
prlimit --pid "$server" --nofile="${free[0]}:"
run_cmd client_b "$bin" "${common[@]}" 127.0.0.1
expect_exit client_b 6
expect_line server out "server: refused a client: out of file descriptors (open-file limit ${free[0]}, ulimit -n; 1 client(s) hold theirs): new clients are served again once some end"

# One fd free: the socket is accepted, and ibv_create_comp_channel finds no fd.
prlimit --pid "$server" --nofile="${free[1]}:"
if ((sanitized == 0)); then
    run_cmd client_c "$bin" "${common[@]}" 127.0.0.1
    expect_exit client_c 6
    expect_match server out "^server: client [0-9]+ \(127\.0\.0\.1:[0-9]+\): rejected: out of file descriptors \(open-file limit ${free[1]}, ulimit -n; 1 client\(s\) hold theirs\): new clients are served again once some end \(ibv_create_comp_channel: Too many open files\)$"
fi

# Client A goes on and completes; its fds are freed, and client D is served.
kill -CONT "$a_pid"
wait "$a"
a_pid=
expect_exit client_a 0
run_cmd client_d "$bin" "${common[@]}" 127.0.0.1
expect_exit client_d 0

rc=0
wait "$server" || rc=$?
echo "$rc" >"$TEST_TMP/server.rc"
expect_exit server 0
expect_match server out "^server: clients: 2 connected, 2 complete, 0 failed, $((1 - sanitized)) rejected, 0 aborted\$"
expect_no_match server err 'destroy failed:|AddressSanitizer|LeakSanitizer|runtime error'
echo PASS
