#!/usr/bin/env bash
# A long run (issue 14): N messages (default 10^6) on one connection, client in event mode, every
# reply checked. The per-connection coroutine resumes once or more per message; if a resume nested
# on the stack (no symmetric transfer, as GCC at -O0 may do without care), the stack would grow
# with every message and overflow long before the end. The run must complete, and the stack
# (VmStk of /proc/PID/status), sampled every 2 s, must not grow by more than 128 kB. The asan-rdma
# preset runs it from the ASan build too.
#   tests/long_run.sh BIN [N [SIZE]]
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
bin=$1
n=${2:-1000000}
size=${3:-8}
port=$(new_port)
common=(-d "$RDMA_DEVICE" -p "$port" -s "$size" -n "$n" --check --timeout 30)
start=$(ms_now)
run_cmd server "$bin" "${common[@]}" --exit-after 1 &
server_shell=$!
wait_for_listen "$port" 30 "$server_shell"
declare -A pid=()
pid[server]=$(program_pid "$server_shell")
run_cmd client "$bin" "${common[@]}" 127.0.0.1 &
client_shell=$!
pid[client]=$(program_pid "$client_shell")
wait_for_line client out '^  remote address: ' 60

# stack_kb PID: VmStk of PID in kB, or nothing once it has ended.
stack_kb() {
    awk '$1 == "VmStk:" { print $2 }' "/proc/$1/status" 2>/dev/null
}
declare -A first=() most=()
samples=0
while kill -0 "${pid[client]}" 2>/dev/null; do
    for who in server client; do
        kb=$(stack_kb "${pid[$who]}")
        [[ -n $kb ]] || continue
        [[ -n ${first[$who]:-} ]] || first[$who]=$kb
        ((kb > ${most[$who]:-0})) && most[$who]=$kb
    done
    ((++samples))
    sleep 2
done
wait "$client_shell" "$server_shell"
echo "long run: $n messages of $size bytes in $((($(ms_now) - start) / 1000)) s"
expect_exit client 0
expect_match client out "^$n iters in [0-9.]+ seconds = [0-9.]+ usec/iter\$"
expect_line client out "client: verified $n of $n replies"
expect_exit server 0
expect_line server out "server: clients: 1 connected, 1 complete, 0 failed, 0 rejected, 0 aborted"
expect_match server out "^server: client 1 \\(127\\.0\\.0\\.1:[0-9]+\\): complete; $n received, $n sent, $n verified; "
for who in server client; do
    [[ -n ${first[$who]:-} ]] || fail "$who: its stack was never sampled (the run was too short?)"
    growth=$((most[$who] - first[$who]))
    echo "$who: stack (VmStk) ${first[$who]} kB at the first sample, at most ${most[$who]} kB over $samples samples"
    ((growth <= 128)) || fail "$who: the stack grew by $growth kB during the run: do resumes nest?"
done
echo "PASS: $n messages on one connection, the stack flat"
