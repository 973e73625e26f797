#!/usr/bin/env bash
# Mixed faults during a flood: one client killed mid-run (kill -9), one client that
# sends garbage, one that connects and says nothing. The server reports each, frees
# the victim's resources, and the other clients complete with every message verified.
# (step06's tests/mixed_fault.sh, ported: no expected line names the program, so the same
# script also runs against step06_epoll.)
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
bin=$1
msgs=${2:-1500}
good=${3:-6}
port=$(new_port)
common=(-d "$RDMA_DEVICE" -p "$port" -s 64 -n "$msgs" -r 64 --check --timeout 30)
run_cmd server "$bin" "${common[@]}" --timeout 10 --exit-after $((good + 3)) &
server=$!
wait_for_listen "$port"
pids=()
for ((i = 0; i < good; i++)); do
    run_cmd "client$i" "$bin" "${common[@]}" 127.0.0.1 &
    pids+=($!)
done
# The victim is paced (--rate 100: 8 s for the 800 messages CTest asks for), so that the kill
# below lands mid-run however fast the machine is; unpaced, it can finish before it is killed.
"$bin" "${common[@]}" --rate 100 127.0.0.1 >"$TEST_TMP/victim.out" 2>&1 &
victim=$!
# Garbage: 60 bytes that are not an rc_pingpong message.
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'GET / HTTP/1.1\r\nHost: step09\r\nUser-Agent: garbage-client/1.0\r\n\r\n' >&3
# Silent: connects and sends nothing; the server's handshake timeout rejects it.
exec 4<>"/dev/tcp/127.0.0.1/$port"
# Kill the victim once it is well into its run.
for ((t = 0; t < 300; t++)); do
    [[ $(grep -c . "$TEST_TMP/victim.out" 2>/dev/null) -ge 2 ]] && break
    sleep 0.1
done
sleep 2
kill -9 "$victim"
wait "${pids[@]}"
start=$SECONDS
wait "$server"
echo "server ended $((SECONDS - start)) s after the last good client"
exec 3>&- 4>&-
for ((i = 0; i < good; i++)); do
    expect_exit "client$i" 0
    expect_line "client$i" out "client: verified $msgs of $msgs replies"
done
expect_exit server 0
expect_match server out "^server: clients: $((good + 1)) connected, $good complete, 1 failed, 2 rejected, 0 aborted$"
expect_match server out '^server: client [0-9]+ \(127\.0\.0\.1:[0-9]+\): rejected: .*GET / HTTP/1\.1'
expect_match server out '^server: client [0-9]+ \(127\.0\.0\.1:[0-9]+\): rejected: no handshake within 10 s \(0 bytes received\)$'
expect_match server out "^server: client [0-9]+ \\(127\\.0\\.0\\.1:[0-9]+\\): failed: .*; [0-9]+ received, "
[[ $(grep -c "): complete; $msgs received, $msgs sent, $msgs verified; " "$TEST_TMP/server.out") == "$good" ]] ||
    fail "server: expected $good complete clients"
events=$(field server out '^server: CQ events: received ([0-9]+), acked [0-9]+,.*')
acked=$(field server out '^server: CQ events: received [0-9]+, acked ([0-9]+),.*')
[[ $events == "$acked" ]] || fail "server: events received $events, acked $acked"
echo PASS
