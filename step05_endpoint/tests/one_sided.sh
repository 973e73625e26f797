#!/usr/bin/env bash
# --op write: the client's RDMA WRITEs land in the server's buffer with no completion there; a
# final write-with-immediate tells the server, which verifies the data. --op read: the client
# reads the server's buffer and verifies it, at -m 1024 (as step05_wire does; the ASan pass
# leaves that test out).
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
program=$1
# shellcheck disable=SC2043 # one size today; add sizes to the list
for size in 8192; do
    port=$(new_port)
    run_cmd "wserver$size" "$program" -d "$RDMA_DEVICE" -p "$port" -s "$size" -n 100 --op write --timeout 30 &
    server=$!
    wait_for_listen "$port" 30
    run_cmd "wclient$size" "$program" -d "$RDMA_DEVICE" -p "$port" -s "$size" -n 100 --op write --timeout 30 127.0.0.1
    wait "$server"
    expect_exit "wserver$size" 0
    expect_exit "wclient$size" 0
    expect_line "wserver$size" out "server: 100 RDMA WRITEs landed with no completion here; the write-with-immediate said so; $size bytes verified"
    expect_line "wclient$size" out "client: 100 RDMA WRITEs of $size bytes, then a write-with-immediate (100)"
    expect_line "wclient$size" out "RDMA WRITE latency (post to completion, the WRITE out and its ACK back; ib_write_lat times a WRITE ping-pong instead):"

    port=$(new_port)
    run_cmd "rserver$size" "$program" -d "$RDMA_DEVICE" -p "$port" -s "$size" -n 100 --op read -m 1024 --timeout 30 &
    server=$!
    wait_for_listen "$port" 30
    run_cmd "rclient$size" "$program" -d "$RDMA_DEVICE" -p "$port" -s "$size" -n 100 --op read -m 1024 --timeout 30 -v 127.0.0.1
    wait "$server"
    expect_exit "rserver$size" 0
    expect_exit "rclient$size" 0
    expect_line "rclient$size" out "client: 100 RDMA READs of $size bytes; the last one verified"
    expect_line "rclient$size" out "RDMA READ latency (post to completion, as ib_read_lat reports it):"
    expect_match "rclient$size" out "^  remote buffer:  addr 0x[0-9a-f]+, rkey 0x[0-9a-f]{8}, $size bytes\$"
    expect_line "rserver$size" out "server: the client read $size bytes 100 times with no completion here; its final send said so"
done

# A client in read mode against a server that granted only REMOTE_WRITE (a write-mode server):
# the READ fails, the client names the status, and the server's QP, which received an invalid
# request, goes to the error state too: its posted receive is flushed. (The client starts
# first and retries until the server listens.)
port=$(new_port)
run_cmd wrongclient "$program" -d "$RDMA_DEVICE" -p "$port" -n 5 --op read --timeout 30 127.0.0.1 &
client=$!
run_cmd wrongserver timeout 60 "$program" -d "$RDMA_DEVICE" -p "$port" -n 5 --op write --timeout 30
wait "$client"
expect_exit wrongclient 1
expect_match wrongclient err "^step05_endpoint: work completion failed: IBV_WC_REM_(INV_REQ|ACCESS)_ERR \(.*\) for wr_id 0, vendor_err 0x[0-9a-f]+\$"
expect_match wrongclient err "^hint: "
expect_exit wrongserver 1
expect_match wrongserver err "^step05_endpoint: work completion failed: IBV_WC_WR_FLUSH_ERR "
echo PASS
