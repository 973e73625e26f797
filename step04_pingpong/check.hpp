// --check: the data pattern, and agreeing on it with the peer.
#pragma once

#include "device.hpp"
#include "errors.hpp"
#include "local_port.hpp"
#include "qp_transitions.hpp"
#include "resources.hpp"
#include "tcp.hpp"
#include "wc_status.hpp"
#include "wire_format.hpp"

#include <infiniband/verbs.h>
#include <sys/socket.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>

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

//! [check_negotiation]
// --check must be on at both ends, and ibv_rc_pingpong knows nothing of it. After the standard
// handshake (which ends with "done"), ibv_rc_pingpong closes the socket. So each step04 side
// sends "check" (and a NUL) only when --check is on, then reads until the peer closes:
// a peer that closes without a word has no --check, whoever it is, and the wire stays exactly
// ibv_rc_pingpong's when --check is off.
inline constexpr char kCheckMessage[] = "check";

[[nodiscard]] inline bool peer_offers_check(std::span<const char> bytes,
                                            const std::string& peer_name) {
    if (bytes.empty()) { return false; }
    if (bytes.size() == sizeof kCheckMessage &&
        std::memcmp(bytes.data(), kCheckMessage, sizeof kCheckMessage) == 0) {
        return true;
    }
    throw TutorialError(kExitPeer, "bad handshake from " + peer_name +
                                       ": after \"done\" expected nothing or \"check\", received " +
                                       std::to_string(bytes.size()) +
                                       " bytes: " + printable_bytes(bytes));
}

// Both sides agree, or both refuse. The client speaks first, then half-closes; the server
// answers once it has seen the client's end of stream.
inline void agree_on_check(const Socket& peer, const std::string& peer_name, bool client,
                           bool check, std::chrono::seconds timeout) {
    std::array<char, 16> reply{};
    const auto offer = [&] {
        if (check) {
            send_all(peer, std::span(kCheckMessage, sizeof kCheckMessage), timeout, "\"check\"");
        }
    };
    if (client) {
        offer();
        ::shutdown(peer.get(), SHUT_WR);
    }
    const std::size_t got = receive_all(peer, reply, timeout, "the end of the handshake");
    const bool peer_check = peer_offers_check(std::span<const char>(reply.data(), got), peer_name);
    if (!client) { offer(); }
    if (check && !peer_check) {
        throw TutorialError(kExitPeer, "--check is on here, but " + peer_name + " did not offer it",
                            "start both sides with --check; ibv_rc_pingpong has no --check");
    }
    if (!check && peer_check) {
        throw TutorialError(kExitPeer, peer_name + " runs with --check, but this side does not",
                            "start both sides with --check, or neither");
    }
}
//! [check_negotiation]

}  // namespace tutorial
