#!/usr/bin/env bash
# B1: a constructor that throws after the completion channel exists unwinds child-first. With
# fail_create_cq.so (LD_PRELOAD) ibv_create_cq fails right after the endpoint created its channel
# (step06's client with -e, step09's client, step10's and step11's clients, which create their shared
# CQ before they connect): the program must exit 1 naming the verb, with no "destroy failed" line and no
# sanitizer report, and the channel must go before its context. When the channel sat before the
# context's owner, the context was closed first and ibv_destroy_comp_channel then locked its freed
# mutex; the injector reports that order.
# usage: unwind_after_channel.sh FAIL_CREATE_CQ_SO PROGRAM...
# shellcheck source=/dev/null
source "$TESTLIB"
require_device
injector=$1
shift
# An ASan build wants its runtime first among the preloaded libraries; the injector has none.
asan_options=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0
port=$(new_port)

for prog in "$@"; do
    name=$(basename "$prog")
    args=()
    [[ $name == step06_epoll ]] && args=(-e)
    run_cmd "$name" env LD_PRELOAD="$injector" ASAN_OPTIONS="$asan_options" \
        "$prog" -d "$RDMA_DEVICE" -p "$port" --timeout 5 "${args[@]}" 127.0.0.1
    expect_line "$name" err "fail_create_cq: ibv_create_cq fails"
    expect_exit "$name" 1
    expect_line "$name" err "$name: ibv_create_cq: Cannot allocate memory"
    expect_no_match "$name" err "destroy failed|AddressSanitizer|runtime error|LeakSanitizer"
    expect_no_match "$name" err "ibv_destroy_comp_channel after ibv_close_device"
done
echo "unwind_after_channel: $# programs unwound after a failed ibv_create_cq"
