// --check: the data pattern.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace tutorial {

//! [pattern]
// --check: byte j of message i is (i + j) mod 251. A prime period never lines up with the
// buffer, so a message from the wrong iteration or a shifted one does not pass.
inline void fill_pattern(std::span<std::byte> message, std::uint64_t iteration) {
    for (std::size_t j = 0; j < message.size(); ++j) {
        message[j] = static_cast<std::byte>((iteration + j) % 251);
    }
}

// The offset of the first byte that breaks the pattern, or nothing.
[[nodiscard]] inline std::optional<std::size_t> find_pattern_mismatch(
    std::span<const std::byte> message, std::uint64_t iteration) {
    for (std::size_t j = 0; j < message.size(); ++j) {
        if (message[j] != static_cast<std::byte>((iteration + j) % 251)) { return j; }
    }
    return std::nullopt;
}
//! [pattern]

}  // namespace tutorial
