// Step 11: the target's layout, which the server registers and every client's verbs address.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace tutorial {

//! [target]
/// The server's one MR, the target. Page 0 holds the shared words; then one page per client
/// slot, whose first half a memory window can open to that client alone.
///
/// | offset          | bytes | what                                            |
/// |----------------:|------:|-------------------------------------------------|
/// |               0 |     8 | the counter (read-write, fetch-add)             |
/// |               8 |     8 | the lock (cas): 0 free, else the holder's id    |
/// |              16 |     8 | the version (cas): even stable, odd being written |
/// |              64 |   256 | the record (cas)                                |
/// | 4096 × (1 + s)  |  4096 | client slot s's page; its window: the first 2048 |
inline constexpr std::uint64_t kCounterOffset = 0;
inline constexpr std::uint64_t kLockOffset = 8;
inline constexpr std::uint64_t kVersionOffset = 16;
inline constexpr std::uint64_t kRecordOffset = 64;
inline constexpr std::uint32_t kRecordBytes = 256;
inline constexpr std::uint64_t kPage = 4096;
inline constexpr std::uint64_t kWindowBytes = kPage / 2;

[[nodiscard]] constexpr std::uint64_t target_bytes(std::uint32_t slots) {
    return kPage * (1 + std::uint64_t{slots});
}
[[nodiscard]] constexpr std::uint64_t slot_offset(std::uint32_t slot) {
    return kPage * (1 + std::uint64_t{slot});
}
//! [target]

/// The window commands on a client's TCP connection, after the handshake: 4 bytes each way.
inline constexpr char kBindCommand[4] = {'B', 'I', 'N', 'D'};        // client: open my window
inline constexpr char kInvalidateCommand[4] = {'I', 'N', 'V', 'L'};  // client: take it back
inline constexpr char kWindowReply[4] = {'W', 'N', 'D', 'W'};        // + addr, length (8), rkey (4)
inline constexpr char kGoneReply[4] = {'G', 'O', 'N', 'E'};          // the window is invalid now
inline constexpr std::size_t kWindowReplySize = 4 + 8 + 8 + 4;

/// \brief A window as the server lends it: where it starts, how long it is, and its rkey.
struct WindowGrant {
    std::uint64_t addr = 0;
    std::uint64_t length = 0;
    std::uint32_t rkey = 0;
};

/// \brief "WNDW", then the address, the length and the rkey, big-endian.
[[nodiscard]] inline std::array<char, kWindowReplySize> encode_window_reply(const WindowGrant& w) {
    std::array<char, kWindowReplySize> bytes{'W', 'N', 'D', 'W'};
    const auto put = [&](std::size_t at, std::uint64_t value, int size) {
        for (int i = size - 1; i >= 0; --i, value >>= 8) {
            bytes[at + static_cast<std::size_t>(i)] = static_cast<char>(value & 0xff);
        }
    };
    put(4, w.addr, 8);
    put(12, w.length, 8);
    put(20, w.rkey, 4);
    return bytes;
}

/// \brief The reply's fields; the caller has checked its first 4 bytes are "WNDW".
[[nodiscard]] inline WindowGrant decode_window_reply(
    std::span<const char, kWindowReplySize> bytes) {
    const auto get = [&](std::size_t at, int size) {
        std::uint64_t value = 0;
        for (int i = 0; i < size; ++i) {
            value =
                value << 8 | static_cast<unsigned char>(bytes[at + static_cast<std::size_t>(i)]);
        }
        return value;
    };
    return {get(4, 8), get(12, 8), static_cast<std::uint32_t>(get(20, 4))};
}

}  // namespace tutorial
