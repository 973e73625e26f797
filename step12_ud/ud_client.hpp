// Step 12: the client. Nothing acknowledges a datagram, so the client numbers its pings and sends
// one again when its answer does not come in time.
#pragma once

#include "errors.hpp"
#include "pingpong.hpp"
#include "resources.hpp"

#include <infiniband/verbs.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace tutorial {

struct ClientCounts {
    long long resent = 0;      // pings sent again after --resend-ms without an answer
    long long duplicates = 0;  // other datagrams: mostly late answers to a resent ping
};

//! [client_loop]
// Ping k carries k in its immediate data (kLastBit too on the last); the server answers with the
// same number. A ping not answered within plan.resend is sent again; an answer with another
// number is counted and dropped. Nothing for plan.timeout: the server is gone, or drops our pings.
inline PingPongResult run_client(const Resources& resources, const PingPongPlan& plan,
                                 ibv_ah* server, std::uint32_t server_qpn, std::uint32_t qkey,
                                 ClientCounts& counts) {
    const long long total = plan.warmup + plan.iters;
    const int send_slot = resources.slots - 1;
    std::vector<Clock::time_point> send_times;
    send_times.reserve(static_cast<std::size_t>(plan.iters));
    bool send_pending = false;  // our last send has not completed: the send slot is in use
    std::uint32_t imm = 0;
    // A completion: true when it is the answer to the ping numbered imm.
    const auto take = [&](const ibv_wc& wc) {
        if (is_send(wc)) {
            send_pending = false;
            return false;
        }
        const bool answer = (wc.wc_flags & IBV_WC_WITH_IMM) != 0 && ntohl(wc.imm_data) == imm;
        if (!answer) { ++counts.duplicates; }
        post_receive(resources, slot_of(wc));
        return answer;
    };
    for (long long k = 0; k < total; ++k) {
        imm = static_cast<std::uint32_t>(k) | (k + 1 == total ? kLastBit : 0);
        if (k >= plan.warmup) { send_times.push_back(Clock::now()); }
        const Clock::time_point give_up = Clock::now() + plan.timeout;
        bool answered = false, sent = false;
        while (!answered) {
            while (send_pending && !answered) {  // one send at a time from the one send slot
                const auto wc = poll_until(resources, give_up);
                if (!wc) { break; }
                answered = take(*wc);
            }
            if (!answered && !send_pending) {
                if (sent) { ++counts.resent; }
                send_datagram(resources, send_slot, plan.size, server, server_qpn, qkey, imm);
                send_pending = sent = true;
                const Clock::time_point resend_at = std::min(Clock::now() + plan.resend, give_up);
                while (!answered) {
                    const auto wc = poll_until(resources, resend_at);
                    if (!wc) { break; }
                    answered = take(*wc);
                }
            }
            if (!answered && Clock::now() >= give_up) {
                throw TutorialError(kExitTimeout,
                                    "no answer to ping " + std::to_string(k) + " for " +
                                        std::to_string(plan.timeout.count()) + " s",
                                    "is the server running, with this QP number and the same "
                                    "--qkey? A datagram to a wrong QP or Q_Key is dropped "
                                    "without a trace");
            }
        }
    }
    return result_from(send_times);
}
//! [client_loop]

}  // namespace tutorial
