#!/usr/bin/env bash
# connection_chart: tools/connection-chart on the committed step08 capture
# (docs/captures/wire_step08_connection.txt), which the step08 chapter shows. The chart's arrows
# are the capture's packets, in the same order, in the same direction, with the same opcodes (and
# CM message names, and PSNs); its boxes are each side's trace lines, in order. The same check must
# fail on a chart with one arrow removed, and on one with two arrows swapped.
set -uo pipefail
root=${TUTORIAL_ROOT:?set by CTest}
capture=${CONNECTION_CAPTURE:-$root/docs/captures/wire_step08_connection.txt}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The capture's packets, one a line: "b>a UD_SEND_ONLY ConnectRequest", "a>b ACK 0x2c1a7e" (the PSN).
packets() {
    awk '/^# host b \(/ { b = $4; gsub(/[(),]/, "", b) }
         /^ *[0-9]+ +[0-9.]+  [0-9.]+ -> / {
             dir = ($3 == b) ? "b>a" : "a>b"
             if (match($0, / CM [A-Za-z]+/)) print dir, $7, substr($0, RSTART + 4, RLENGTH - 4)
             else print dir, $7, $9 }' "$1"
}
# The chart's arrows, in the same form.
arrows() {
    sed -nE 's/^  ([ab]) => ([ab]) \[label="([A-Za-z]+) \(([A-Z_]+) to QP 1\).*/\1>\2 \4 \3/p
              s/^  ([ab]) -> ([ab]) \[label="([A-Z_]+) PSN (0x[0-9a-f]+).*/\1>\2 \3 \4/p' "$1"
}
# Each side's trace lines ("b rdma_connect; QP INIT"), and the chart's boxes in the same form.
trace_lines() {
    awk '/^# host a \(/ { s = "a" } /^# host b \(/ { s = "b" } /^# the wire/ { s = "" }
         s != "" && $1 == "after" { t = $0; sub(/^ *after frame [0-9]+ +/, "", t); print s, t }' "$1" |
        sed -E 's/RDMA_CM_EVENT_//; s/; QP none$/; no QP/' | sort -s -k1,1
}
boxes() {
    grep -oE '[ab] r?box [ab] \[label="[^"]*"\]' "$1" |
        sed -E 's/^([ab]) r?box [ab] \[label="(.*)"\]$/\1 \2/; s/\\n(QP|no QP)/; \1/' | sort -s -k1,1
}
# check CHART: the differences between CHART and the capture (none: exit 0).
check() {
    diff <(packets "$capture") <(arrows "$1") >"$tmp/arrows.diff" &&
        diff <(trace_lines "$capture") <(boxes "$1") >"$tmp/boxes.diff"
}

"$root/tools/connection-chart" "$capture" >"$tmp/chart.msc" || fail "tools/connection-chart failed"
count=$(packets "$capture" | wc -l)
((count >= 10)) || fail "the capture has $count packets, fewer than a connection's 10"
if check "$tmp/chart.msc"; then
    echo "the chart's $count arrows are the capture's packets, and its boxes each side's trace lines"
else
    fail "the chart does not match $capture:"
    cat "$tmp/arrows.diff" "$tmp/boxes.diff" 2>/dev/null
fi
# The check can fail: a chart without its fourth arrow, and one with arrows 4 and 5 swapped.
grep -nE '^  [ab] -> [ab] ' "$tmp/chart.msc" | head -2 | cut -d: -f1 >"$tmp/rows"
mapfile -t rows <"$tmp/rows"
sed "${rows[0]}d" "$tmp/chart.msc" >"$tmp/dropped.msc"
check "$tmp/dropped.msc" && fail "a chart with an arrow removed passed the check"
sed -n "${rows[1]}p" "$tmp/chart.msc" >"$tmp/second"
sed -e "${rows[1]}d" -e "$((rows[0] - 1))r $tmp/second" "$tmp/chart.msc" >"$tmp/swapped.msc"
check "$tmp/swapped.msc" && fail "a chart with two arrows swapped passed the check"
# Usage: no argument, and a file that is no capture.
"$root/tools/connection-chart" >/dev/null 2>&1
[[ $? == 2 ]] || fail "tools/connection-chart without an argument did not exit 2"
echo "no packets here" >"$tmp/empty.txt"
"$root/tools/connection-chart" "$tmp/empty.txt" >/dev/null 2>&1
[[ $? == 1 ]] || fail "tools/connection-chart on a file without packets did not exit 1"
((failures == 0)) && echo PASS
exit $((failures > 0))
