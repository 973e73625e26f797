#!/usr/bin/env bash
# lab/softroce answers --help with exit 0 and a bad call with exit 2; a bad --timeout or
# --hosts is the lab's own error (125), as is --capture without two hosts or where it cannot
# write, and a kernel release (--kernel, SOFTROCE_KERNEL) the lab does not know; lab/peer
# outside the two-host lab says where it works.
# shellcheck source=/dev/null
source "$TESTLIB"
softroce=$1
run_cmd help "$softroce" --help
expect_exit help 0
expect_line help out "usage: lab/softroce run [--timeout S] [--hosts 2 [--capture FILE]] [--kernel R] -- CMD [ARGS...]"
run_cmd bad "$softroce" frobnicate
expect_exit bad 2
expect_line bad err "usage: lab/softroce run [--timeout S] [--hosts 2 [--capture FILE]] [--kernel R] -- CMD [ARGS...]"
run_cmd badtimeout "$softroce" run --timeout soon -- true
expect_exit badtimeout 125
expect_line badtimeout err "softroce: --timeout needs a whole number of seconds"
run_cmd badhosts "$softroce" run --hosts 3 -- true
expect_exit badhosts 125
expect_line badhosts err "softroce: --hosts takes 1 or 2"
run_cmd onehostcapture "$softroce" run --capture "$TEST_TMP/x.pcap" -- true
expect_exit onehostcapture 125
expect_line onehostcapture err "softroce: --capture needs --hosts 2 (on one host, nothing crosses a wire)"
run_cmd badcapture "$softroce" run --hosts 2 --capture /nonexistent/dir/x.pcap -- true
expect_exit badcapture 125
expect_line badcapture err "softroce: --capture: cannot write in /nonexistent/dir"
badkernel="softroce: unknown kernel release 'sid': --kernel and SOFTROCE_KERNEL take bookworm (Linux 6.1) or trixie (Linux 6.12)"
run_cmd badkernel "$softroce" run --kernel sid -- true
expect_exit badkernel 125
expect_line badkernel err "$badkernel"
run_cmd badkernelenv env SOFTROCE_KERNEL=sid "$softroce" run -- true
expect_exit badkernelenv 125
expect_line badkernelenv err "$badkernel"
run_cmd badkernelshell "$softroce" shell --kernel=sid
expect_exit badkernelshell 125
expect_line badkernelshell err "$badkernel"
run_cmd nopeer env -u LAB_CTL "$(dirname -- "$softroce")/peer" run -- true
expect_exit nopeer 125
expect_line nopeer err "peer: no peer here: run this under 'lab/softroce run --hosts 2'"
echo PASS
