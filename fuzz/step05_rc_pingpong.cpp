// Fuzz target: step05's peer input besides handshake v2: ibv_rc_pingpong's message as
// RDMAEndpoint parses it (parse_rc_pingpong, --rc-pingpong-compat), and main.cpp's check of the
// pattern a peer wrote into our buffer (verify_pattern).
// fuzz-sources: step05_endpoint/rdma_endpoint.cpp
#define RDMA_TUTORIAL_UNIT_TEST
#include "../step05_endpoint/main.cpp"

#include "endpoint_properties.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace tutorial;
    fuzz::check_rc_pingpong(data, size);

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
