// Fuzz properties shared by the step05 and step06 targets: both steps carry their own copy of
// RDMAEndpoint's handshake v3, with the same API. (ibv_rc_pingpong's format: step05 carries
// step04's parse_wire_message, step06 its own parse_rc_pingpong; each target checks its own.)
// Include this after the step's rdma_endpoint.hpp (or a .cpp that includes it).
#pragma once

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>

namespace fuzz {

[[noreturn]] inline void property_failed(const char* what) {
    std::fprintf(stderr, "property failed: %s\n", what);
    std::abort();
}

inline std::uint64_t load_be(const std::uint8_t* at, int bytes) {
    std::uint64_t value = 0;
    for (int i = 0; i < bytes; ++i) { value = value << 8 | at[i]; }
    return value;
}

// A peer error must be a TutorialError with kExitPeer and a message; anything else escapes and
// the fuzzer reports it.
inline void expect_peer_error(const tutorial::TutorialError& e) {
    if (e.exit_code() != tutorial::kExitPeer || std::strlen(e.what()) == 0) {
        property_failed("a bad message must be a peer error (exit 6) with a message");
    }
}

// decode_handshake_v3 over arbitrary bytes; encode(decode(x)) == x; decode(encode(x)) == x.
inline void check_handshake_v3(const std::uint8_t* data, std::size_t size) {
    using namespace tutorial;
    const auto bytes = std::as_bytes(std::span(data, size));
    try {
        const PeerInfo info = decode_handshake_v3(bytes);
        if (size != kHandshakeV3Size) {
            property_failed("decode_handshake_v3 accepted a message that is not 64 bytes");
        }
        if (info.qpn < 2 || info.qpn > 0xffffff || info.psn > 0xffffff || info.length == 0 ||
            info.mtu < IBV_MTU_256 || info.mtu > IBV_MTU_4096 || info.read_depth == 0) {
            property_failed("decode_handshake_v3 accepted a field out of range");
        }
        const HandshakeV3Message again = encode_handshake_v3(info);
        if (std::memcmp(again.data(), data, size) != 0) {
            property_failed("encode(decode(x)) != x");
        }
    } catch (const TutorialError& e) { expect_peer_error(e); }

    // Any valid info survives the trip: fields taken from the input, then made valid.
    if (size >= 53) {
        PeerInfo local;
        local.lid = static_cast<std::uint16_t>(load_be(data, 2));
        local.qpn = std::max<std::uint32_t>(static_cast<std::uint32_t>(load_be(data + 2, 3)), 2);
        local.psn = static_cast<std::uint32_t>(load_be(data + 5, 3));
        std::memcpy(&local.gid, data + 8, 16);  // step05: std::array, step06: ibv_gid
        local.mtu = static_cast<ibv_mtu>(IBV_MTU_256 + data[24] % 5);
        local.addr = load_be(data + 25, 8);
        local.rkey = static_cast<std::uint32_t>(load_be(data + 33, 4));
        local.length = std::max<std::uint64_t>(load_be(data + 37, 8), 1);
        local.message_size = static_cast<std::uint32_t>(load_be(data + 45, 4));  // 0 allowed
        local.iterations = static_cast<std::uint32_t>(load_be(data + 49, 4));
        local.read_depth = static_cast<std::uint8_t>(std::max<int>(data[0], 1));
        if (local.addr + local.length < local.addr) {
            local.length = 0 - local.addr;  // ends exactly at 2^64, the largest valid buffer
        }
        if (local.length == 0) { local.length = 1; }
        PeerInfo back;
        try {
            back = decode_handshake_v3(encode_handshake_v3(local));
        } catch (const TutorialError& e) {
            std::fprintf(stderr, "decode(encode(x)) threw: %s\n", e.what());
            property_failed("decode(encode(x)) rejected a valid info");
        }
        if (!(back == local)) { property_failed("decode(encode(x)) != x"); }
        // The mismatch line: empty exactly when every announced (non-zero) -s and -n agree.
        PeerInfo peer = local;
        peer.message_size = static_cast<std::uint32_t>(load_be(data + 49, 4));
        peer.iterations = static_cast<std::uint32_t>(load_be(data + 45, 4));
        const auto differ = [](std::uint32_t a, std::uint32_t b) {
            return a != 0 && b != 0 && a != b;
        };
        const bool expected = differ(local.message_size, peer.message_size) ||
                              differ(local.iterations, peer.iterations);
        const std::string line = describe_run_mismatch(local, peer, data[0] % 2 == 0);
        if (line.empty() == expected) {
            property_failed("describe_run_mismatch disagrees with the fields it compares");
        }
        if (expected && line.find(": both sides must use the same -") == std::string::npos) {
            property_failed("describe_run_mismatch does not say what to do");
        }
    }
}

}  // namespace fuzz
