#!/usr/bin/env bash
# Every fault once: the responder on host a, the requester on host b; capture on a; counters.
cd /work/wt24
export TESTLIB=/work/wt24/cmake/testlib.sh TUTORIAL_ROOT=/work/wt24 TEST_PORT_BASE=29000 RDMA_REQUIRE_DEVICE=1
source "$TESTLIB"
require_peer
bin=/work/wt24/build/wc_failures
out=/work/wt24/build/s25out-$(uname -r)
mkdir -p "$out"
stats() { rdma statistic show link "$RDMA_DEVICE/1" | tr ' ' '\n' | paste - - | awk 'NR>2 && $2 ~ /^[0-9]+$/'; }
pstats() { "$PEER" run --timeout 30 -- rdma statistic show link "$RDMA_DEVICE/1" | tr ' ' '\n' | paste - - | awk 'NR>2 && $2 ~ /^[0-9]+$/'; }
port=29000
for fault in ${FAULTS:-none peer-gone wrong-gid no-recv no-recv-forever wrong-rkey no-remote-access wrong-lkey short-recv mtu-send mtu-write}; do
    port=$((port + 1))
    stats >"$TEST_TMP/a0"; pstats >"$TEST_TMP/b0"
    start_capture "$fault" >/dev/null
    timeout 60 "$bin" -p "$port" >"$out/$fault.resp" 2>&1 &
    resp=$!
    wait_for_listen "$port" 30 "$resp"
    if [[ $fault == peer-gone ]]; then
        ( for i in $(seq 100); do grep -q "responder: ready" "$out/$fault.resp" && break; sleep 0.1; done; pkill -9 -P $resp wc_failures ) &
    fi
    "$PEER" run --timeout 60 -- "$bin" -p "$port" -f "$fault" "$LAB_ADDR" >"$out/$fault.req" 2>&1
    echo "requester exit $?" >>"$out/$fault.req"
    wait $resp; echo "responder exit $?" >>"$out/$fault.resp"
    stop_capture "$fault" >"$out/$fault.wire" 2>&1
    cp "$TEST_TMP/$fault.pcap" "$out/" 2>/dev/null
    stats >"$TEST_TMP/a1"; pstats >"$TEST_TMP/b1"
    { echo "host a:"; join "$TEST_TMP/a0" "$TEST_TMP/a1" | awk '$3 != $2 { print "  " $1, $3 - $2 }'
      echo "host b:"; join "$TEST_TMP/b0" "$TEST_TMP/b1" | awk '$3 != $2 { print "  " $1, $3 - $2 }'; } >"$out/$fault.counters"
    echo "=== $fault"; cat "$out/$fault.req" "$out/$fault.resp" "$out/$fault.counters"
done
