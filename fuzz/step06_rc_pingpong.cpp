// Fuzz target: what step06's server reads from a client: ibv_rc_pingpong's message as step06's
// copy of RDMAEndpoint parses it (parse_rc_pingpong), sockets.hpp's printable() that quotes the
// bytes in the log, and the --check payload test (pingpong.hpp's payload_ok).
// fuzz-sources: step06_epoll/rdma_endpoint.cpp
#include "../step06_epoll/pingpong.hpp"
#include "../step06_epoll/sockets.hpp"

#include "endpoint_properties.hpp"

namespace fuzz {

// parse_rc_pingpong over arbitrary bytes; format(parse(x)) == x (hex case aside), and
// parse(format(x)) == x for the fields on this wire (LID, QPN, PSN, GID).
inline void check_rc_pingpong(const std::uint8_t* data, std::size_t size) {
    using namespace tutorial;
    const std::span<const char> message(reinterpret_cast<const char*>(data), size);
    try {
        const PeerInfo info = parse_rc_pingpong(message);
        if (size != kRcPingpongMessageSize || info.qpn < 2 || info.qpn > 0xffffff ||
            info.psn > 0xffffff) {
            property_failed("parse_rc_pingpong accepted a wrong size or a QPN/PSN out of range");
        }
        const auto again = format_rc_pingpong(info);
        for (std::size_t i = 0; i < size; ++i) {
            if (again[i] != std::tolower(static_cast<unsigned char>(message[i]))) {
                property_failed("format(parse(x)) != x");
            }
        }
    } catch (const TutorialError& e) {
        expect_peer_error(e);
    }

    if (size >= 24) {
        PeerInfo local;
        local.lid = static_cast<std::uint16_t>(load_be(data, 2));
        local.qpn = std::max<std::uint32_t>(static_cast<std::uint32_t>(load_be(data + 2, 3)), 2);
        local.psn = static_cast<std::uint32_t>(load_be(data + 5, 3));
        std::memcpy(local.gid.raw, data + 8, 16);
        PeerInfo back;
        try {
            back = parse_rc_pingpong(format_rc_pingpong(local));
        } catch (const TutorialError& e) {
            std::fprintf(stderr, "parse(format(x)) threw: %s\n", e.what());
            property_failed("parse(format(x)) rejected a valid info");
        }
        if (back.lid != local.lid || back.qpn != local.qpn || back.psn != local.psn ||
            std::memcmp(back.gid.raw, local.gid.raw, 16) != 0) {
            property_failed("parse(format(x)) != x");
        }
    }
}

}  // namespace fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace tutorial;
    fuzz::check_rc_pingpong(data, size);

    const std::span<const char> bytes(reinterpret_cast<const char*>(data), size);
    const std::string quoted = printable(bytes);
    for (const char c : quoted) {
        if (c < 0x20 || c >= 0x7f) {
            fuzz::property_failed("printable let a control byte through");
        }
    }
    if (quoted.size() > 60 * 4 + 3) {
        fuzz::property_failed("printable is not bounded");
    }

    // The first 5 bytes choose the iteration and the side, the rest is the received message.
    if (size >= 5) {
        std::uint32_t iter = 0;
        std::memcpy(&iter, data, sizeof iter);
        const int side = data[4] & 1;
        const auto message = std::as_bytes(std::span(data + 5, size - 5));
        std::vector<std::byte> expected(message.size());
        fill_payload(expected, iter, side);
        const bool same = std::equal(message.begin(), message.end(), expected.begin());
        if (payload_ok(message, iter, side) != same) {
            fuzz::property_failed("payload_ok disagrees with fill_payload");
        }
        if (!payload_ok(expected, iter, side)) {
            fuzz::property_failed("fill_payload's own message fails payload_ok");
        }
    }
    return 0;
}
