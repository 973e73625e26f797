// What both ping-pong loops share: the plan, the result, posting receives, the last message's
// mark, and the checks on each message received.
#pragma once

#include "check.hpp"
#include "errors.hpp"
#include "resources.hpp"
#include "tcp.hpp"

#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <system_error>
#include <vector>

namespace tutorial {

//! [wr_ids]
// Send work requests carry their sequence number; receives and the probe carry these.
inline constexpr std::uint64_t kReceiveWrId = UINT64_MAX;
inline constexpr std::uint64_t kProbeWrId = UINT64_MAX - 1;
//! [wr_ids]
//! [pingpong_setup]

// What the loop needs to know, fixed before it starts.
struct PingPongPlan {
    std::size_t size = 0;
    long long iters = 0;   // measured iterations
    long long warmup = 0;  // iterations before them, left out of the figures
    int rx_depth = 0;
    int tx_depth = 0;
    bool inline_send = false;  // size <= the max_inline_data the QP was granted
    bool check = false;
    bool client = false;
    std::chrono::seconds timeout{10};
};

struct PingPongResult {
    double usec = 0;                  // wall time of the measured iterations
    std::vector<double> round_trips;  // usec, one per measured iteration but the last
};

// Posts `count` receives of the whole buffer, chained 16 to an ibv_post_recv call; the work
// requests live on the stack, so a refill allocates nothing.
inline void post_receives(const Resources& resources, std::size_t size, int count) {
    ibv_sge sge{};
    sge.addr = reinterpret_cast<std::uintptr_t>(resources.buffer.get());
    sge.length = static_cast<std::uint32_t>(size);
    sge.lkey = resources.mr->lkey;
    std::array<ibv_recv_wr, 16> requests{};
    while (count > 0) {
        const std::size_t n =
            std::min<std::size_t>(requests.size(), static_cast<std::size_t>(count));
        for (std::size_t i = 0; i < n; ++i) {
            requests[i].wr_id = kReceiveWrId;
            requests[i].sg_list =
                &sge;  // every receive lands in the same buffer, as in rc_pingpong
            requests[i].num_sge = 1;
            requests[i].next = i + 1 < n ? &requests[i + 1] : nullptr;
        }
        ibv_recv_wr* bad = nullptr;
        if (const int rc = ibv_post_recv(resources.qp.get(), requests.data(), &bad); rc != 0) {
            throw std::system_error(rc, std::generic_category(), "ibv_post_recv");
        }
        count -= static_cast<int>(n);
    }
}

// The send times give the figures: one round trip between two consecutive sends.
[[nodiscard]] inline PingPongResult result_from(const std::vector<Clock::time_point>& send_times) {
    PingPongResult result;
    const Clock::time_point end = Clock::now();
    if (!send_times.empty()) {
        result.usec = std::chrono::duration<double, std::micro>(end - send_times.front()).count();
    }
    for (std::size_t i = 0; i + 1 < send_times.size(); ++i) {
        result.round_trips.push_back(
            std::chrono::duration<double, std::micro>(send_times[i + 1] - send_times[i]).count());
    }
    return result;
}
//! [pingpong_setup]

//! [session_end]
// The handshake (ibv_rc_pingpong's) does not carry -n, so a step04 side marks its last message:
// a send with immediate data, which ibv_rc_pingpong ignores. A side that receives the mark
// before its own last message knows that the peer ended the session, and can say so instead of
// waiting for messages that never come and then blaming a dead peer.
inline void mark_if_last(ibv_send_wr& wr, long long index, long long total) {
    wr.opcode = IBV_WR_SEND;
    if (index + 1 == total) {
        wr.opcode = IBV_WR_SEND_WITH_IMM;
        wr.imm_data = htonl(static_cast<std::uint32_t>(total));  // the count, for a packet trace
    }
}

[[nodiscard]] inline bool is_last_message(const ibv_wc& wc) {
    return (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
}

[[nodiscard]] inline TutorialError peer_ended_early(bool client, long long received,
                                                    long long total) {
    return TutorialError(kExitPeer,
                         std::string(client ? "the server" : "the client") +
                             " ended the session after " + std::to_string(received) +
                             " messages; both sides must use the same -n",
                         "this side was to run " + std::to_string(total) +
                             " (-n plus --warmup); the handshake does not carry -n");
}
//! [session_end]

//! [received_message]
// Client and server messages of the same iteration carry different patterns.
[[nodiscard]] inline std::uint64_t pattern_id(long long iteration, bool from_client) {
    return static_cast<std::uint64_t>(iteration) * 2 + (from_client ? 0 : 1);
}

// A receive completed: the message must have our size and, with --check, the peer's pattern.
inline void check_received(const Resources& resources, const PingPongPlan& plan, const ibv_wc& wc,
                           long long index) {
    if (wc.byte_len != plan.size) {
        throw TutorialError(kExitPeer,
                            "received a " + std::to_string(wc.byte_len) +
                                "-byte message, but -s is " + std::to_string(plan.size),
                            "both sides must use the same -s");
    }
    if (plan.check) {
        const std::span<const std::byte> message(resources.buffer.get(), plan.size);
        if (const auto offset = find_pattern_mismatch(message, pattern_id(index, !plan.client))) {
            throw TutorialError(kExitPeer, "--check: message " + std::to_string(index) +
                                               " is wrong at byte " + std::to_string(*offset));
        }
    }
}
//! [received_message]

}  // namespace tutorial
