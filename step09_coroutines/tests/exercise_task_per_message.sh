#!/usr/bin/env bash
# The answer to step09's exercise 3, run: with a Task per received message
# (exercises/task_per_message.patch, built with tests/counting_new.cpp), a server and one client
# run with -n N1, then -n N2. The server's count grows by exactly N2 - N1, one frame per message;
# the client's, unchanged code, not at all.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
bin=$1 n1=100 n2=600

for n in "$n1" "$n2"; do
    port=$(new_port)
    common=(-d "$RDMA_DEVICE" -p "$port" -s 64 -n "$n" --check --timeout 30)
    run_cmd "server_$n" timeout 120 "$bin" "${common[@]}" --exit-after 1 &
    server=$!
    wait_for_listen "$port" 30 "$server"
    run_cmd "client_$n" timeout 120 "$bin" "${common[@]}" 127.0.0.1
    wait "$server"
    expect_exit "client_$n" 0
    expect_exit "server_$n" 0
    expect_line "client_$n" out "client: verified $n of $n replies"
done
for side in server client; do
    a1=$(field "${side}_$n1" err '^allocations: ([0-9]+)$')
    a2=$(field "${side}_$n2" err '^allocations: ([0-9]+)$')
    want=$([[ $side == server ]] && echo $((n2 - n1)) || echo 0)
    echo "$side: $a1 allocations with -n $n1, $a2 with -n $n2"
    (((a2 - a1) == want)) || fail "$side: $((a2 - a1)) more allocations for $((n2 - n1)) more messages, expected $want"
done
echo PASS
