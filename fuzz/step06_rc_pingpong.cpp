// Fuzz target: what step06's server reads from a client: ibv_rc_pingpong's message as step06's
// copy of RDMAEndpoint parses it (parse_rc_pingpong), main.cpp's printable() that quotes the
// bytes in the log, and the --check payload test (payload_ok).
// fuzz-sources: step06_epoll/rdma_endpoint.cpp
#define RDMA_TUTORIAL_UNIT_TEST
#include "../step06_epoll/main.cpp"

#include "endpoint_properties.hpp"

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
