// Step 08: what travels in the connection's private data: a magic, the buffer's window, -s, -n.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tutorial {

/// The largest private data rdma_cm carries in a connect request (the CM's REQ holds 92 bytes,
/// of which rdma_cm's own header takes 36), in an accept (REP: 196) and in a reject (REJ: 148).
/// librdmacm does not check these: the kernel answers EINVAL.
constexpr std::size_t kMaxConnectPrivateData = 56;
constexpr std::size_t kMaxAcceptPrivateData = 196;

/// "S08C", big-endian: a step08 peer. rdma-core's examples send no private data, and a receiver
/// always sees the whole field, zero-padded, so their first 4 bytes are 0.
constexpr std::uint32_t kPrivateDataMagic = 0x53303843;

/// \brief What a step08 peer says in its connect request, accept or reject.
///
/// | bytes | field |
/// |---|---|
/// | 0-3   | magic "S08C" |
/// | 4-11  | the buffer window's virtual address |
/// | 12-15 | its rkey |
/// | 16-19 | its length in bytes |
/// | 20-23 | -s |
/// | 24-27 | -n |
/// | 28-   | the client's --note, as text (connect request only) |
///
/// All numbers big-endian.
struct PrivateData {
    std::uint64_t addr = 0;
    std::uint32_t rkey = 0;
    std::uint32_t length = 0;
    std::uint32_t message_size = 0;
    std::uint32_t iterations = 0;
    std::string note;
};

constexpr std::size_t kPrivateDataFixed = 28;

[[nodiscard]] inline std::vector<std::byte> encode_private_data(const PrivateData& p) {
    std::vector<std::byte> out(kPrivateDataFixed + p.note.size());
    auto put = [&](std::size_t at, std::uint64_t value, std::size_t bytes) {
        for (std::size_t i = 0; i < bytes; ++i) {
            out[at + i] = static_cast<std::byte>(value >> (8 * (bytes - 1 - i)));
        }
    };
    put(0, kPrivateDataMagic, 4);
    put(4, p.addr, 8);
    put(12, p.rkey, 4);
    put(16, p.length, 4);
    put(20, p.message_size, 4);
    put(24, p.iterations, 4);
    for (std::size_t i = 0; i < p.note.size(); ++i) {
        out[kPrivateDataFixed + i] = static_cast<std::byte>(p.note[i]);
    }
    return out;
}

/// A step08 peer's private data, or nullopt for a peer without the magic (rdma-core's examples).
[[nodiscard]] inline std::optional<PrivateData> decode_private_data(std::span<const std::byte> in) {
    auto get = [&](std::size_t at, std::size_t bytes) {
        std::uint64_t value = 0;
        for (std::size_t i = 0; i < bytes; ++i) {
            value = value << 8 | std::to_integer<std::uint64_t>(in[at + i]);
        }
        return value;
    };
    if (in.size() < kPrivateDataFixed || get(0, 4) != kPrivateDataMagic) { return std::nullopt; }
    PrivateData p;
    p.addr = get(4, 8);
    p.rkey = static_cast<std::uint32_t>(get(12, 4));
    p.length = static_cast<std::uint32_t>(get(16, 4));
    p.message_size = static_cast<std::uint32_t>(get(20, 4));
    p.iterations = static_cast<std::uint32_t>(get(24, 4));
    for (std::size_t i = kPrivateDataFixed; i < in.size() && in[i] != std::byte{0}; ++i) {
        p.note += static_cast<char>(in[i]);
    }
    return p;
}

/// step06's describe_run_mismatch, on private data: "" when -s and -n agree.
[[nodiscard]] inline std::string describe_run_mismatch(const PrivateData& mine,
                                                       const PrivateData& theirs, bool server) {
    std::string their_values, my_values, options;
    const auto compare = [&](const char* option, std::uint32_t my_value,
                             std::uint32_t their_value) {
        if (my_value == their_value) return;
        const std::string sep = options.empty() ? "" : " ";
        their_values += sep + option + " " + std::to_string(their_value);
        my_values += sep + option + " " + std::to_string(my_value);
        options += (options.empty() ? "" : " and ") + std::string(option);
    };
    compare("-s", mine.message_size, theirs.message_size);
    compare("-n", mine.iterations, theirs.iterations);
    if (options.empty()) return {};
    return std::string("the ") + (server ? "client" : "server") + " uses " + their_values +
           ", this " + (server ? "server " : "client ") + my_values +
           ": both sides must use the same " + options;
}

}  // namespace tutorial
