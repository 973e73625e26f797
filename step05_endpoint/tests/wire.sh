#!/usr/bin/env bash
# step05_endpoint across the two-host lab's wire: the server on host a, the client on host b.
#   1. the ping-pong;
#   2. --op write with -s 1024 at MTU 1024: RDMA Write Only packets, then the write-with-immediate;
#      each RETH carries the virtual address, rkey and length of the server's buffer, as the
#      handshake exchanged them (both sides print them with -v);
#   3. --op write with -s 3000: Write First, Middle, Last; only the First has a RETH;
#   4. --op read: Read Requests (a RETH each) from b, Read Response Only packets from a.
# The checks are run once on altered copies of the capture too (a WRITE sent as a SEND, another
# rkey, a READ answered by an ACK), and must reject them.
# shellcheck source=/dev/null
source "$TESTLIB"
require_peer
prog=$1
port=$(new_port)
a=$LAB_ADDR b=$LAB_PEER_ADDR

# pair NAME SERVER_AND_CLIENT_ARGS...: step05's server on host a, its client on host b, with the
# same options; the wire captured as NAME.
pair() {
    local name=$1
    shift
    port=$((port + 1))
    start_capture "$name"
    run_cmd "${name}_server" timeout 120 "$prog" -p "$port" --timeout 60 "$@" &
    local server=$!
    wait_for_listen "$port" 30 "$server"
    run_cmd "${name}_client" "$PEER" run --timeout 120 -- "$prog" -p "$port" --timeout 60 "$@" "$a"
    wait "$server"
    stop_capture "$name"
    expect_exit "${name}_server" 0
    expect_exit "${name}_client" 0
}

# buffer NAME: the server's buffer as it printed it (-v): "addr rkey length".
buffer() {
    sed -nE 's/^  local buffer:   addr (0x[0-9a-f]+), rkey (0x[0-9a-f]{8}), ([0-9]+) bytes$/\1 \2 \3/p' \
        "$TEST_TMP/${1}_server.out"
}

# check_reth NAME OPCODE_REGEX "ADDR RKEY" LENGTH: every packet from b whose opcode matches has a
# RETH with the server's address and rkey, and LENGTH.
check_reth() {
    local bad
    bad=$(awk -F'\t' -v b="$b" -v re="$2" -v want="$3 $4" '$3 == b && $6 ~ re && $10 " " $11 " " $12 != want {
              print $1 ": " $6 " RETH " $10 " " $11 " " $12 }' "$TEST_TMP/$1.wire")
    [[ -z $bad ]] || fail "$1: a RETH that is not the server's buffer ($3, length $4): $bad"
    awk -F'\t' -v b="$b" -v re="$2" '$3 == b && $6 ~ re { n++ } END { exit !n }' "$TEST_TMP/$1.wire" ||
        fail "$1: no /$2/ packet from host b"
    echo "$1: every /$2/ RETH is the server's buffer: va ${3% *}, rkey ${3#* }, length $4"
}

# 1. The ping-pong across the hosts.
port=$((port + 1))
run_cmd pp_server timeout 120 "$prog" -p "$port" -n 100 --timeout 60 &
server=$!
wait_for_listen "$port" 30 "$server"
run_cmd pp_client "$PEER" run --timeout 120 -- "$prog" -p "$port" -n 100 --timeout 60 "$a"
wait "$server"
for run in pp_server pp_client; do
    expect_exit $run 0
    expect_match $run out '^100 iters in [0-9.]+ seconds = [0-9.]+ usec/iter$'
done

# check_write NAME: the checks of section 2, on capture NAME.
check_write() {
    expect_opcodes "$1" "$b" '(ACK )*(WRITE_ONLY( ACK)* ){3}WRITE_ONLY_IMM( ACK)*( SEND_ONLY( ACK)*)?' \
        "three RDMA WRITEs and the write-with-immediate"
    check_reth "$1" '^WRITE_ONLY$' "$(buffer "$1" | cut -d' ' -f1,2)" 1024
}

# 2. RDMA WRITE, one packet a message.
pair write --op write -s 1024 -m 1024 -n 3 -v
expect_line write_client out "client: 3 RDMA WRITEs of 1024 bytes, then a write-with-immediate (3)"
read -r addr rkey length <<<"$(buffer write)"
[[ -n ${addr:-} && $length == 1024 ]] || fail "write: the server printed no local buffer of 1024 bytes"
expect_line write_client out "  remote buffer:  addr $addr, rkey $rkey, 1024 bytes"
check_write write

# 3. RDMA WRITE of 3000 bytes at MTU 1024: First (with the RETH), Middle, Last.
pair write3000 --op write -s 3000 -m 1024 -n 2 -v
expect_opcodes write3000 "$b" '(ACK )*(WRITE_FIRST WRITE_MIDDLE WRITE_LAST( ACK)* ){2}WRITE_ONLY_IMM( ACK)*( SEND_ONLY( ACK)*)?' \
    "two 3-packet WRITEs and the write-with-immediate"
check_reth write3000 '^WRITE_FIRST$' "$(buffer write3000 | cut -d' ' -f1,2)" 3000
rethless=$(awk -F'\t' -v b="$b" '$3 == b && $6 ~ /^WRITE_(MIDDLE|LAST)$/ && $10 != "-"' "$TEST_TMP/write3000.wire")
[[ -z $rethless ]] || fail "write3000: a Middle or Last packet with a RETH: $rethless"

# check_read NAME: the checks of section 4, on capture NAME.
check_read() {
    expect_opcodes "$1" "$b" '(ACK )*(READ_REQUEST ){3}SEND_ONLY( ACK)*' "three READ requests, then the final send"
    expect_opcodes "$1" "$a" '(ACK )*(READ_RESPONSE_ONLY( ACK)* ){2}READ_RESPONSE_ONLY( ACK)*' "three READ responses"
    check_reth "$1" '^READ_REQUEST$' "$(buffer "$1" | cut -d' ' -f1,2)" 1024
}

# 4. RDMA READ: requests from b, responses from a.
pair read --op read -s 1024 -m 1024 -n 3 -v
expect_line read_client out "client: 3 RDMA READs of 1024 bytes; the last one verified"
check_read read

# The checks reject altered captures: each must fail (in a subshell, as fail exits).
# must_reject WHAT NAME CHECK SED: CHECK on a copy of capture NAME edited by SED must fail.
must_reject() {
    sed -E "$4" "$TEST_TMP/$2.wire" >"$TEST_TMP/altered.wire"
    cmp -s "$TEST_TMP/$2.wire" "$TEST_TMP/altered.wire" && fail "the alteration '$4' changed nothing"
    if ("$3" altered >/dev/null 2>&1); then
        fail "the checks accepted a capture with $1"
    fi
    echo "the checks reject a capture with $1"
}
cp "$TEST_TMP/write_server.out" "$TEST_TMP/altered_server.out"
must_reject "a WRITE sent as a SEND" write check_write '0,/\tWRITE_ONLY\t/s/\tWRITE_ONLY\t/\tSEND_ONLY\t/'
must_reject "another rkey in a RETH" write check_write "s/\\t${rkey}\\t/\\t0x0badbeef\\t/"
cp "$TEST_TMP/read_server.out" "$TEST_TMP/altered_server.out"
must_reject "a READ answered by an ACK" read check_read 's/\tREAD_RESPONSE_ONLY\t/\tACK\t/'
echo PASS
