#!/usr/bin/env bash
# Resource accounting: every step program that exists runs a short, realistic scenario in the lab
# (a clean run; step04's and step12's servers and those of steps 06, 09 and 10 stopped by
# SIGINT, the latter three in mid-flood),
# and afterwards `rdma res show qp|cq|mr|pd` holds nothing that belonged to those processes.
# The servers of steps 06, 09 and 10 are also checked alive: after 10 clients, a running server
# holds as many QPs, CQs, MRs and PDs as before its first client (step10's: its shared CQ, its
# receive ring's MR and its PD).
# A positive control first checks that the filter does see a live process's QPs.
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
command -v rdma >/dev/null || fail "the rdma tool (iproute2) is missing"
(($# > 0)) || fail "no program given"
opts=(-d "$RDMA_DEVICE" --timeout 20)
# Every process this test starts, one pid a line: their resources must be gone at the end.
# (The scenarios run in parallel subshells, so the list is a file.)
: >"$TEST_TMP/pids"

# start NAME CMD...: starts CMD in the background (directly, so $! is the program itself and
# `rdma res` names its pid; env execs it), with SIGINT at its default (testlib.sh says why),
# output in $TEST_TMP/NAME.out/.err; the pid goes to ${pid[NAME]}.
declare -A pid=()
start() {
    local name=$1
    shift
    env --default-signal=INT "$@" >"$TEST_TMP/$name.out" 2>"$TEST_TMP/$name.err" &
    pid[$name]=$!
    echo "$!" >>"$TEST_TMP/pids"
}

# finish NAME [SECONDS]: waits for NAME (killing it and failing after SECONDS, default 30),
# keeps its status in $TEST_TMP/NAME.rc and shows its output.
finish() {
    local name=$1 limit=${2:-30} rc=0 watchdog
    # The watchdog holds no test output open (ctest waits for that), and takes its sleep along.
    (
        trap 'kill "$nap" 2>/dev/null; exit 0' TERM
        sleep "$limit" &
        nap=$!
        wait "$nap"
        kill -KILL "${pid[$name]}" 2>/dev/null && touch "$TEST_TMP/$name.killed"
    ) >/dev/null 2>&1 &
    watchdog=$!
    wait "${pid[$name]}" || rc=$?
    kill "$watchdog" 2>/dev/null
    wait "$watchdog" 2>/dev/null
    echo "$rc" >"$TEST_TMP/$name.rc"
    echo "--- $name (pid ${pid[$name]}, exit $rc)"
    sed 's/^/  out| /' "$TEST_TMP/$name.out" | tail -n 8
    sed 's/^/  err| /' "$TEST_TMP/$name.err" | tail -n 8
    [[ ! -e $TEST_TMP/$name.killed ]] || fail "$name did not exit within $limit s"
}

# held KIND PID...: the `rdma res show KIND` entries (one JSON object a line) owned by PIDs.
held() {
    local kind=$1 alternatives
    shift
    alternatives=$(IFS='|' && echo "$*")
    rdma -j res show "$kind" | grep -oE '\{[^{}]*\}' | grep -E "\"pid\":($alternatives)[,}]" || true
}

# wait_until_held KIND COUNT PID: waits until PID holds at least COUNT KIND objects (the control),
# up to 30 s. (A deadline, not a count of tries: under TCG one `rdma res show` can take seconds.)
wait_until_held() {
    local deadline=$((SECONDS + 30))
    while ((SECONDS < deadline)); do
        (($(held "$1" "$3" | wc -l) >= $2)) && return 0
        sleep 0.1
    done
    fail "positive control: pid $3 never showed $2 $1(s) in rdma res show $1"
}

# counts PID: how many QPs, CQs, MRs and PDs PID holds now, as "qp N cq N mr N pd N".
counts() {
    local kind line=""
    for kind in qp cq mr pd; do
        line+="$kind $(held "$kind" "$1" | wc -l) "
    done
    echo "${line% }"
}

# live_server PROG: a running server gives back what each client took. The counts of its QPs, CQs,
# MRs and PDs are taken before the first client, and again after 10 clients have ended, while it
# still runs: they must be the same. (After the process has exited, the kernel frees everything
# anyway: only a live server shows a per-client leak.) Then SIGINT: it exits 0.
live_server() {
    local prog=$1 s=${1##*/} port before after i name began=$SECONDS
    s=${s%%_*}  # step06, step09, step10
    port=$(new_port)
    local common=("${opts[@]}" -p "$port" -s 64 -n 100 -r 16) events=(-e)
    [[ $s == step09 ]] && events=()  # step09's client always sleeps on events, and has no -e
    start "$s-live" "$prog" "${common[@]}"
    wait_for_listen "$port" 30
    before=$(counts "${pid[$s-live]}")
    echo "$s-live (pid ${pid[$s-live]}), before the first client: $before"
    # The first client is paced (100 messages at 10 a second), so that the server is seen holding
    # its QP: the positive control that the pid filter sees this server's objects.
    start "$s-live-c1" "$prog" "${common[@]}" "${events[@]}" --rate 10 127.0.0.1
    local during deadline=$((SECONDS + 30))
    while during=$(counts "${pid[$s-live]}") && [[ $during == "$before" ]] && ((SECONDS < deadline)); do
        sleep 0.1
    done
    echo "$s-live, during client 1: $during ($((SECONDS - began)) s)"
    [[ $during != "$before" ]] ||
        fail "positive control: the $s server held no more than $before while client 1 ran"
    rdma res show pd | sed "s/^/$s-live: rdma res show pd| /"
    finish "$s-live-c1"
    expect_exit "$s-live-c1" 0
    # Then nine at once.
    for ((i = 2; i <= 10; i++)); do
        start "$s-live-c$i" "$prog" "${common[@]}" "${events[@]}" 127.0.0.1
    done
    for ((i = 2; i <= 10; i++)); do
        finish "$s-live-c$i"
        expect_exit "$s-live-c$i" 0
    done
    # The server prints a client's line before it destroys the client's objects: wait for the
    # 10 lines, then give it up to 5 s to get back to where it started.
    deadline=$((SECONDS + 30))
    while ((SECONDS < deadline)); do
        (($(grep -c '^server: client [0-9]* (.*): complete; ' "$TEST_TMP/$s-live.out") >= 10)) && break
        sleep 0.1
    done
    deadline=$((SECONDS + 5))
    while after=$(counts "${pid[$s-live]}") && [[ $after != "$before" ]] && ((SECONDS < deadline)); do
        sleep 0.1
    done
    echo "$s-live, after 10 clients, still running: $after ($((SECONDS - began)) s)"
    expect_running "${pid[$s-live]}" "the $s server"
    [[ $after == "$before" ]] ||
        fail "$s-live: the running server holds $after after 10 clients ended, $before before the first"
    kill -INT "${pid[$s-live]}"
    name=$s-live
    finish "$name"
    expect_exit "$name" 0
    expect_line "$name" out "server: clients: 10 connected, 10 complete, 0 failed, 0 rejected, 0 aborted"
}

run_pair() {  # run_pair PROG EXTRA...: a server and a client, both must exit 0
    local prog=$1 name=${1##*/} port
    shift
    port=$(new_port)
    start "$name-server" "$prog" "${opts[@]}" -p "$port" "$@"
    wait_for_listen "$port" 30
    start "$name-client" "$prog" "${opts[@]}" -p "$port" "$@" 127.0.0.1
    finish "$name-client"
    finish "$name-server"
    expect_exit "$name-client" 0
    expect_exit "$name-server" 0
}

# scenario PROG: one step's scenario; it runs in its own subshell, in parallel with the others
# (the lab is TCG-emulated: one after the other would take minutes).
scenario() {
    local prog=$1 name=${1##*/} port client rc
    case $name in
        step01_devices | step02_resources)
            start "$name" "$prog" -d "$RDMA_DEVICE"
            finish "$name"
            expect_exit "$name" 0
            ;;
        step03_connect)
            run_pair "$prog"
            ;;
        step04_pingpong)
            run_pair "$prog" -n 20
            # A server waiting for its client holds its QP (the control), then gets SIGINT.
            port=$(new_port)
            start step04-sigint "$prog" "${opts[@]}" -p "$port"
            wait_for_listen "$port" 30
            wait_until_held qp 1 "${pid[step04-sigint]}"
            kill -INT "${pid[step04-sigint]}"
            finish step04-sigint
            expect_exit step04-sigint 130
            ;;
        step05_endpoint)
            run_pair "$prog" -n 20
            ;;
        step07_bandwidth)
            run_pair "$prog" -n 200 -s 4096 -q 2
            ;;
        step12_ud)
            run_pair "$prog" --handshake -n 20
            # A UD server (no TCP) and one client of its own, by QP number; then the server, which
            # runs until a signal, gets SIGINT and exits 130.
            start step12-server "$prog" -d "$RDMA_DEVICE"
            wait_for_line step12-server out '^server: UD QP [0-9]+ ' 30
            local qpn
            qpn=$(field step12-server out '^server: UD QP ([0-9]+) .*')
            start step12-client "$prog" "${opts[@]}" -n 20 127.0.0.1 "$qpn"
            finish step12-client
            expect_exit step12-client 0
            wait_until_held qp 1 "${pid[step12-server]}"
            kill -INT "${pid[step12-server]}"
            finish step12-server
            expect_exit step12-server 130
            expect_match step12-server out '^server: [0-9]+ messages answered, 1 clients finished, 1 address handles; '
            ;;
        step11_atomics)
            # A live server gives back each client's QP and memory window: its counts before the
            # first client and after five sessions (a read-write client stopped by SIGTERM, the
            # control that holds a QP; fetch-add; cas; the window's two connections) are the same.
            # Then SIGINT: it exits 0.
            port=$(new_port)
            local before after deadline
            start step11-server "$prog" "${opts[@]}" -p "$port"
            wait_for_listen "$port" 30
            before=$(counts "${pid[step11-server]}")
            start step11-rw "$prog" "${opts[@]}" -p "$port" --op read-write -n 100000000 127.0.0.1
            wait_until_held qp 1 "${pid[step11-server]}"
            # Stopped once it runs its loop (its address lines printed), as step11_ops stops one.
            wait_for_line step11-rw out "remote address" 30
            sleep 0.5
            kill -TERM "${pid[step11-rw]}"
            finish step11-rw 60
            expect_exit step11-rw 130
            for op in fetch-add cas window; do
                start "step11-$op" "$prog" "${opts[@]}" -p "$port" --op "$op" -n 100 127.0.0.1
                finish "step11-$op"
                expect_exit "step11-$op" 0
            done
            wait_for_line step11-server out '^server: client 5 ' 30
            deadline=$((SECONDS + 5))
            while after=$(counts "${pid[step11-server]}") && [[ $after != "$before" ]] && ((SECONDS < deadline)); do
                sleep 0.1
            done
            echo "step11-server: before the first client: $before; after five sessions: $after"
            [[ $after == "$before" ]] || fail "step11's server holds $after after its clients, $before before"
            kill -INT "${pid[step11-server]}"
            finish step11-server
            expect_exit step11-server 0
            expect_line step11-server out "server: windows: 2 bound, 1 invalidated; 0 stale completions"
            ;;
        step06_epoll | step09_coroutines | step10_srq)
            live_server "$prog"
            # A server with two clients in mid-flood gets SIGINT: it aborts them, tears down and
            # exits 0; then the clients get SIGINT too. The clients sleep on events (step06's -e;
            # step09's client has no other mode) and are paced (--rate), so that the emulated CPUs
            # stay responsive. step09 runs the same scenario: its server cancels its coroutines,
            # then destroys the verbs objects; so does step10's, for connections on one CQ and SRQ.
            local s=${name%%_*}  # step06, step09, step10
            local events=(-e)
            [[ $s == step09 ]] && events=()
            port=$(new_port)
            local flood=("${opts[@]}" -p "$port" -s 64 -n 1000000 -r 64)
            start "$s-server" "$prog" "${flood[@]}"
            wait_for_listen "$port" 30
            start "$s-client1" "$prog" "${flood[@]}" "${events[@]}" --rate 2000 127.0.0.1
            start "$s-client2" "$prog" "${flood[@]}" "${events[@]}" --rate 2000 127.0.0.1
            wait_until_held qp 2 "${pid[$s-server]}"
            sleep 1
            kill -INT "${pid[$s-server]}"
            finish "$s-server"
            expect_exit "$s-server" 0
            expect_match "$s-server" out '^server: SIGINT received: stop accepting, abort 2 in-flight client\(s\)$'
            for client in "$s-client1" "$s-client2"; do
                kill -INT "${pid[$client]}" 2>/dev/null
                finish "$client"
                rc=$(<"$TEST_TMP/$client.rc")
                # 130 when SIGINT came first; 6 (the server closed the connection) or 1 (QP error)
                # when it saw the server go.
                [[ $rc == 130 || $rc == 6 || $rc == 1 ]] || fail "$client: expected exit 130, 6 or 1, got $rc"
            done
            ;;
        *)
            fail "no scenario for $name: add one to tests/no_leftover_resources.sh"
            ;;
    esac
}

started=$SECONDS
failed=0
# run_parallel PROG...: the scenarios of PROGs at once; their logs in order.
run_parallel() {
    local prog rc
    local -A scenario_pid=()
    for prog in "$@"; do
        scenario "$prog" >"$TEST_TMP/scenario-${prog##*/}.log" 2>&1 &
        scenario_pid[$prog]=$!
    done
    for prog in "$@"; do
        rc=0
        wait "${scenario_pid[$prog]}" || rc=$?
        echo "=== ${prog##*/}: $( ((rc == 0)) && echo ok || echo "FAILED (exit $rc)") ($((SECONDS - started)) s)"
        cat "$TEST_TMP/scenario-${prog##*/}.log"
        ((rc == 0)) || failed=1
    done
}
# The short runs together; then step06's flood alone, step09's alone and step10's alone: each
# keeps the emulated CPUs busy.
light=() heavy=()
for prog in "$@"; do
    case ${prog##*/} in
        step06_epoll | step09_coroutines | step10_srq) heavy+=("$prog") ;;
        *) light+=("$prog") ;;
    esac
done
((${#light[@]} == 0)) || run_parallel "${light[@]}"
for prog in "${heavy[@]}"; do run_parallel "$prog"; done
echo "scenarios took $((SECONDS - started)) s"
((failed == 0)) || fail "a scenario failed (see above)"
mapfile -t pids <"$TEST_TMP/pids"

# Every process has been reaped; give the provider a moment for deferred cleanup, then nothing
# of theirs may remain.
for kind in qp cq mr pd; do
    for ((i = 0; i < 50; i++)); do
        [[ -z $(held "$kind" "${pids[@]}") ]] && break
        sleep 0.1
    done
    left=$(held "$kind" "${pids[@]}")
    [[ -z $left ]] || fail "rdma res show $kind still lists objects of exited test processes: $left"
done
expect_no_match_all() {
    local f
    for f in "$TEST_TMP"/*.err; do
        ! grep -qE 'destroy failed:|AddressSanitizer|LeakSanitizer|runtime error' "$f" ||
            fail "${f##*/}: $(grep -E 'destroy failed:|Sanitizer|runtime error' "$f" | head -n 1)"
    done
}
expect_no_match_all
echo "PASS: ${#pids[@]} processes, no QP, CQ, MR or PD left behind ($((SECONDS - started)) s)"
