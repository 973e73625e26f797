#!/usr/bin/env bash
# plot_latency: bench/plot-latency on small fixtures (bench/testdata): a real ib_send_lat -H
# capture and a hand-written one-number file. Checks the PNG (signature, IHDR width and height),
# the parsed sample counts and percentiles, and the failures: no samples, a zero latency, usage.
set -uo pipefail
root=${TUTORIAL_ROOT:?set by CTest}
plot=$root/bench/plot-latency
data=$root/bench/testdata
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# png_size FILE: prints "WIDTH HEIGHT" when FILE starts with the PNG signature and an IHDR chunk.
png_size() {
    local sig ihdr
    sig=$(od -An -tx1 -N8 "$1" | tr -d ' \n')
    ihdr=$(od -An -c -j12 -N4 "$1" | tr -d ' \n')
    [[ $sig == 89504e470d0a1a0a && $ihdr == IHDR ]] || return 1
    od -An -tu1 -j16 -N8 "$1" |
        awk '{ print ($1 * 16777216 + $2 * 65536 + $3 * 256 + $4), ($5 * 16777216 + $6 * 65536 + $7 * 256 + $8) }'
}

# 1. Both fixtures, a given size.
out=$("$plot" --size 640,400 "$tmp/two.png" "$data/perftest_H_200.lat" \
      "$data/step06_event_short.lat" 2>&1)
rc=$?
echo "$out"
((rc == 0)) || fail "plot of the two fixtures exited $rc"
[[ $(png_size "$tmp/two.png") == "640 400" ]] ||
    fail "two.png is not a 640x400 PNG: $(file "$tmp/two.png" 2>&1)"
grep -qF '"perftest_H_200", 197 samples, median 3989 us, p99 8901 us' <<<"$out" ||
    fail "perftest fixture: expected 197 samples, median 3989, p99 8901"
grep -qF '"step06 event mode (fixture)", 12 samples, median 1020 us, p99 2500 us' <<<"$out" ||
    fail "one-number fixture: expected its label, 12 samples, median 1020, p99 2500"
grep -qF "wrote $tmp/two.png (640x400 pixels, 2 curve(s))" <<<"$out" || fail "no 'wrote' line"

# 2. The default size.
"$plot" "$tmp/one.png" "$data/step06_event_short.lat" >/dev/null || fail "default-size plot failed"
[[ $(png_size "$tmp/one.png") == "900 600" ]] || fail "one.png is not a 900x600 PNG"

# 3. A file without samples: perftest's banner only. Exit 1, naming the file; no PNG.
grep -vE '^[0-9]+, ' "$data/perftest_H_200.lat" >"$tmp/banner-only.lat"
out=$("$plot" "$tmp/none.png" "$data/step06_event_short.lat" "$tmp/banner-only.lat" 2>&1)
rc=$?
((rc == 1)) || fail "a file without samples: exit $rc, expected 1"
grep -qF "plot-latency: $tmp/banner-only.lat: no latency samples" <<<"$out" ||
    fail "a file without samples: no clear message: $out"
[[ ! -e $tmp/none.png ]] || fail "a PNG was written despite the error"

# 4. A zero latency cannot go on a log axis: exit 1, with file and line.
printf '# label: zero\n5\n0\n' >"$tmp/zero.lat"
out=$("$plot" "$tmp/zero.png" "$tmp/zero.lat" 2>&1)
rc=$?
((rc == 1)) || fail "a zero latency: exit $rc, expected 1"
grep -qF "$tmp/zero.lat:3: a latency must be > 0" <<<"$out" || fail "a zero latency: $out"

# 5. Usage errors exit 2.
"$plot" "$tmp/x.png" >/dev/null 2>&1
rc=$?
((rc == 2)) || fail "no sample file: exit $rc, expected 2"
"$plot" "$tmp/x.png" "$tmp/missing.lat" >/dev/null 2>&1
rc=$?
((rc == 2)) || fail "a missing sample file: exit $rc, expected 2"
"$plot" --help | grep -q '^  bench/plot-latency \[--size W,H\]' || fail "--help does not show the usage"

((failures == 0)) && echo "plot_latency: all checks passed" || echo "plot_latency: $failures failure(s)"
exit $((failures > 0))
