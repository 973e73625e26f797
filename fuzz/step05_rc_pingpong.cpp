// Fuzz target: step05's peer input besides handshake v3: ibv_rc_pingpong's message as
// RDMAEndpoint parses it in --rc-pingpong-compat (step04's parse_wire_message, carried in
// wire_format.hpp), and the check of the pattern a peer wrote into our buffer (verify_pattern).
// fuzz-sources: step05_endpoint/rdma_endpoint.cpp step05_endpoint/handshake.cpp
#define RDMA_TUTORIAL_UNIT_TEST
#include "../step05_endpoint/main.cpp"

#include "endpoint_properties.hpp"

#include <cctype>

namespace {

// parse_wire_message over arbitrary bytes: what it accepts formats back to itself (hex case
// aside), and what this program sends parses back to itself.
void check_wire_message(const std::uint8_t* data, std::size_t size) {
    using namespace tutorial;
    const std::span<const char> bytes(reinterpret_cast<const char*>(data), size);
    std::string error;
    if (const std::optional<QpEndpointInfo> info = parse_wire_message(bytes, error)) {
        const WireMessage again = format_wire_message(*info);
        for (std::size_t i = 0; i < size; ++i) {
            if (size != kWireMessageSize ||
                again[i] != std::tolower(static_cast<unsigned char>(bytes[i]))) {
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

    // The first 8 bytes choose the seed, the rest is the buffer the peer wrote.
    if (size >= 8) {
        std::uint64_t seed = 0;
        std::memcpy(&seed, data, sizeof seed);
        const auto buffer = std::as_bytes(std::span(data + 8, size - 8));
        std::vector<std::byte> expected(buffer.size());
        fill_pattern(expected, seed);
        const bool same = std::equal(buffer.begin(), buffer.end(), expected.begin());
        bool accepted = true;
        try {
            verify_pattern(buffer, seed, "fuzz");
        } catch (const TutorialError& e) {
            accepted = false;
            if (e.exit_code() != kExitRdma) {
                fuzz::property_failed("verify_pattern threw with the wrong exit code");
            }
        }
        if (accepted != same) {
            fuzz::property_failed("verify_pattern disagrees with fill_pattern");
        }
    }
    return 0;
}
