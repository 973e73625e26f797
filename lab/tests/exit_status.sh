#!/usr/bin/env bash
# The lab propagates the guest command's exit status, reports a missing
# command with 127, and stops a command that outlives --timeout with 124.
# shellcheck source=/dev/null
source "$TESTLIB"
softroce=$1
export SOFTROCE_FORCE_VM=1 SOFTROCE_QUIET=1

run_cmd seven "$softroce" run --timeout 120 -- sh -c 'echo on-stdout; echo on-stderr >&2; exit 7'
expect_exit seven 7
expect_line seven out "on-stdout"
expect_line seven err "on-stderr"

run_cmd missing "$softroce" run --timeout 120 -- no-such-command-xyz
expect_exit missing 127
expect_line missing err "softroce: command not found in the lab VM: no-such-command-xyz"

TMPDIR=$TEST_TMP run_cmd slow "$softroce" run --timeout 8 -- sleep 60
expect_exit slow 124
expect_line slow err "softroce: timed out after 8s; the VM was stopped"
! pgrep -f "qemu-system-x86_64.*$TEST_TMP/softroce" || fail "a qemu process outlived the timeout"

run_cmd usage "$softroce" run
expect_exit usage 2

# Ctrl-C: SIGINT to the lab's process group (as a terminal sends it) stops the
# VM, exits 130 and leaves no qemu process behind. python3 restores SIGINT's
# default disposition, which a background job inherits as "ignored".
python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.setsid(); os.execvp(sys.argv[1], sys.argv[1:])' \
    "$softroce" run --timeout 120 -- sh -c 'echo running; exec sleep 100' >"$TEST_TMP/intr.out" 2>"$TEST_TMP/intr.err" &
lab=$!
for ((i = 0; i < 100; i++)); do
    qemu=$(pgrep -P "$lab" qemu-system-x86 || true)
    [[ -n $qemu ]] && break
    sleep 0.1
done
[[ -n $qemu ]] || fail "the lab started no qemu within 10 s"
# Until the command runs in the VM: the interrupt comes while it runs.
for ((i = 0; i < 600; i++)); do
    grep -qx running "$TEST_TMP/intr.out" && break
    sleep 0.1
done
grep -qx running "$TEST_TMP/intr.out" || fail "the command did not start in the VM within 60 s"
kill -INT -- -"$lab"
rc=0; wait "$lab" || rc=$?
cat "$TEST_TMP/intr.err"
[[ $rc == 130 ]] || fail "interrupted lab: expected exit status 130, got $rc"
grep -qxF "softroce: interrupted; stopping the VM" "$TEST_TMP/intr.err" || fail "no interrupt message"
! kill -0 "$qemu" 2>/dev/null || fail "qemu ($qemu) outlived the interrupted lab"

echo PASS
