#!/usr/bin/env bash
# wire_ladders: tools/decode-wire --ladder, which the docs build runs on every committed wire
# capture (docs/captures/wire_step*.txt) to draw the ladder a chapter shows beside it.
# 1. For every capture, the ladder's arrows are exactly the table's packets, in order: the same
#    hosts, opcode, PSN, AckReq and AETH syndrome, time and destination QP, and a "..." line where
#    the excerpt leaves out frames, with their number and time span. Both are parsed here, apart
#    from decode-wire's own code.
# 2. The comparison fails when an arrow is missing, when a row is missing, when two arrows
#    change places, and when a time, a QP or a left-out span is wrong.
# 3. The headers the later chapters need, on a pcap written here by hand (DETH, AtomicETH,
#    AtomicAckETH, NAK and RNR NAK syndromes): the table, --tsv, --detail and --ladder, exactly.
set -uo pipefail
root=${TUTORIAL_ROOT:?set by CTest}
decode=$root/tools/decode-wire
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# table_packets FILE: the packet rows of a decoded capture, "FROM TO OPCODE PSN ACKREQ SYNDROME
# MS ms QP 0xQP [ImmDt N]" a line ("-" for no AckReq or no AETH), and "... N FROM_MS TO_MS" for N frames
# left out before a row, between the row before (0.000 at the capture's start) and that row.
table_packets() {
    awk '/^frame +ms +from -> to / { on = 1; next }
         on && $4 == "->" {
             if ($1 - last > 1) print "...", $1 - last - 1, (last ? last_ms : "0.000"), $2
             last = $1; last_ms = $2
             syn = "-"
             if (match($0, /(ACK|RNR NAK|NAK[^,]*|AETH), MSN [0-9]+/)) {
                 syn = substr($0, RSTART, RLENGTH); sub(/, MSN [0-9]+$/, "", syn)
             }
             qp = $8; sub(/^0x0*/, "", qp)
             imm = ""
             if (match($0, /ImmDt [0-9]+/)) imm = " " substr($0, RSTART, RLENGTH)
             print $3, $5, $7, $9, ($10 == "AckReq" ? "AckReq" : "-"), syn, $2 " ms", "QP 0x" qp imm
         }' "$1"
}

# ladder_packets FILE.msc: the same from a ladder; the entity labels give each column's address.
ladder_packets() {
    awk '/^  a \[label=/ {
             n = split($0, q, "\"")
             for (i = 2; i <= n; i += 2) {
                 match(q[i], /[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+/)
                 addr[i == 2 ? "a" : "b"] = substr(q[i], RSTART, RLENGTH)
             }
             next
         }
         # "... [label="N packets not shown, FROM to TO ms"];"
         /^  \.\.\. / {
             label = $0; sub(/^[^"]*"/, "", label); sub(/".*$/, "", label)
             split(label, w, /( packets? not shown, | to | ms$)/)
             print "...", w[1], w[2], w[3]
             next
         }
         /^  [ab]->[ab] \[label="/ {
             split($1, ends, "->")
             label = $0; sub(/^[^"]*"/, "", label); sub(/".*$/, "", label)
             # The second line: "MS ms, to QP 0xQP", and ", ImmDt N" for a UD SEND with immediate data.
             where = label; sub(/^.*\\n/, "", where); sub(/\\n.*$/, "", label)
             imm = ""
             if (match(where, /, ImmDt [0-9]+$/)) { imm = " " substr(where, RSTART + 2); where = substr(where, 1, RSTART - 1) }
             split(where, t, /( ms, to | )/)
             syn = "-"
             if (match(label, /\(.*\)$/)) { syn = substr(label, RSTART + 1, RLENGTH - 2); label = substr(label, 1, RSTART - 2) }
             split(label, w, " ")
             print addr[ends[1]], addr[ends[2]], w[1], w[2], (w[3] == "AckReq" ? "AckReq" : "-"), syn,
                   t[1] " ms", t[2] " " t[3] imm
         }' "$1"
}

# 1. Every committed capture against its ladder.
captures=("$root"/docs/captures/wire_step*.txt)
((${#captures[@]} >= 9)) || fail "only ${#captures[@]} wire captures in docs/captures"
for capture in "${captures[@]}"; do
    name=$(basename "$capture" .txt)
    "$decode" --ladder "$capture" >"$tmp/$name.msc" || { fail "$name: decode-wire --ladder exited $?"; continue; }
    table_packets "$capture" >"$tmp/$name.table"
    ladder_packets "$tmp/$name.msc" >"$tmp/$name.ladder"
    rows=$(grep -vc '^\.\.\.' "$tmp/$name.table")
    ((rows > 0)) || fail "$name: no packet row in the capture"
    [[ $(head -n 1 "$tmp/$name.msc") == 'msc {' && $(tail -n 1 "$tmp/$name.msc") == '}' ]] ||
        fail "$name: the ladder is not one msc { ... } block"
    if diff "$tmp/$name.table" "$tmp/$name.ladder" >"$tmp/diff"; then
        echo "$name: $rows packets, the ladder's $(grep -c -- '->' "$tmp/$name.msc") arrows match" \
             "($(grep -c '^\.\.\.' "$tmp/$name.table") gaps)"
    else
        fail "$name: the ladder's arrows are not the table's packets:"
        sed 's/^/  /' "$tmp/diff"
    fi
done
# The step04 excerpt of a killed server starts at a frame past 1: its ladder says so.
grep -q '^  \.\.\. \[label="1810 packets not shown, 0.000 to 2552.564 ms"\];$' "$tmp/wire_step04_killed.msc" ||
    fail "wire_step04_killed: no '...' line for the 1810 frames before the excerpt, with their span"
sed -n 3p "$tmp/wire_step05_read.msc" | grep -qx '  a \[label="host a (192.0.2.1), server"\], b \[label="host b (192.0.2.2), client"\];' ||
    fail "wire_step05_read: the columns are not host a (the server) and host b (the client): $(sed -n 3p "$tmp/wire_step05_read.msc")"

# 2. The comparison can fail: a ladder without its third arrow, a table without its third row,
# a ladder whose first two arrows change places, one with a wrong time or QP, and one whose "..."
# line gives a wrong span.
name=wire_step05_read
# altered KIND AWK_PROGRAM WHAT: the ladder edited by AWK_PROGRAM must not match the table.
altered() {
    awk "$2" "$tmp/$name.msc" >"$tmp/$1.msc"
    ladder_packets "$tmp/$1.msc" >"$tmp/$1.ladder"
    diff -q "$tmp/$name.table" "$tmp/$1.ladder" >/dev/null && fail "a ladder with $3 still matched the table"
}
altered dropped '/->/ && ++n == 3 { next } { print }' "one arrow missing"
# shellcheck disable=SC2016  # an awk program, not shell
altered swapped '/->/ && ++n == 1 { held = $0; next } { print } /->/ && n == 2 { print held }' \
    "two arrows swapped"
altered time '/->/ && ++n == 2 { sub(/\\n[0-9.]+ ms/, "\\n9.999 ms") } { print }' "a wrong time"
altered qp '/->/ && ++n == 2 { sub(/to QP 0x[0-9a-f]+/, "to QP 0xabc") } { print }' "a wrong QP"
awk '$4 == "->" && ++n == 3 { next } { print }' "$root/docs/captures/$name.txt" >"$tmp/dropped.txt"
table_packets "$tmp/dropped.txt" >"$tmp/dropped.table"
diff -q "$tmp/dropped.table" "$tmp/$name.ladder" >/dev/null &&
    fail "a table without one row still matched the ladder"
grep -q '^\.\.\. 1 [0-9.]* [0-9.]*$' "$tmp/dropped.table" || fail "a table without one row shows no gap"
name=wire_step04_killed
altered span '{ sub(/not shown, 0\.000 to/, "not shown, 1.000 to") } { print }' \
    "a wrong span for the packets left out"
echo "altered ladders and tables (an arrow or a row dropped, two arrows swapped, a time, QP or span wrong) do not match"

# 3. A pcap written by hand: host b sends a UD SEND (DETH), a CMP_SWAP and a FETCH_ADD
# (AtomicETH); host a answers with an ATOMIC_ACK (AETH, AtomicAckETH), a NAK (PSN sequence
# error) and an RNR NAK.
command -v tshark >/dev/null || fail "no tshark: run tools/install-deps.sh"
/usr/bin/python3 - "$tmp/crafted.pcap" <<'EOF'
import struct, sys
def packet(src, dst, opcode, qp, psn, ackreq, headers, payload=b''):
    bth = struct.pack('>BBHII', opcode, 0, 0xffff, qp, (ackreq << 31) | psn)
    roce = bth + headers + payload + b'\0' * 4  # the ICRC, not checked by tshark
    udp = struct.pack('>HHHH', 49152, 4791, 8 + len(roce), 0) + roce
    ip = struct.pack('>BBHHHBBH4s4s', 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0,
                     bytes(map(int, src.split('.'))), bytes(map(int, dst.split('.'))))
    return bytes.fromhex('525400c00001525400c00002') + b'\x08\x00' + ip + udp
a, b = '192.0.2.1', '192.0.2.2'
aeth = lambda syndrome, msn: struct.pack('>I', (syndrome << 24) | msn)
packets = [
    packet(b, a, 100, 0x12, 0x10, 0, struct.pack('>II', 0x11111111, 0x34), b'12345678'),
    packet(b, a, 19, 0x11, 0x200, 1, struct.pack('>QIQQ', 0x7f0000001000, 0xabcd, 5, 7)),
    packet(a, b, 18, 0x11, 0x200, 0, aeth(0x1f, 1) + struct.pack('>Q', 7)),
    packet(b, a, 20, 0x11, 0x201, 1, struct.pack('>QIQQ', 0x7f0000002000, 0xabcd, 3, 0)),
    packet(a, b, 17, 0x11, 0x201, 0, aeth(0x60, 1)),
    packet(a, b, 17, 0x11, 0x201, 0, aeth(0x2e, 1)),
]
out = struct.pack('<IHHiIII', 0xa1b2c3d4, 2, 4, 0, 0, 65535, 1)  # pcap, Ethernet
for i, p in enumerate(packets):
    out += struct.pack('<IIII', 1000, i * 1000, len(p), len(p)) + p
open(sys.argv[1], 'wb').write(out)
EOF
expect() { # expect WHAT EXPECTED_FILE ACTUAL_FILE
    if diff "$2" "$3" >"$tmp/diff"; then
        echo "crafted pcap: $1 as expected"
    else
        fail "crafted pcap: $1 differs (< expected, > actual):"
        sed 's/^/  /' "$tmp/diff"
    fi
}
"$decode" "$tmp/crafted.pcap" >"$tmp/crafted.table" 2>&1
cat >"$tmp/want.table" <<'EOF'
frame        ms  from -> to                bytes  opcode               QP       PSN      more
    1     0.000  192.0.2.2 -> 192.0.2.1       74  UD_SEND_ONLY         0x000012 0x000010 DETH Q_Key 0x11111111 src QP 0x000034
    2     1.000  192.0.2.2 -> 192.0.2.1       86  CMP_SWAP             0x000011 0x000200 AckReq  AtomicETH va 0x7f0000001000 rkey 0x0000abcd swap 5 compare 7
    3     2.000  192.0.2.1 -> 192.0.2.2       70  ATOMIC_ACK           0x000011 0x000200 ACK, MSN 1  AtomicAckETH original 7
    4     3.000  192.0.2.2 -> 192.0.2.1       86  FETCH_ADD            0x000011 0x000201 AckReq  AtomicETH va 0x7f0000002000 rkey 0x0000abcd add 3
    5     4.000  192.0.2.1 -> 192.0.2.2       62  ACK                  0x000011 0x000201 NAK seq err, MSN 1
    6     5.000  192.0.2.1 -> 192.0.2.2       62  ACK                  0x000011 0x000201 RNR NAK, MSN 1
EOF
expect "the table" "$tmp/want.table" "$tmp/crafted.table"
"$decode" --tsv "$tmp/crafted.pcap" >"$tmp/crafted.tsv" 2>&1
tr ' ' '\t' >"$tmp/want.tsv" <<'EOF'
1 0.000 192.0.2.2 192.0.2.1 100 UD_SEND_ONLY 0x000012 0x000010 0 - - - - - 74 - 16 0x11111111 0x000034 - - - - - -
2 1.000 192.0.2.2 192.0.2.1 19 CMP_SWAP 0x000011 0x000200 1 - - - - - 86 - 512 - - 0x7f0000001000 0x0000abcd 5 7 - -
3 2.000 192.0.2.1 192.0.2.2 18 ATOMIC_ACK 0x000011 0x000200 0 - - - 31 1 70 - 512 - - - - - - 7 -
4 3.000 192.0.2.2 192.0.2.1 20 FETCH_ADD 0x000011 0x000201 1 - - - - - 86 - 513 - - 0x7f0000002000 0x0000abcd 3 0 - -
5 4.000 192.0.2.1 192.0.2.2 17 ACK 0x000011 0x000201 0 - - - 96 1 62 - 513 - - - - - - - -
6 5.000 192.0.2.1 192.0.2.2 17 ACK 0x000011 0x000201 0 - - - 46 1 62 - 513 - - - - - - - -
EOF
expect "--tsv" "$tmp/want.tsv" "$tmp/crafted.tsv"
"$decode" --ladder "$tmp/crafted.pcap" >"$tmp/crafted.msc" 2>&1
cat >"$tmp/want.msc" <<'EOF'
msc {
  width = "520";
  a [label="192.0.2.2"], b [label="192.0.2.1"];
  a->b [label="UD_SEND_ONLY 0x000010\n0.000 ms, to QP 0x12"];
  a->b [label="CMP_SWAP 0x000200 AckReq\n1.000 ms, to QP 0x11"];
  b->a [label="ATOMIC_ACK 0x000200 (ACK)\n2.000 ms, to QP 0x11"];
  a->b [label="FETCH_ADD 0x000201 AckReq\n3.000 ms, to QP 0x11"];
  b->a [label="ACK 0x000201 (NAK seq err)\n4.000 ms, to QP 0x11"];
  b->a [label="ACK 0x000201 (RNR NAK)\n5.000 ms, to QP 0x11"];
}
EOF
expect "--ladder" "$tmp/want.msc" "$tmp/crafted.msc"
# --detail: the three headers, field by field (tshark's names), of the first three packets.
"$decode" --detail 'frame.number <= 3' "$tmp/crafted.pcap" |
    grep -E '^    [A-Za-z]+ETH - |^        (Queue Key|Source Queue Pair|Virtual Address|Remote Key|Swap \(Or Add\) Data|Compare Data|Original Remote Data):' \
    >"$tmp/crafted.detail"
cat >"$tmp/want.detail" <<'EOF'
    DETH - Datagram Extended Transport Header
        Queue Key: 0x0000000011111111
        Source Queue Pair: 0x00000034
    AtomicETH - Atomic Extended Transport Header
        Virtual Address: 0x00007f0000001000
        Remote Key: 0x0000abcd
        Swap (Or Add) Data: 5
        Compare Data: 7
    AETH - ACK Extended Transport Header
    ATOMICACKETH - Atomic ACK Extended Transport Header
        Original Remote Data: 7
EOF
expect "--detail" "$tmp/want.detail" "$tmp/crafted.detail"

((failures == 0)) || { echo "$failures failure(s)"; exit 1; }
echo PASS
