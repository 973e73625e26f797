# testlib.sh: helpers for the tutorial's bash tests. Source it from a test:
#   source "$TESTLIB"
# Every helper fails the test with one line that says what was expected.
set -uo pipefail

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

# run_cmd NAME CMD...: runs CMD, keeping stdout in $TEST_TMP/NAME.out, stderr
# in $TEST_TMP/NAME.err and the exit status in $TEST_TMP/NAME.rc. Echoes both
# streams so that ctest --output-on-failure shows them.
run_cmd() {
    local name=$1 rc=0
    shift
    "$@" >"$TEST_TMP/$name.out" 2>"$TEST_TMP/$name.err" || rc=$?
    echo "$rc" >"$TEST_TMP/$name.rc"
    echo "--- $name: $* (exit $rc)"
    sed 's/^/  out| /' "$TEST_TMP/$name.out"
    sed 's/^/  err| /' "$TEST_TMP/$name.err"
    return 0
}

# expect_exit NAME CODE: the exit status of run NAME was CODE.
expect_exit() {
    local got
    got=$(<"$TEST_TMP/$1.rc")
    [[ $got == "$2" ]] || fail "$1: expected exit status $2, got $got"
}

# expect_line NAME out|err 'exact line': that stream has the line, exactly.
expect_line() {
    grep -qxF -- "$3" "$TEST_TMP/$1.$2" || fail "$1: expected this exact line on std$2: $3"
}

# expect_match NAME out|err REGEX: some line of that stream matches (grep -E).
expect_match() {
    grep -qE -- "$3" "$TEST_TMP/$1.$2" || fail "$1: expected a line on std$2 matching: $3"
}

# expect_no_match NAME out|err REGEX: no line of that stream matches.
expect_no_match() {
    ! grep -qE -- "$3" "$TEST_TMP/$1.$2" || fail "$1: unexpected line on std$2 matching: $3"
}

# field NAME out|err REGEX: prints capture group 1 of the first matching line
# (sed -E syntax), or fails.
field() {
    local v
    v=$(sed -nE "s/$3/\\1/p" "$TEST_TMP/$1.$2" | head -n 1)
    [[ -n $v ]] || fail "$1: no line on std$2 matching: $3"
    echo "$v"
}

# wait_for_listen PORT [SECONDS]: waits until a TCP socket listens on PORT.
# (It asks ss rather than connecting, which would use up the server's accept.)
wait_for_listen() {
    local port=$1 limit=$((${2:-10} * 10)) i
    for ((i = 0; i < limit; i++)); do
        ss -Hltn "sport = :$port" | grep -q . && return 0
        sleep 0.1
    done
    fail "nothing listened on port $port within ${2:-10}s"
}
