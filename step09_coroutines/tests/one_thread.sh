#!/usr/bin/env bash
# One thread (issue 14): no executor, no poller thread. While a server serves CLIENTS clients
# (default 10, all past their handshake and still exchanging), /proc/PID/task of the server, and
# of one client, holds exactly one entry, sampled several times; then every client completes with
# every reply checked.
#   tests/one_thread.sh BIN [CLIENTS]
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
bin=$1
clients=${2:-10}
port=$(new_port)
# Paced (--rate) so that every client is still running when the last one has connected, however
# slow the lab: 600 messages at 40 per second take 15 s.
n=600
common=(-d "$RDMA_DEVICE" -p "$port" -s 64 -n "$n" --check --timeout 30)
run_cmd server "$bin" "${common[@]}" --exit-after "$clients" &
server_shell=$!
wait_for_listen "$port" 30 "$server_shell"
server=$(program_pid "$server_shell")
pids=()
for ((i = 0; i < clients; i++)); do
    run_cmd "client$i" "$bin" "${common[@]}" --rate 40 127.0.0.1 &
    pids+=($!)
done
for ((i = 0; i < clients; i++)); do wait_for_line "client$i" out '^  remote address: ' 60; done
client0=$(program_pid "${pids[0]}")

# threads PID: the entries of /proc/PID/task, one per thread.
threads() {
    local entries=("/proc/$1/task"/*)
    [[ -e ${entries[0]} ]] || fail "no /proc/$1/task: has process $1 ended?"
    echo "${#entries[@]}"
}
for ((sample = 1; sample <= 5; sample++)); do
    for ((i = 0; i < clients; i++)); do
        expect_running "${pids[i]}" "client $i (sample $sample: the server must still be serving $clients clients)"
    done
    got=$(threads "$server")
    ((got == 1)) || fail "sample $sample: the server (pid $server) runs $got threads, expected 1: $(ls "/proc/$server/task")"
    got=$(threads "$client0")
    ((got == 1)) || fail "sample $sample: client 0 (pid $client0) runs $got threads, expected 1"
    echo "sample $sample: server pid $server and client 0 pid $client0 run 1 thread each, serving $clients clients"
    sleep 0.5
done

wait "${pids[@]}" "$server_shell"
for ((i = 0; i < clients; i++)); do
    expect_exit "client$i" 0
    expect_line "client$i" out "client: verified $n of $n replies"
done
expect_exit server 0
expect_line server out "server: clients: $clients connected, $clients complete, 0 failed, 0 rejected, 0 aborted"
[[ $(grep -c "): complete; $n received, $n sent, $n verified; " "$TEST_TMP/server.out") == "$clients" ]] ||
    fail "server: expected $clients clients with $n verified messages each"
echo "PASS: one thread while serving $clients clients"
