// What step11 keeps of step04's wire format: the endpoint's fields, "done", and how to show
// bytes in an error message. (ibv_rc_pingpong's text message is not carried: no step11 peer
// speaks it.)
#pragma once

#include "gid.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

namespace tutorial {

// After the handshake the client ends with the 5 bytes "done" plus NUL, as ibv_rc_pingpong does.
inline constexpr char kDoneMessage[] = "done";  // sent with its NUL: 5 bytes

struct QpEndpointInfo {
    std::uint16_t lid = 0;
    std::uint32_t qpn = 0;  // 24 bits
    std::uint32_t psn = 0;  // 24 bits
    GidBytes gid{};
};

// The bytes as a C string literal would show them, for error messages: "ab\x01\0".
[[nodiscard]] inline std::string printable_bytes(std::span<const char> bytes,
                                                 std::size_t limit = 64) {
    std::string text = "\"";
    for (std::size_t i = 0; i < bytes.size() && i < limit; ++i) {
        const auto c = static_cast<unsigned char>(bytes[i]);
        if (c == '\0') {
            text += "\\0";
        } else if (c == '"' || c == '\\') {
            text += '\\';
            text += static_cast<char>(c);
        } else if (c >= 0x20 && c < 0x7f) {
            text += static_cast<char>(c);
        } else {
            char escaped[5];
            std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
            text += escaped;
        }
    }
    return text + (bytes.size() > limit ? "\"..." : "\"");
}

}  // namespace tutorial
