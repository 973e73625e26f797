// Fuzz target: step04's strict parser of ibv_rc_pingpong's handshake message (parse_wire_message),
// the 52 bytes a peer sends over TCP. Besides "no crash": anything accepted formats back to the
// same bytes (modulo hex case), and every info the program can send parses back to itself.
#define RDMA_TUTORIAL_UNIT_TEST
#include "../step04_pingpong/main.cpp"

#include <cctype>

namespace {

[[noreturn]] void property_failed(const char* what) {
    std::fprintf(stderr, "property failed: %s\n", what);
    std::abort();
}

std::uint32_t load24(const std::uint8_t* at) {
    return std::uint32_t{at[0]} << 16 | std::uint32_t{at[1]} << 8 | at[2];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace tutorial;
    const std::span<const char> bytes(reinterpret_cast<const char*>(data), size);

    std::string error;
    const std::optional<QpEndpointInfo> info = parse_wire_message(bytes, error);
    if (info) {
        // Accepted: exactly 52 bytes, and our own formatter writes them back (lower-case hex).
        if (size != kWireMessageSize) {
            property_failed("accepted a message that is not 52 bytes");
        }
        const WireMessage again = format_wire_message(*info);
        for (std::size_t i = 0; i < size; ++i) {
            if (again[i] != std::tolower(static_cast<unsigned char>(bytes[i]))) {
                property_failed("format(parse(x)) != x");
            }
        }
        if (info->qpn < 2 || info->qpn > 0xffffff || info->psn > 0xffffff) {
            property_failed("accepted a QPN or PSN out of range");
        }
    } else if (error.empty()) {
        property_failed("rejected without saying why");
    }

    // The error message quotes what arrived: it must stay printable whatever the bytes.
    for (const char c : printable_bytes(bytes)) {
        if (c < 0x20 || c >= 0x7f) {
            property_failed("printable_bytes let a control byte through");
        }
    }

    // parse(format(x)) == x for any info this program can send (QPN >= 2, 24-bit QPN and PSN).
    if (size >= 24) {
        QpEndpointInfo local;
        local.lid = static_cast<std::uint16_t>(data[0] << 8 | data[1]);
        local.qpn = std::max<std::uint32_t>(load24(data + 2), 2);
        local.psn = load24(data + 5);
        std::memcpy(local.gid.data(), data + 8, local.gid.size());
        const WireMessage message = format_wire_message(local);
        std::string why;
        const std::optional<QpEndpointInfo> back = parse_wire_message(message, why);
        if (!back || back->lid != local.lid || back->qpn != local.qpn || back->psn != local.psn ||
            back->gid != local.gid) {
            std::fprintf(stderr, "parse(format(x)) failed: %s\n", why.c_str());
            property_failed("parse(format(x)) != x");
        }
    }
    return 0;
}
