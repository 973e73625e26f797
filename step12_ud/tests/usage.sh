#!/usr/bin/env bash
# step12_ud: --help exits 0 with the usage; a bad option, value or operand exits 2 with one line.
# shellcheck source=/dev/null
source "$TESTLIB"
prog=$1
run_cmd help "$prog" --help
expect_exit help 0
expect_match help out '^usage: step12_ud \[options\] +serve every client on one UD QP$'
expect_match help out '^      --qkey=N '
run_cmd unknown "$prog" --no-such-option
expect_exit unknown 2
expect_line unknown err "step12_ud: unknown option '--no-such-option'"
expect_match unknown err '^usage: '
run_cmd noqpn "$prog" 10.0.0.1
expect_exit noqpn 2
expect_line noqpn err "step12_ud: a client needs the server's QP number: step12_ud HOST QPN (the server prints it)"
run_cmd badqpn "$prog" 10.0.0.1 0x1000000
expect_exit badqpn 2
expect_line badqpn err "step12_ud: QPN must be a number from 1 to 16777215 (0xffffff), decimal or 0x hex (got '0x1000000')"
run_cmd badqkey "$prog" --qkey 0x80000000
expect_exit badqkey 2
expect_line badqkey err "step12_ud: --qkey must be a number from 0 to 2147483647 (0x7fffffff), decimal or 0x hex (got '0x80000000')"
run_cmd hsqpn "$prog" --handshake 10.0.0.1 17
expect_exit hsqpn 2
expect_line hsqpn err "step12_ud: --handshake takes HOST alone, no QPN"
run_cmd bind "$prog" --bind 127.0.0.1
expect_exit bind 2
expect_line bind err "step12_ud: --bind is for the --handshake server"
run_cmd clients "$prog" --clients 2 10.0.0.1 17
expect_exit clients 2
expect_line clients err "step12_ud: --clients is for the server; a client (HOST given) serves no one"
run_cmd resend "$prog" --resend-ms 0
expect_exit resend 2
expect_line resend err "step12_ud: --resend-ms must be a whole number from 1 to 60000 (got '0')"
run_cmd toomany "$prog" a 1 b
expect_exit toomany 2
expect_line toomany err "step12_ud: unexpected argument 'b'"
echo PASS
