#!/usr/bin/env bash
# The two-host lab (lab/softroce run --hosts 2): ibv_rc_pingpong across the wire both ways and
# lab/peer (tests/cross_hosts.sh, on host a), with --capture's pcap of the wire checked; an exit
# status from either host reaches the caller; Ctrl-C stops both VMs and leaves no QEMU process
# behind.
#   tests/two_hosts.sh SOFTROCE
# shellcheck source=/dev/null
source "$TESTLIB"
softroce=$1
lab_dir=$(dirname -- "$softroce")
export SOFTROCE_FORCE_VM=1 SOFTROCE_QUIET=1 TMPDIR=$TEST_TMP

run_cmd cross "$softroce" run --hosts 2 --capture "$TEST_TMP/wire.pcap" --timeout 400 -- \
    env TESTLIB="$TESTLIB" bash "$lab_dir/tests/cross_hosts.sh"
expect_exit cross 0
expect_line cross out PASS

# --capture: QEMU's dump of the wire holds both ibv_rc_pingpong runs: 2 runs x 2 sides x 200
# messages of 4096 bytes, each a SEND First (then Middle, Middle, Last at MTU 1024), each way.
command -v tshark >/dev/null || fail "no tshark on this machine: run tools/install-deps.sh"
"$lab_dir/../tools/decode-wire" --tsv "$TEST_TMP/wire.pcap" >"$TEST_TMP/wire.tsv" ||
    fail "--capture: $TEST_TMP/wire.pcap cannot be decoded"
for from in 192.0.2.1 192.0.2.2; do
    firsts=$(awk -F'\t' -v f="$from" '$3 == f && $6 == "SEND_FIRST" { print $7, $8 }' "$TEST_TMP/wire.tsv" | sort -u | wc -l)
    ((firsts == 400)) || fail "--capture: $firsts distinct SEND_FIRST packets from $from, not 400"
    echo "--capture: 400 SEND_FIRST packets from $from"
done

# An exit status from host a, and one from host b through lab/peer.
run_cmd status_a "$softroce" run --hosts 2 --timeout 120 -- sh -c 'exit 5'
expect_exit status_a 5
run_cmd status_b "$softroce" run --hosts 2 --timeout 120 -- "$lab_dir/peer" run -- sh -c 'exit 9'
expect_exit status_b 9

# Ctrl-C: SIGINT to the lab's process group stops both VMs, exits 130, leaves no QEMU. python3
# restores SIGINT's default disposition, which a background job inherits as "ignored".
TMPDIR=$TEST_TMP python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.setsid(); os.execvp(sys.argv[1], sys.argv[1:])' \
    "$softroce" run --hosts 2 --timeout 120 -- "$lab_dir/peer" run -- sh -c 'echo running; exec sleep 100' \
    >"$TEST_TMP/intr.out" 2>"$TEST_TMP/intr.err" &
lab=$!
qemus=()
for ((i = 0; i < 100; i++)); do
    mapfile -t qemus < <(pgrep -P "$lab" qemu-system-x86 || true)
    ((${#qemus[@]} == 2)) && break
    sleep 0.1
done
((${#qemus[@]} == 2)) || fail "the lab did not start two QEMUs within 10 s (${#qemus[@]})"
# Until the command runs on host b: host b's agent writes a job's output into the run folder's
# ctl/ (the lab's run folder is in $TEST_TMP). The interrupt comes while both VMs are up and a
# command runs on each.
running() { grep -qsx running "$TEST_TMP"/softroce.*/ctl/*.out; }
for ((i = 0; i < 600; i++)); do
    running && break
    sleep 0.1
done
running || fail "the command did not start on host b within 60 s"
kill -INT -- -"$lab"
rc=0; wait "$lab" || rc=$?
cat "$TEST_TMP/intr.err"
[[ $rc == 130 ]] || fail "interrupted lab: expected exit status 130, got $rc"
grep -qxF "softroce: interrupted; stopping the VM" "$TEST_TMP/intr.err" || fail "no interrupt message"
for q in "${qemus[@]}"; do
    ! kill -0 "$q" 2>/dev/null || fail "qemu ($q) outlived the interrupted lab"
done
! pgrep -f "qemu-system-x86_64.*$TEST_TMP/softroce" || fail "a qemu process of this test is left"
echo PASS
