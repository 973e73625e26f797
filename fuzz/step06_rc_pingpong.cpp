// Fuzz target: what step06's server reads from a client: ibv_rc_pingpong's message as step04's
// parse_wire_message (carried in wire_format.hpp) parses it, printable_bytes() that quotes the
// bytes in the log, and the --check payload test (pingpong.hpp's payload_ok).
// fuzz-sources: step06_epoll/rdma_endpoint.cpp step06_epoll/endpoint_events.cpp
#include "../step06_epoll/pingpong.hpp"
#include "../step06_epoll/wire_format.hpp"

#include "endpoint_properties.hpp"

#include <cctype>
#include <vector>

namespace {

// parse_wire_message over arbitrary bytes: what it accepts formats back to itself (hex case
// aside), and what the server answers parses back to itself (LID, QPN, PSN, GID).
void check_wire_message(const std::uint8_t* data, std::size_t size) {
    using namespace tutorial;
    const std::span<const char> bytes(reinterpret_cast<const char*>(data), size);
    std::string error;
    if (const std::optional<QpEndpointInfo> info = parse_wire_message(bytes, error)) {
        if (size != kWireMessageSize || info->qpn < 2 || info->qpn > 0xffffff ||
            info->psn > 0xffffff) {
            fuzz::property_failed(
                "parse_wire_message accepted a wrong size or a QPN/PSN out of range");
        }
        const WireMessage again = format_wire_message(*info);
        for (std::size_t i = 0; i < size; ++i) {
            if (again[i] != std::tolower(static_cast<unsigned char>(bytes[i]))) {
                fuzz::property_failed("format(parse(x)) != x");
            }
        }
    } else if (error.empty()) {
        fuzz::property_failed("rejected without saying why");
    }
    if (size >= 24) {
        QpEndpointInfo local;
        local.lid = static_cast<std::uint16_t>(fuzz::load_be(data, 2));
        local.qpn =
            std::max<std::uint32_t>(static_cast<std::uint32_t>(fuzz::load_be(data + 2, 3)), 2);
        local.psn = static_cast<std::uint32_t>(fuzz::load_be(data + 5, 3));
        std::memcpy(local.gid.data(), data + 8, local.gid.size());
        const WireMessage message = format_wire_message(local);
        const auto back = parse_wire_message(message, error);
        if (!back || back->lid != local.lid || back->qpn != local.qpn || back->psn != local.psn ||
            back->gid != local.gid) {
            fuzz::property_failed("parse(format(x)) != x");
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace tutorial;
    check_wire_message(data, size);

    const std::span<const char> bytes(reinterpret_cast<const char*>(data), size);
    const std::string quoted = printable_bytes(bytes);
    for (const char c : quoted) {
        if (c < 0x20 || c >= 0x7f) {
            fuzz::property_failed("printable_bytes let a control byte through");
        }
    }
    if (quoted.size() > 64 * 4 + 5) { fuzz::property_failed("printable_bytes is not bounded"); }

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
