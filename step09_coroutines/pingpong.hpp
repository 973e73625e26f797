// Around step09's ping-pong: the endpoint's config from the options, the --check payload, and
// the endpoint's end (its events taken and counted).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <stdexcept>
#include <string>

#include "cq_events.hpp"
#include "handshake.hpp"
#include "options.hpp"
#include "qp_transitions.hpp"
#include "rdma_endpoint.hpp"
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

inline EndpointConfig endpoint_config(const Options& o, bool channel) {
    EndpointConfig c;
    c.buffer_size = 2 * o.size;  // [receive slot | send slot]
    c.tx_depth = static_cast<std::uint32_t>(o.tx_depth);
    c.rx_depth = static_cast<std::uint32_t>(o.rx_depth);
    c.mtu = *mtu_from_bytes(o.mtu);  // parse_options allows IB MTUs only
    c.completion_channel = channel;
    return c;
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

// The side that sends a message, for its --check payload.
inline constexpr int kClientSide = 0, kServerSide = 1;

/// Takes the events already queued on the channel, just before the final ack, so that the
/// event counts include one that arrived after the last message.
inline void take_queued_events(RDMAEndpoint& ep) noexcept {
    if (ep.channel_fd() < 0) { return; }
    try {
        while (ep.get_event()) { ep.events().on_event(); }
    } catch (const std::exception&) {
        return;  // only the statistics lose: the final ack and destroy still run
    }
}

/// What an endpoint's events came to, for the line each side prints at the end.
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
