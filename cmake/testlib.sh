# shellcheck shell=bash
# testlib.sh: helpers for the tutorial's bash tests. Source it from a test:
#   source "$TESTLIB"
# Every helper fails the test with one line that says what was expected.
set -uo pipefail

# A program that a test stops with SIGINT (kill -INT) and starts in the background must be
# started through `env --default-signal=INT` (coreutils 9), as `env --default-signal=INT PROG &`
# or `run_cmd NAME env --default-signal=INT PROG &`: a shell without job control starts
# background jobs with SIGINT ignored, and the programs keep an ignored SIGINT ignored, as a
# program started under nohup must.

TEST_TMP=$(mktemp -d "${TMPDIR:-/tmp}/rdmatest.XXXXXX")
trap 'rm -rf "$TEST_TMP"; kill $(jobs -p) 2>/dev/null || true' EXIT

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# Skip (exit 77) when no RDMA device is present, unless RDMA_REQUIRE_DEVICE=1,
# which turns the skip into a failure (the project's test command sets it).
require_device() {
    if [[ -z ${RDMA_DEVICE:-} ]]; then
        local d
        for d in /sys/class/infiniband/*; do
            [[ -e $d ]] && RDMA_DEVICE=${d##*/} && break
        done
    fi
    if [[ -z ${RDMA_DEVICE:-} ]]; then
        if [[ ${RDMA_REQUIRE_DEVICE:-0} == 1 ]]; then
            fail "no RDMA device, and RDMA_REQUIRE_DEVICE=1 forbids skipping"
        fi
        echo "SKIP: no RDMA device; run the rdma tests in the lab: lab/softroce run -- ctest -L rdma"
        exit 77
    fi
    export RDMA_DEVICE
}

# require_kernel MAJOR.MINOR: the test belongs to one kernel (its label kernel_MAJOR.MINOR keeps it
# out of the other kernel's pass, docs/maintainers.md). On another kernel it skips (exit 77), or
# fails when RDMA_REQUIRE_DEVICE=1: then a label is missing or wrong.
require_kernel() {
    local running
    running=$(uname -r | grep -oE '^[0-9]+\.[0-9]+')
    [[ $running == "$1" ]] && return 0
    if [[ ${RDMA_REQUIRE_DEVICE:-0} == 1 ]]; then
        fail "this test belongs to Linux $1 (label kernel_$1), but the lab runs Linux $running: check its label"
    fi
    echo "SKIP: this test belongs to Linux $1; this is Linux $running"
    exit 77
}

# The helpers below read a stream with bash's own mapfile and [[ ]], not grep or sed: in the
# lab's emulated VM each process a helper starts costs about 0.1 s, and a test calls dozens. A
# stream of more than _big lines goes to grep and sed instead (bash compiles a regex per line).
_big=2000

# _lines NAME out|err: the stream's lines into the array _L (none when there is no such file).
_lines() {
    _L=()
    [[ -r $TEST_TMP/$1.$2 ]] && mapfile -t _L <"$TEST_TMP/$1.$2"
    return 0
}

# run_cmd NAME CMD...: runs CMD, keeping stdout in $TEST_TMP/NAME.out, stderr
# in $TEST_TMP/NAME.err and the exit status in $TEST_TMP/NAME.rc. Echoes both
# streams so that ctest --output-on-failure shows them.
run_cmd() {
    local name=$1 rc=0 stream
    shift
    "$@" >"$TEST_TMP/$name.out" 2>"$TEST_TMP/$name.err" || rc=$?
    echo "$rc" >"$TEST_TMP/$name.rc"
    echo "--- $name: $* (exit $rc)"
    for stream in out err; do
        _lines "$name" $stream
        ((${#_L[@]} == 0)) || printf "  $stream| %s\n" "${_L[@]}"
    done
    if [[ ! -s $TEST_TMP/$name.out && ! -s $TEST_TMP/$name.err ]]; then
        echo "  (no output on either stream)"
    fi
    return 0
}

# expect_exit NAME CODE: the exit status of run NAME was CODE.
expect_exit() {
    local got=
    read -r got <"$TEST_TMP/$1.rc"
    [[ $got == "$2" ]] || fail "$1: expected exit status $2, got $got"
}

# _has MODE NAME out|err PATTERN: some line of the stream equals PATTERN (MODE line, as
# grep -xF) or matches it (MODE re, as grep -E).
_has() {
    local l
    _lines "$2" "$3"
    if ((${#_L[@]} > _big)); then
        if [[ $1 == line ]]; then grep -qxF -- "$4" "$TEST_TMP/$2.$3"; else grep -qE -- "$4" "$TEST_TMP/$2.$3"; fi
        return
    fi
    for l in "${_L[@]}"; do
        if [[ $1 == line ]]; then [[ $l == "$4" ]] && return 0; else [[ $l =~ $4 ]] && return 0; fi
    done
    return 1
}

# expect_line NAME out|err 'exact line': that stream has the line, exactly.
expect_line() {
    _has line "$1" "$2" "$3" || fail "$1: expected this exact line on std$2: $3"
}

# expect_match NAME out|err REGEX: some line of that stream matches (grep -E).
expect_match() {
    _has re "$1" "$2" "$3" || fail "$1: expected a line on std$2 matching: $3"
}

# expect_no_match NAME out|err REGEX: no line of that stream matches.
expect_no_match() {
    ! _has re "$1" "$2" "$3" || fail "$1: unexpected line on std$2 matching: $3"
}

# field NAME out|err REGEX: prints capture group 1 of the first matching line
# (sed -E syntax: the line with the match replaced by group 1), or fails.
field() {
    local l v=
    _lines "$1" "$2"
    if ((${#_L[@]} > _big)); then
        v=$(sed -nE "s/$3/\\1/p" "$TEST_TMP/$1.$2" | head -n 1)
    else
        for l in "${_L[@]}"; do
            if [[ $l =~ $3 ]]; then
                v=${l%%"${BASH_REMATCH[0]}"*}${BASH_REMATCH[1]}${l#*"${BASH_REMATCH[0]}"}
                break
            fi
        done
    fi
    [[ -n $v ]] || fail "$1: no line on std$2 matching: $3"
    echo "$v"
}

# wait_for_listen PORT [SECONDS [PID]]: waits until a TCP socket listens on PORT. With PID (as
# from `run_cmd NAME CMD... &`), fails at once when that process has ended without listening.
# (It asks ss rather than connecting, which would use up the server's accept.)
wait_for_listen() {
    local port=$1 limit=$((${2:-10} * 10)) pid=${3:-} i
    for ((i = 0; i < limit; i++)); do
        ss -Hltn "sport = :$port" | grep -q . && return 0
        if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
            fail "the server ended without listening on port $port"
        fi
        sleep 0.1
    done
    fail "nothing listened on port $port within ${2:-10}s"
}

# new_port: prints a TCP port that belongs to this test alone. ctest gives each device test its
# own block of 200 ports (TEST_PORT_BASE, set in cmake/RdmaTutorial.cmake), so that tests that
# run at once never meet on a port; each call takes the next PORT_STRIDE (10) of the block, of
# which the test may count up by PORT_STRIDE - 1 at most (port + 1, ...). Works in $(...) and in
# parallel subshells.
new_port() {
    local base=${TEST_PORT_BASE:-} stride=${PORT_STRIDE:-10} k
    if [[ -z $base ]]; then  # run by hand, outside ctest: a random block
        [[ -e $TEST_TMP/port-base ]] || echo $((10000 + RANDOM % 100 * 200)) >"$TEST_TMP/port-base"
        base=$(<"$TEST_TMP/port-base")
    fi
    for ((k = 0; k < 200 / stride; k++)); do
        mkdir "$TEST_TMP/port-claim.$k" 2>/dev/null && echo $((base + stride * k)) && return 0
    done
    fail "new_port: a test has $((200 / stride)) port blocks of $stride at most"
}

# ms_now: a clock in milliseconds, for timing a step of a test.
ms_now() {
    echo $(($(date +%s%N) / 1000000))
}

# expect_within MS SECONDS WHAT: at most SECONDS have passed since the ms_now reading MS; prints
# the time taken.
expect_within() {
    local ms=$(($(ms_now) - $1)) took
    took="$((ms / 1000)).$((ms % 1000 / 100))"
    ((ms <= $2 * 1000)) || fail "$3 took ${took}s, more than $2s"
    echo "$3: ${took}s (bound $2s)"
}

# wait_for_line NAME out|err REGEX SECONDS: waits until a line of that stream matches (a run
# started with `run_cmd NAME ... &`); fails after SECONDS.
wait_for_line() {
    local limit=$(($4 * 10)) i
    for ((i = 0; i < limit; i++)); do
        grep -qE -- "$3" "$TEST_TMP/$1.$2" 2>/dev/null && return 0
        sleep 0.1
    done
    fail "$1: no line on std$2 matching '$3' within $4s"
}

# sent_packets: how many packets this host's RDMA device has sent on port 1 (the rxe hardware
# counter sent_pkts, from `rdma statistic`). Every test's traffic counts: use it only in a test
# that runs alone (SERIAL in its CMakeLists.txt).
sent_packets() {
    local n
    n=$(rdma statistic show link "$RDMA_DEVICE/1" 2>/dev/null | grep -oE 'sent_pkts [0-9]+' | cut -d' ' -f2)
    [[ -n $n ]] || fail "rdma statistic shows no sent_pkts counter for $RDMA_DEVICE/1"
    echo "$n"
}

# wait_for_packets SINCE COUNT SECONDS: waits until the device has sent COUNT more packets than
# the sent_packets reading SINCE: the programs' messages are flowing. Fails after SECONDS.
wait_for_packets() {
    local limit=$(($3 * 10)) i now
    for ((i = 0; i < limit; i++)); do
        now=$(sent_packets)
        ((now - $1 >= $2)) && { echo "traffic: $((now - $1)) packets sent"; return 0; }
        sleep 0.1
    done
    fail "fewer than $2 packets sent within $3s: the messages are not flowing"
}

# program_pid PID: the program that `run_cmd NAME CMD... &` runs (PID is $!, the subshell,
# whose only child is CMD), for signalling it. Waits up to 10 s for it to start.
program_pid() {
    local i child
    for ((i = 0; i < 100; i++)); do
        child=$(pgrep -P "$1" | head -n 1)
        [[ -n $child ]] && echo "$child" && return 0
        sleep 0.1
    done
    fail "process $1 started no program within 10s"
}

# expect_running PID WHAT: the process has not ended.
expect_running() {
    kill -0 "$1" 2>/dev/null || fail "$2 has ended, but it should still be running"
}

# tcp_attempt_fails: how many TCP connects have failed in this network namespace (a refused
# one counts), from /proc/net/snmp. Compare two readings to see a client retrying.
tcp_attempt_fails() {
    awk '$1 == "Tcp:" { if (!col) { for (i = 2; i <= NF; i++) if ($i == "AttemptFails") col = i }
                        else print $col }' /proc/net/snmp
}

# wait_for_refused SINCE COUNT SECONDS: waits until COUNT more connects have failed than the
# tcp_attempt_fails reading SINCE: a client is retrying a port where nothing listens.
wait_for_refused() {
    local limit=$(($3 * 10)) i
    for ((i = 0; i < limit; i++)); do
        (($(tcp_attempt_fails) - $1 >= $2)) && return 0
        sleep 0.1
    done
    fail "fewer than $2 refused connects within $3s: is the client retrying?"
}

# expect_refused_for SECONDS MIN: sleeps SECONDS and checks that meanwhile at least MIN TCP
# connects failed: clients still retrying a port where nothing listens. Prints the count.
expect_refused_for() {
    local since
    since=$(tcp_attempt_fails)
    sleep "$1"
    local refused=$(($(tcp_attempt_fails) - since))
    ((refused >= $2)) || fail "only $refused refused connects in $1s (expected at least $2): is the client retrying?"
    echo "refused connects in $1s while nothing listened: $refused"
}

# wait_for_accepted PORT SECONDS: waits until a connection to PORT exists and the server has
# accepted it (no listening socket on PORT has one waiting in its queue).
wait_for_accepted() {
    local limit=$(($2 * 10)) i
    for ((i = 0; i < limit; i++)); do
        if ss -Htn state established "sport = :$1" | grep -q . &&
            ! ss -Hltn "sport = :$1" | awk '$2 != 0 { found = 1 } END { exit !found }'; then
            return 0
        fi
        sleep 0.1
    done
    fail "no accepted connection on port $1 within $2s"
}

# expect_time_wait PORT SECONDS: within SECONDS, a socket bound to local port PORT is in
# TIME-WAIT (a connection the server side closed first): a server restarted now must bind
# with SO_REUSEADDR.
expect_time_wait() {
    local limit=$(($2 * 10)) i
    for ((i = 0; i < limit; i++)); do
        ss -Htn state time-wait "sport = :$1" | grep -q . && return 0
        sleep 0.1
    done
    fail "no socket on port $1 in TIME-WAIT within $2s"
}

# expect_bind_blocked PORT: a socket that binds PORT without SO_REUSEADDR gets EADDRINUSE (it
# tries [::] with IPv6 only off, which conflicts with IPv4 and IPv6 sockets alike): the port's
# TIME-WAIT really holds it, so a server that binds it now shows that it sets SO_REUSEADDR.
expect_bind_blocked() {
    local rc=0
    /usr/bin/python3 -c '
import errno, socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
try:
    s.bind(("::", int(sys.argv[1])))
except OSError as e:
    sys.exit(0 if e.errno == errno.EADDRINUSE else 2)
sys.exit(1)' "$1" || rc=$?
    case $rc in
        0) echo "port $1: a bind without SO_REUSEADDR fails with EADDRINUSE" ;;
        1) fail "port $1: a bind without SO_REUSEADDR succeeded: nothing holds the port" ;;
        *) fail "port $1: the bind check failed (exit $rc)" ;;
    esac
}

# --- The two-host lab (lab/softroce run --hosts 2): tests with the label "wire" ---------------

# require_peer: a device here and a second host to run programs on, through lab/peer; sets PEER
# (lab/peer's path). Skips (exit 77) elsewhere, unless RDMA_REQUIRE_DEVICE=1 (then it fails).
require_peer() {
    require_device
    if [[ -z ${LAB_PEER_ADDR:-} || -z ${LAB_ADDR:-} || -z ${LAB_CTL:-} ]]; then
        if [[ ${RDMA_REQUIRE_DEVICE:-0} == 1 ]]; then
            fail "no second host, and RDMA_REQUIRE_DEVICE=1 forbids skipping: run the wire tests under lab/softroce run --hosts 2"
        fi
        echo "SKIP: no second host; run the wire tests in the two-host lab: lab/softroce run --hosts 2 -- ctest -L wire"
        exit 77
    fi
    # shellcheck disable=SC2034 # for the tests that source this file
    PEER=${TUTORIAL_ROOT:?}/lab/peer
}

# held_by PID: the QPs, CQs, MRs and PDs that process PID holds in `rdma res show`, as
# "qp N cq N mr N pd N".
held_by() {
    local kind out="" json
    for kind in qp cq mr pd; do
        json=$(rdma -j res show "$kind") || fail "rdma res show $kind failed"
        out+="$kind $(grep -oE '\{[^{}]*\}' <<<"$json" | grep -cE "\"pid\":$1[,}]") "
    done
    echo "${out% }"
}

# wait_for_held PID HELD SECONDS: waits until held_by PID prints HELD; fails after SECONDS.
wait_for_held() {
    local limit=$(($3 * 10)) i
    for ((i = 0; i < limit; i++)); do
        [[ $(held_by "$1") == "$2" ]] && return 0
        sleep 0.1
    done
    fail "process $1 still holds $(held_by "$1") after ${3}s, not $2"
}

# wait_for_peer_line JOB REGEX SECONDS: waits until the standard output of JOB, a job that
# lab/peer start runs on the peer, has a line matching REGEX; fails after SECONDS.
wait_for_peer_line() {
    local limit=$(($3 * 5)) i
    for ((i = 0; i < limit; i++)); do
        # Not grep -q: it would stop reading, and lab/peer's SIGPIPE would fail the pipeline.
        "$PEER" output "$1" | grep -E -- "$2" >/dev/null && return 0
        sleep 0.2
    done
    fail "peer job $1: no line matching '$2' within ${3}s"
}

# serve NAME CMD...: the next port (port + 1), and CMD -p PORT on this host in the background,
# as run NAME, under a 120 s timeout; sets server (run_cmd's subshell) once it listens.
serve() {
    local name=$1
    shift
    port=$((port + 1))
    run_cmd "$name" timeout 120 "$@" -p "$port" &
    server=$!
    wait_for_listen "$port" 30 "$server"
}

# start_capture NAME [FILTER]: tcpdump records this host's wire NIC (eth0; RoCE v2 is UDP port
# 4791) into $TEST_TMP/NAME.pcap, from when it says it is listening. FILTER (a pcap filter that
# narrows "udp port 4791") keeps only the packets a test reads: in the emulated VM, tshark
# takes milliseconds a packet to decode.
start_capture() {
    # --immediate-mode: each packet as it comes; without it, tcpdump keeps them in the kernel's
    # buffer for up to a second, and a stop before then loses them all.
    # -B: an 8 MiB capture buffer, so that a busy one-vCPU host loses no packet to it.
    tcpdump -i eth0 --immediate-mode -B 8192 -U -n -w "$TEST_TMP/$1.pcap" "udp port 4791${2:+ and ($2)}" 2>"$TEST_TMP/$1.tcpdump" &
    echo $! >"$TEST_TMP/$1.tcpdump-pid"
    local i
    for ((i = 0; i < 100; i++)); do
        grep -q 'listening on' "$TEST_TMP/$1.tcpdump" && return 0
        sleep 0.1
    done
    fail "tcpdump did not start within 10s: $(cat "$TEST_TMP/$1.tcpdump")"
}

# stop_capture NAME: stops the capture (after the last frames' ACKs), decodes it with
# tools/decode-wire, prints the table and keeps the --tsv lines in $TEST_TMP/NAME.wire.
stop_capture() {
    local pid
    sleep 0.5
    pid=$(<"$TEST_TMP/$1.tcpdump-pid")
    kill -INT "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    # tcpdump's own count, e.g. "0 packets dropped by kernel": capture_dropped reads it.
    grep -E 'packets (captured|received by filter|dropped by kernel)' "$TEST_TMP/$1.tcpdump" | sed 's/^/  tcpdump| /'
    echo "--- the wire, $1 (tools/decode-wire):"
    # One tshark pass for both (its start alone takes seconds in the emulated VM).
    "$TUTORIAL_ROOT/tools/decode-wire" --tsv-out "$TEST_TMP/$1.wire" "$TEST_TMP/$1.pcap" \
        >"$TEST_TMP/$1.table" || fail "$1: the capture cannot be decoded"
    sed 's/^/  wire| /' "$TEST_TMP/$1.table"
    ! grep -q $'\tmalformed\t' "$TEST_TMP/$1.wire" || fail "$1: tshark marks a packet as malformed"
}

# capture_dropped NAME: how many packets the kernel dropped before tcpdump read them (0 when
# the capture is whole), as tcpdump reported when stop_capture stopped it.
capture_dropped() {
    local n
    n=$(sed -nE 's/^([0-9]+) packets? dropped by kernel$/\1/p' "$TEST_TMP/$1.tcpdump")
    echo "${n:-0}"
}

# wire_opcodes NAME [FROM_ADDR]: the capture's opcode names, space-separated, in order (only
# those sent from FROM_ADDR, when given), a packet sent again (the same source, opcode and PSN:
# a retransmission) counted once. Match the result with a pattern: where the ACKs fall among
# the other side's packets changes from run to run.
wire_opcodes() {
    awk -F'\t' -v from="${2:-}" '(from == "" || $3 == from) && !seen[$3 " " $6 " " $8]++ {
                                      printf "%s%s", sep, $6; sep = " " }
                                  END { print "" }' "$TEST_TMP/$1.wire"
}

# expect_opcodes NAME FROM_ADDR REGEX WHAT: the opcodes sent from FROM_ADDR match REGEX (the
# whole sequence, grep -E).
expect_opcodes() {
    local seq
    seq=$(wire_opcodes "$1" "$2")
    grep -qxE -- "$3" <<<"$seq" || fail "$1: $4: the opcodes from $2 were \"$seq\", not /$3/"
    echo "$1: $4: $seq"
}
