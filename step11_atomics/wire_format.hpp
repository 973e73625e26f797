// ibv_rc_pingpong's 52-byte handshake message: formatting and strict parsing.
#pragma once

#include "gid.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace tutorial {

// ibv_rc_pingpong's handshake message: "%04x:%06x:%06x:%s" (LID, QPN, PSN, GID as 32 hex digits)
// and the terminating NUL, 52 bytes. The client sends first; the server answers; the client ends
// with the 5 bytes "done" plus NUL.
inline constexpr std::size_t kWireMessageSize =
    sizeof "0000:000000:000000:00000000000000000000000000000000";
static_assert(kWireMessageSize == 52);
inline constexpr char kDoneMessage[] = "done";  // sent with its NUL: 5 bytes
using WireMessage = std::array<char, kWireMessageSize>;

struct QpEndpointInfo {
    std::uint16_t lid = 0;
    std::uint32_t qpn = 0;  // 24 bits
    std::uint32_t psn = 0;  // 24 bits
    GidBytes gid{};
};

[[nodiscard]] inline WireMessage format_wire_message(const QpEndpointInfo& info) {
    WireMessage message{};
    // gid_to_wire_gid: the 16 GID bytes in order, as 32 lowercase hex digits.
    char gid_hex[33];
    for (std::size_t i = 0; i < info.gid.size(); ++i) {
        std::snprintf(gid_hex + 2 * i, 3, "%02x", info.gid[i]);
    }
    std::snprintf(message.data(), message.size(), "%04x:%06x:%06x:%s", info.lid,
                  info.qpn & 0xffffff, info.psn & 0xffffff, gid_hex);
    return message;
}

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

// Checks one field: hex digits only, value at most `max`, exactly `width` digits. Returns what is
// wrong, or nothing (and `value` holds the number).
[[nodiscard]] inline std::optional<std::string> parse_hex_field(std::string_view field,
                                                                const char* name, std::size_t width,
                                                                std::uint32_t max,
                                                                std::uint32_t& value) {
    const std::string quoted = " ('" + std::string(field) + "')";
    if (field.empty()) { return std::string(name) + " is empty"; }
    if (field.find_first_not_of("0123456789abcdefABCDEF") != std::string_view::npos) {
        return std::string(name) + " is not hex" + quoted;
    }
    const std::size_t first_significant = std::min(field.find_first_not_of('0'), field.size());
    std::uint64_t number = 0;
    if (field.size() - first_significant <= 8) {
        [[maybe_unused]] const auto parsed = std::from_chars(
            field.data() + first_significant, field.data() + field.size(), number, 16);
    } else {
        number = std::uint64_t{max} + 1;  // more than 8 significant digits: too big anyway
    }
    if (number > max) {
        char limit[48];
        std::snprintf(limit, sizeof limit, " is out of range (at most 0x%x)", max);
        return std::string(name) + limit + quoted;
    }
    if (field.size() != width) {
        return std::string(name) + " must be exactly " + std::to_string(width) +
               " hex digits, got " + std::to_string(field.size()) + quoted;
    }
    value = static_cast<std::uint32_t>(number);
    return std::nullopt;
}

// Strict parser: exactly 52 bytes, the NUL last, four ':'-separated fields of exactly 4, 6, 6 and
// 32 hex digits. Returns the info, or sets `error` to what is wrong.
[[nodiscard]] inline std::optional<QpEndpointInfo> parse_wire_message(std::span<const char> bytes,
                                                                      std::string& error) {
    if (bytes.size() != kWireMessageSize) {
        error = "expected " + std::to_string(kWireMessageSize) + " bytes, got " +
                std::to_string(bytes.size());
        return std::nullopt;
    }
    if (bytes.back() != '\0') {
        error = "the message does not end with a NUL byte";
        return std::nullopt;
    }
    const std::string_view text(bytes.data(), bytes.size() - 1);
    if (const auto nul = text.find('\0'); nul != std::string_view::npos) {
        error = "NUL byte at offset " + std::to_string(nul) + ", before the end of the message";
        return std::nullopt;
    }
    std::array<std::string_view, 4> fields;
    std::size_t start = 0;
    for (std::size_t i = 0; i < fields.size(); ++i) {
        const std::size_t colon = i + 1 < fields.size() ? text.find(':', start) : text.size();
        if (colon == std::string_view::npos) {
            error = "expected 4 fields LID:QPN:PSN:GID separated by ':', found " +
                    std::to_string(i + 1);
            return std::nullopt;
        }
        fields[i] = text.substr(start, colon - start);
        start = colon + 1;
    }
    QpEndpointInfo info;
    std::uint32_t lid = 0;
    if (auto problem = parse_hex_field(fields[0], "LID", 4, 0xffff, lid)) {
        error = *problem;
        return std::nullopt;
    }
    info.lid = static_cast<std::uint16_t>(lid);
    if (auto problem = parse_hex_field(fields[1], "QPN", 6, 0xffffff, info.qpn)) {
        error = *problem;
        return std::nullopt;
    }
    if (auto problem = parse_hex_field(fields[2], "PSN", 6, 0xffffff, info.psn)) {
        error = *problem;
        return std::nullopt;
    }
    if (info.qpn < 2) {
        error = "QPN " + std::to_string(info.qpn) + " is a special QP (QP0/QP1), never an RC QP";
        return std::nullopt;
    }
    const std::string_view gid = fields[3];
    if (gid.size() != 2 * info.gid.size()) {
        error = "GID must be exactly 32 hex digits, got " + std::to_string(gid.size()) + " ('" +
                std::string(gid) + "')";
        return std::nullopt;
    }
    for (std::size_t i = 0; i < info.gid.size(); ++i) {
        std::uint32_t byte = 0;
        if (parse_hex_field(gid.substr(2 * i, 2), "GID", 2, 0xff, byte)) {
            error = "GID is not hex ('" + std::string(gid) + "')";
            return std::nullopt;
        }
        info.gid[i] = static_cast<std::uint8_t>(byte);
    }
    return info;
}

}  // namespace tutorial
