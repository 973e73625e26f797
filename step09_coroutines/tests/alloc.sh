#!/usr/bin/env bash
# Zero heap allocations per message (issue 14). ALLOC_BIN is the program built with a counting
# global operator new (tests/counting_new.cpp), which writes "allocations: N" on stderr at exit.
# A server and three clients (event mode, step09's only one), every reply checked, run with -n N1, then
# again with -n N2: each side must count the same allocations in both runs, so the N2 - N1 extra
# messages allocated nothing (coroutine frames and buffers are made once per connection).
#   tests/alloc.sh ALLOC_BIN [N1 [N2]]   (defaults 1000 and 11000)
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
bin=$1
n1=${2:-1000}
n2=${3:-11000}
sides=(server c1 c2 c3)

# run_round N: one server and its three clients with -n N; every process completes.
run_round() {
    local n=$1 port server c
    port=$(new_port)
    local common=(-d "$RDMA_DEVICE" -p "$port" -s 64 -n "$n" --check --timeout 30)
    run_cmd "server_$n" "$bin" "${common[@]}" --exit-after 3 &
    server=$!
    wait_for_listen "$port" 30 "$server"
    local pids=()
    for c in c1 c2 c3; do
        run_cmd "${c}_$n" "$bin" "${common[@]}" 127.0.0.1 &
        pids+=($!)
    done
    wait "${pids[@]}" "$server"
    for c in c1 c2 c3; do
        expect_exit "${c}_$n" 0
        expect_line "${c}_$n" out "client: verified $n of $n replies"
    done
    expect_exit "server_$n" 0
    expect_line "server_$n" out "server: clients: 3 connected, 3 complete, 0 failed, 0 rejected, 0 aborted"
    for c in "${sides[@]}"; do
        [[ $(grep -c '^allocations: ' "$TEST_TMP/${c}_$n.err") == 1 ]] ||
            fail "${c}_$n: expected one 'allocations: N' line on stderr (is $bin built with tests/counting_new.cpp?)"
    done
}

run_round "$n1"
run_round "$n2"
failed=0
for c in "${sides[@]}"; do
    a1=$(field "${c}_$n1" err '^allocations: ([0-9]+)$')
    a2=$(field "${c}_$n2" err '^allocations: ([0-9]+)$')
    ((a1 > 0)) || fail "$c: counted no allocation at all: is operator new really replaced?"
    extra=$((a2 - a1))
    echo "$c: $a1 allocations with -n $n1, $a2 with -n $n2: $extra more for $((n2 - n1)) more messages"
    if ((extra == 0)); then
        echo "$c: 0 allocations per message"
    else
        echo "FAIL: $c: the $((n2 - n1)) extra messages made $extra allocations; expected 0" >&2
        failed=1
    fi
done
((failed == 0)) || fail "some side allocates per message (see above)"
echo "PASS: 0 allocations per message, server and clients"
