// What the client, the server and the handshake mode share: the plan, posting a receive into
// its slot, sending a datagram, and waiting for one completion.
#pragma once

#include "errors.hpp"
#include "resources.hpp"
#include "tcp.hpp"
#include "wc_status.hpp"

#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

namespace tutorial {

// Receives carry their slot's index as wr_id; sends carry it with this bit set.
inline constexpr std::uint64_t kSendBit = 1ULL << 63;
// The immediate data of the client's messages: the sequence number, and this bit on the last.
inline constexpr std::uint32_t kLastBit = 1U << 31;

struct PingPongPlan {
    std::size_t size = 0;
    long long iters = 0;   // measured iterations
    long long warmup = 0;  // iterations before them, left out of the figures
    bool client = false;
    std::chrono::seconds timeout{10};
    std::chrono::milliseconds resend{100};
};

struct PingPongResult {
    double usec = 0;                  // wall time of the measured iterations
    std::vector<double> round_trips;  // usec, one per measured iteration but the last
};

//! [post_receive]
// A receive of a whole slot: 40 bytes for the GRH, then room for the largest message.
inline void post_receive(const Resources& resources, int slot) {
    ibv_sge sge{};
    sge.addr = reinterpret_cast<std::uintptr_t>(resources.slot(slot));
    sge.length = static_cast<std::uint32_t>(resources.slot_size);
    sge.lkey = resources.mr->lkey;
    ibv_recv_wr wr{};
    wr.wr_id = static_cast<std::uint64_t>(slot);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (const int rc = ibv_post_recv(resources.qp.get(), &wr, &bad); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_post_recv");
    }
}
//! [post_receive]

//! [send_datagram]
// One message from a slot (after its 40 bytes) to the QP remote_qpn at the address ah. The
// work request names the destination; the Q_Key must be the one the receiving QP was given.
inline void send_datagram(const Resources& resources, int slot, std::size_t length, ibv_ah* ah,
                          std::uint32_t remote_qpn, std::uint32_t qkey,
                          std::optional<std::uint32_t> imm) {
    ibv_sge sge{};
    sge.addr = reinterpret_cast<std::uintptr_t>(resources.slot(slot) + kGrhBytes);
    sge.length = static_cast<std::uint32_t>(length);
    sge.lkey = resources.mr->lkey;
    ibv_send_wr wr{};
    wr.wr_id = kSendBit | static_cast<std::uint64_t>(slot);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
    wr.imm_data = htonl(imm.value_or(0));
    wr.send_flags =
        length <= resources.max_inline ? IBV_SEND_SIGNALED | IBV_SEND_INLINE : IBV_SEND_SIGNALED;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = remote_qpn;
    wr.wr.ud.remote_qkey = qkey;
    ibv_send_wr* bad = nullptr;
    if (const int rc = ibv_post_send(resources.qp.get(), &wr, &bad); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_post_send");
    }
}
//! [send_datagram]

// One completion, failed or not, or none by the deadline. Ctrl-C throws.
[[nodiscard]] inline std::optional<ibv_wc> next_completion(const Resources& resources,
                                                           Clock::time_point deadline) {
    for (long long polls = 1;; ++polls) {
        ibv_wc wc{};
        const int n = ibv_poll_cq(resources.cq.get(), 1, &wc);
        if (n < 0) { throw std::system_error(EIO, std::generic_category(), "ibv_poll_cq"); }
        if (n == 1) { return wc; }
        if (polls % 256 == 0) {  // now and then: the clock is not free
            throw_if_stopped();
            if (Clock::now() >= deadline) { return std::nullopt; }
        }
    }
}

// The same, where a failed completion ends the program: it throws, naming the status.
[[nodiscard]] inline std::optional<ibv_wc> poll_until(const Resources& resources,
                                                      Clock::time_point deadline) {
    const std::optional<ibv_wc> wc = next_completion(resources, deadline);
    if (wc && wc->status != IBV_WC_SUCCESS) { throw_wc_error(*wc, (wc->wr_id & kSendBit) == 0); }
    return wc;
}

// The message's length: what the receive got, less the 40 bytes of the GRH.
[[nodiscard]] inline std::size_t message_length(const ibv_wc& wc) {
    return wc.byte_len > kGrhBytes ? wc.byte_len - kGrhBytes : 0;
}

[[nodiscard]] inline int slot_of(const ibv_wc& wc) {
    return static_cast<int>(wc.wr_id & ~kSendBit);
}
[[nodiscard]] inline bool is_send(const ibv_wc& wc) { return (wc.wr_id & kSendBit) != 0; }

// The send times give the figures: one round trip between two consecutive first sends.
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

}  // namespace tutorial
