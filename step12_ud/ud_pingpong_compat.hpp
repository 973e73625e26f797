// Step 12: --handshake, ibv_ud_pingpong's traffic: one message each way per iteration, the client
// first, no numbers and no resends. A lost message ends the run at --timeout, as it does there.
#pragma once

#include "connect.hpp"
#include "errors.hpp"
#include "pingpong.hpp"
#include "resources.hpp"

#include <infiniband/verbs.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tutorial {

// The peer's last message came before ours: it carries immediate data (ibv_ud_pingpong's not).
[[nodiscard]] inline TutorialError peer_ended_early(bool client, long long received,
                                                    long long total) {
    return TutorialError(kExitPeer,
                         std::string(client ? "the server" : "the client") +
                             " ended the session after " + std::to_string(received) +
                             " messages; both sides must use the same -n",
                         "this side was to run " + std::to_string(total) +
                             " (-n plus --warmup); the handshake does not carry -n");
}

// A receive completed: its message must have our size (the 40 bytes of GRH are not the peer's).
inline void check_size(const ibv_wc& wc, std::size_t size) {
    if (message_length(wc) != size) {
        throw TutorialError(kExitPeer,
                            "received a " + std::to_string(message_length(wc)) +
                                "-byte message, but -s is " + std::to_string(size),
                            "both sides must use the same -s");
    }
}

//! [compat_loop]
inline PingPongResult run_compat(const Resources& resources, const PingPongPlan& plan,
                                 std::uint32_t peer_qpn, std::uint32_t qkey) {
    const long long total = plan.warmup + plan.iters;
    long long end = total;  // fewer when the peer's last message comes first
    long long sent = 0, received = 0, completed = 0;
    std::vector<Clock::time_point> send_times;
    send_times.reserve(static_cast<std::size_t>(plan.iters));
    const auto send = [&] {
        if (sent >= plan.warmup) { send_times.push_back(Clock::now()); }
        const auto mark =
            sent + 1 == total ? std::optional(static_cast<std::uint32_t>(total)) : std::nullopt;
        send_datagram(resources, resources.slots - 1, plan.size, resources.peer.get(), peer_qpn,
                      qkey, mark);
        ++sent;
    };
    const long long answers = plan.client ? 0 : 1;  // the client sends first
    // A receive is posted again after the answer is sent, off the round trip, when others are
    // still posted to take the peer's next message; with -r 1, before (a datagram that finds
    // no receive is dropped).
    const int receive_slots = resources.slots - 1;  // the last slot is the send slot
    const bool answer_first = receive_slots > 1;
    if (plan.client) { send(); }
    while (received < end || completed < end) {
        const auto wc = poll_until(resources, Clock::now() + plan.timeout);
        if (!wc) {
            throw TutorialError(
                kExitTimeout,
                "nothing from the peer for " + std::to_string(plan.timeout.count()) + " s (after " +
                    std::to_string(received) + " of " + std::to_string(total) + " messages)",
                "is the peer still running, with the same -s? In this mode a lost "
                "datagram is never sent again, and one longer than the receive "
                "may be dropped without a trace");
        }
        if (is_send(*wc)) {
            ++completed;
        } else {
            check_size(*wc, plan.size);
            if (!answer_first) { post_receive(resources, slot_of(*wc)); }
            if (++received < total && (wc->wc_flags & IBV_WC_WITH_IMM) != 0) { end = received; }
        }
        if (sent < end && completed == sent && received >= sent + answers) { send(); }
        if (answer_first && !is_send(*wc)) { post_receive(resources, slot_of(*wc)); }
    }
    if (end < total) { throw peer_ended_early(plan.client, end, total); }
    return result_from(send_times);
}
//! [compat_loop]

}  // namespace tutorial
