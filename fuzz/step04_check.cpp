// Fuzz target: what step04 reads from the peer after the handshake: the --check agreement
// (peer_offers_check: nothing, or "check" and a NUL) and the --check payload pattern
// (find_pattern_mismatch over a received message).
#define RDMA_TUTORIAL_UNIT_TEST
#include "../step04_pingpong/main.cpp"

namespace {

[[noreturn]] void property_failed(const char* what) {
    std::fprintf(stderr, "property failed: %s\n", what);
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace tutorial;
    // agree_on_check reads at most 16 bytes; the fuzzer may give any length.
    const std::span<const char> bytes(reinterpret_cast<const char*>(data), size);
    const bool is_check =
        size == sizeof kCheckMessage && std::memcmp(data, kCheckMessage, size) == 0;
    try {
        const bool offered = peer_offers_check(bytes, "fuzzer");
        if (offered != is_check || (!offered && size != 0)) {
            property_failed("peer_offers_check accepted the wrong bytes");
        }
    } catch (const TutorialError& e) {
        if (is_check || size == 0 || e.exit_code() != kExitPeer) {
            property_failed("peer_offers_check rejected valid bytes, or not as a peer error");
        }
    }

    // The pattern check: the first 8 bytes choose the iteration, the rest is the message.
    if (size >= 8) {
        std::uint64_t iteration = 0;
        std::memcpy(&iteration, data, sizeof iteration);
        const auto message = std::as_bytes(std::span(data + 8, size - 8));
        const std::optional<std::size_t> bad = find_pattern_mismatch(message, iteration);
        std::vector<std::byte> expected(message.size());
        fill_pattern(expected, iteration);
        const auto differs = std::mismatch(message.begin(), message.end(), expected.begin());
        const std::optional<std::size_t> first =
            differs.first == message.end()
                ? std::nullopt
                : std::optional<std::size_t>(differs.first - message.begin());
        if (bad != first) { property_failed("find_pattern_mismatch disagrees with fill_pattern"); }
        if (find_pattern_mismatch(expected, iteration)) {
            property_failed("fill_pattern's own message fails the check");
        }
    }
    return 0;
}
