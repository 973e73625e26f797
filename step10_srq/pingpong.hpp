// One side of step04's ping-pong over a Connection: the device's config from the options, the
// --check payload, the engine, and the shared CQ's end (its events taken and counted).
#pragma once

#include <infiniband/verbs.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <stdexcept>
#include <string>

#include "connection.hpp"
#include "cq_events.hpp"
#include "handshake.hpp"
#include "options.hpp"
#include "qp_transitions.hpp"
#include "shared_cq.hpp"
#include "tcp.hpp"

namespace tutorial {

inline DeviceConfig device_config(const Options& o) {
    return {o.device_name,
            static_cast<std::uint8_t>(o.ib_port),
            o.gid_index,
            static_cast<std::uint8_t>(o.service_level),
            static_cast<std::uint8_t>(o.traffic_class),
            static_cast<std::uint16_t>(o.pkey_index)};
}

// v3 carries -s and -n: a mismatch is an error at connect time.
inline HandshakeSettings handshake_settings(const Options& o) {
    HandshakeSettings h;
    h.message_size = static_cast<std::uint32_t>(o.size);
    h.iterations = o.iters;
    h.timeout = std::chrono::seconds(o.timeout_seconds);
    return h;
}

inline void print_address(const char* which, const PeerInfo& info) {
    std::printf("  %s address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", which, info.lid,
                info.qpn, info.psn, format_gid(info.gid).c_str());
}

// ------------------------------------------------------------ payload check

/// The --check pattern's byte `k` of message `iter` sent by `side` (0 client, 1 server): step04's
/// pattern, byte k of message id is (id + k) mod 251, where id = 2 * iter + side.
[[nodiscard]] inline std::byte payload_byte(std::size_t k, std::uint32_t iter, int side) {
    const std::uint64_t id = std::uint64_t{iter} * 2 + static_cast<std::uint64_t>(side);
    return static_cast<std::byte>((id + k) % 251);
}

inline void fill_payload(std::span<std::byte> message, std::uint32_t iter, int side) {
    for (std::size_t k = 0; k < message.size(); ++k) { message[k] = payload_byte(k, iter, side); }
}

/// Compares byte by byte, so that checking a message allocates nothing.
[[nodiscard]] inline bool payload_ok(std::span<const std::byte> message, std::uint32_t iter,
                                     int side) {
    for (std::size_t k = 0; k < message.size(); ++k) {
        if (message[k] != payload_byte(k, iter, side)) { return false; }
    }
    return true;
}

// ------------------------------------------------------- the ping-pong engine

inline constexpr int kClientSide = 0, kServerSide = 1;

//! [pingpong]
/// One side of step04's ping-pong over a connection; the caller hands in each message's bytes.
/// A send's wr_id is kSendTag | its index. As in step04, each side sends its next message
/// as soon as the peer's has arrived, and only every tx_depth/2-th send (and the
/// last) asks for a completion: so a waiting side is woken once per message, by
/// the peer's message, not a second time by its own send's completion. Reusing
/// the send slot is safe for the same reason as in step04: the peer answers
/// only what has arrived.
class PingPong {
  public:
    PingPong(Connection& connection, const Options& options, int side)
        : conn_(connection),
          size_(options.size),
          iters_(options.iters),
          tx_depth_(static_cast<std::uint32_t>(options.tx_depth)),
          signal_every_(std::max(1U, tx_depth_ / 2)),
          check_(options.check),
          side_(side) {}

    /// Handles one work completion (for a receive, with the bytes that landed); throws
    /// WorkCompletionError on a failed one and TutorialError(kExitPeer) on a bad payload.
    void on_completion(const ibv_wc& wc, std::span<const std::byte> received) {
        const bool send = (wc.wr_id & kSendTag) != 0;
        if (wc.status != IBV_WC_SUCCESS) { throw WorkCompletionError(wc, !send); }
        if (send) {
            on_send_done(wc.wr_id);
        } else {
            if (wc.byte_len != size_) {
                throw TutorialError(kExitPeer, "message " + std::to_string(received_) + " has " +
                                                   std::to_string(wc.byte_len) +
                                                   " bytes, expected " + std::to_string(size_) +
                                                   " (same -s on both sides?)");
            }
            if (check_) {
                if (!payload_ok(received, received_, 1 - side_)) {
                    throw TutorialError(kExitPeer, "message " + std::to_string(received_) +
                                                       " failed the --check pattern");
                }
                ++verified_;
            }
            ++received_;
            awaiting_receive_ = false;
            last_receive_ = Clock::now();
        }
    }

    /// A send's completion, even flushed: it and every unsignaled send before it are done.
    void on_send_done(std::uint64_t wr_id) {
        const auto index = static_cast<std::uint32_t>(wr_id & ~kSendTag);
        if (index >= sent_) {
            throw std::logic_error("a completion for send " + std::to_string(index) +
                                   ", which was not posted");
        }
        completed_sends_ = std::max(completed_sends_, index + 1);
    }

    /// Posts the next message when the ping-pong allows it; true if it did.
    bool maybe_send() {
        if (!ready_to_send()) { return false; }
        // The server answers message i; the client sends message i after reply i-1.
        if (side_ == kServerSide && sent_ >= received_) { return false; }
        if (check_) { fill_payload(conn_.send_slot(), sent_, side_); }
        last_send_ = Clock::now();
        const bool signaled = (sent_ + 1) % signal_every_ == 0 || sent_ + 1 == iters_;
        conn_.post_send(kSendTag | sent_, size_, signaled);
        ++sent_;
        awaiting_receive_ = side_ == kClientSide;
        return true;
    }

    [[nodiscard]] bool complete() const {
        return received_ == iters_ && completed_sends_ == iters_;
    }
    [[nodiscard]] bool ready_to_send() const {
        // Room in the send queue: its unsignaled sends are freed only by a later
        // signaled one, so never more than tx_depth outstanding.
        return !awaiting_receive_ && sent_ < iters_ && sent_ - completed_sends_ < tx_depth_;
    }
    [[nodiscard]] std::uint32_t received() const { return received_; }
    [[nodiscard]] std::uint32_t sent() const { return sent_; }
    [[nodiscard]] std::uint32_t verified() const { return verified_; }
    /// Sends posted whose completion (or a later one's) has not come back yet.
    [[nodiscard]] bool sends_outstanding() const { return completed_sends_ < sent_; }
    [[nodiscard]] Clock::time_point last_send() const { return last_send_; }
    [[nodiscard]] Clock::time_point last_receive() const { return last_receive_; }

  private:
    Connection& conn_;
    std::size_t size_;
    std::uint32_t iters_;
    std::uint32_t tx_depth_;
    std::uint32_t signal_every_;
    bool check_;
    int side_;
    std::uint32_t sent_ = 0, received_ = 0, completed_sends_ = 0, verified_ = 0;
    bool awaiting_receive_ = false;
    Clock::time_point last_send_{}, last_receive_{};
};
//! [pingpong]

/// Takes the events already queued on the channel, just before the final ack, so that the
/// event counts include one that arrived after the last message.
inline void take_queued_events(SharedCompletionQueue& ep) noexcept {
    try {
        while (ep.get_event()) { ep.events().on_event(); }
    } catch (const std::exception&) {
        return;  // only the statistics lose: the final ack and destroy still run
    }
}

/// What the shared CQ's events came to, for the line each side prints at the end.
[[nodiscard]] inline std::string event_counts(const CqEventTracker& ev) {
    char text[256];
    std::snprintf(
        text, sizeof text, "events %llu, acked %llu, empty drains %llu, safety-net finds %llu",
        static_cast<unsigned long long>(ev.received()), static_cast<unsigned long long>(ev.acked()),
        static_cast<unsigned long long>(ev.empty_drains()),
        static_cast<unsigned long long>(ev.safety_net_finds()));
    return text;
}

}  // namespace tutorial
