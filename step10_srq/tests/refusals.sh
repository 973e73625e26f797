#!/usr/bin/env bash
# The sizes the shared resources refuse: at start, an SRQ over the device's max_srq_wr, a limit
# not below the depth, a shared CQ over max_cqe (exit 2 each, one line naming the numbers); at
# connect time, a client that --max-clients has no room for on the shared CQ, and one that could
# have more messages in flight than --srq-depth has receives (that client is refused, the
# others go on until their client ends).
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
bin=$1
dev=(-d "$RDMA_DEVICE")
port=$(new_port)

run_cmd srq_depth "$bin" "${dev[@]}" -p "$port" --srq-depth 2000000
expect_exit srq_depth 2
expect_match srq_depth err "^step10_srq: --srq-depth 2000000 is over $RDMA_DEVICE's limit max_srq_wr = [0-9]+$"
expect_line srq_depth err "hint: ibv_devinfo -v shows the device's limits"

run_cmd srq_limit "$bin" "${dev[@]}" -p "$port" --srq-limit 500
expect_exit srq_limit 2
expect_line srq_limit err "step10_srq: --srq-limit 500 must be below --srq-depth 500 (the SRQ fires when its receives drop below the limit)"

# The chapter's exercise 2: rxe's max_cqe (32767) holds 1898 clients with these depths, not 1899.
run_cmd cq_1899 "$bin" "${dev[@]}" -p "$port" --max-clients 1899
expect_exit cq_1899 2
expect_line cq_1899 err "step10_srq: the shared CQ needs 500 + 1899 x (16 + 1) = 32783 entries, over $RDMA_DEVICE's limit max_cqe = 32767: lower --max-clients, -t or --srq-depth"

# --max-clients 2: the third connection of one client process is refused.
run_cmd server_cq "$bin" "${dev[@]}" -p "$port" -s 64 -n 100 --max-clients 2 --exit-after 3 &
server=$!
wait_for_listen "$port"
run_cmd three "$bin" "${dev[@]}" -p "$port" -s 64 -n 100 --connections 3 127.0.0.1
wait "$server"
expect_exit three 6
expect_exit server_cq 0
expect_match server_cq out '^server: client 3 \(127\.0\.0\.1:[0-9]+\): rejected: the shared CQ is sized for --max-clients 2 \(500 receives \+ 2 x \(16 \+ 1\) sends\): connection 3 could overrun it$'
expect_match server_cq out '^server: clients: 2 connected, 0 complete, 2 failed, 1 rejected, 0 aborted$'

# -r 2: a third connection could have a third message in flight, for two receives.
port=$((port + 1))
run_cmd server_srq "$bin" "${dev[@]}" -p "$port" -s 64 -n 100 -r 2 --exit-after 3 &
server=$!
wait_for_listen "$port"
run_cmd three_srq "$bin" "${dev[@]}" -p "$port" -s 64 -n 100 --connections 3 127.0.0.1
wait "$server"
expect_exit three_srq 6
expect_exit server_srq 0
expect_match server_srq out '^server: client 3 \(127\.0\.0\.1:[0-9]+\): rejected: connection 3 could have 3 messages in flight, more than the 2 receives of --srq-depth: raise --srq-depth$'
# The chapter's exercise 1: the client's first two connections end with it, as failed.
expect_match server_srq out '^server: clients: 2 connected, 0 complete, 2 failed, 1 rejected, 0 aborted$'
echo PASS
