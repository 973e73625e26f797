// Step 08: what travels in the connection's private data: a magic, the buffer's window, -s, -n.
#pragma once

#include <endian.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace tutorial {

/// The private data a connect request carries: the CM's REQ holds 92 bytes, of which rdma_cm's
/// own header takes 36. An accept (REP) carries 196, a reject (REJ) 148. librdmacm does not check
/// these: the kernel answers EINVAL.
constexpr std::size_t kMaxConnectPrivateData = 56;

/// "S08C": a step08 peer. rdma-core's examples send no private data, and a receiver always sees
/// the whole field, zero-padded, so their first 4 bytes are 0.
constexpr std::uint32_t kPrivateDataMagic = 0x53303843;

/// \brief What a step08 peer says in its connect request, accept or reject: these 56 bytes, the
/// numbers big-endian on the wire (wire_order()).
struct PrivateData {
    std::uint32_t magic = kPrivateDataMagic;  ///< bytes 0-3: "S08C"
    std::uint32_t rkey = 0;                   ///< 4-7: the remote window's rkey (0: none)
    std::uint64_t addr = 0;                   ///< 8-15: its virtual address
    std::uint32_t length = 0;                 ///< 16-19: its length in bytes
    std::uint32_t message_size = 0;           ///< 20-23: -s
    std::uint32_t iterations = 0;             ///< 24-27: -n
    char note[28] = {};                       ///< 28-55: the client's --note, zero-padded
};
static_assert(sizeof(PrivateData) == kMaxConnectPrivateData);

/// Host order to big-endian, or back: htobe32 and be32toh are the same swap (or none).
[[nodiscard]] inline PrivateData wire_order(PrivateData p) {
    p.magic = htobe32(p.magic);
    p.rkey = htobe32(p.rkey);
    p.addr = htobe64(p.addr);
    p.length = htobe32(p.length);
    p.message_size = htobe32(p.message_size);
    p.iterations = htobe32(p.iterations);
    return p;
}

/// A step08 peer's private data in host order, or nullopt for a peer without the magic.
[[nodiscard]] inline std::optional<PrivateData> decode_private_data(const void* data,
                                                                    std::size_t length) {
    PrivateData p;
    if (data == nullptr || length < sizeof p) return std::nullopt;
    std::memcpy(&p, data, sizeof p);
    p = wire_order(p);
    if (p.magic != kPrivateDataMagic) return std::nullopt;
    p.note[sizeof p.note - 1] = '\0';
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
