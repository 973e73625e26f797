# The lab propagates the guest command's exit status, reports a missing
# command with 127, and stops a command that outlives --timeout with 124.
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

run_cmd slow "$softroce" run --timeout 8 -- sleep 60
expect_exit slow 124
expect_line slow err "softroce: timed out after 8s; the VM was stopped"
pgrep -f "qemu-system-x86_64.*softroce" && fail "a qemu process outlived the timeout"

run_cmd usage "$softroce" run
expect_exit usage 2
echo PASS
