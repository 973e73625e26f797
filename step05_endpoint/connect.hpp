// ibv_rc_pingpong's TCP handshake (both sides' QP details), around a connect_qp callback.
#pragma once

#include "errors.hpp"
#include "tcp.hpp"
#include "wire_format.hpp"

#include <array>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <optional>
#include <span>
#include <string>

namespace tutorial {

//! [handshake]
// Reads the peer's 52-byte message and parses it strictly; anything else is a peer error that
// shows what arrived.
[[nodiscard]] inline QpEndpointInfo receive_endpoint_info(const Socket& peer,
                                                          const std::string& peer_name,
                                                          std::chrono::seconds timeout) {
    WireMessage message{};
    const std::size_t got = receive_all(peer, message, timeout, "the peer's QP address");
    const std::span<const char> bytes(message.data(), got);
    if (got == 0) {
        throw TutorialError(kExitPeer,
                            peer_name + " closed the connection before sending its QP address",
                            "the peer failed before the handshake: look at its own error message");
    }
    std::string error;
    const std::optional<QpEndpointInfo> info = parse_wire_message(bytes, error);
    if (!info) {
        throw TutorialError(
            kExitPeer,
            "bad handshake from " + peer_name + ": " + error + "; received " + std::to_string(got) +
                " bytes: " + printable_bytes(bytes),
            "the peer must speak ibv_rc_pingpong's format LID:QPN:PSN:GID (52 bytes)");
    }
    return *info;
}

// Client side: send ours, read theirs, connect our QP (connect_qp), then "done".
// Our QP is in RTR before "done", so the server may send as soon as it reads it.
template <typename ConnectQp>
[[nodiscard]] inline QpEndpointInfo client_handshake(const Socket& server,
                                                     const std::string& server_name,
                                                     const QpEndpointInfo& local,
                                                     std::chrono::seconds timeout,
                                                     ConnectQp connect_qp) {
    // One send() for the whole message: ibv_rc_pingpong's server takes it in a single read().
    const WireMessage message = format_wire_message(local);
    send_all(server, message, timeout, "our QP address");
    const QpEndpointInfo remote = receive_endpoint_info(server, server_name, timeout);
    connect_qp(remote);
    send_all(server, std::span(kDoneMessage, sizeof kDoneMessage), timeout, "\"done\"");
    return remote;
}

// Server side: read theirs, connect our QP, answer with ours, wait for "done".
// The server connects before it answers: the client may send right after it has our address.
template <typename ConnectQp>
[[nodiscard]] inline QpEndpointInfo server_handshake(const Socket& client,
                                                     const std::string& client_name,
                                                     const QpEndpointInfo& local,
                                                     std::chrono::seconds timeout,
                                                     ConnectQp connect_qp) {
    const QpEndpointInfo remote = receive_endpoint_info(client, client_name, timeout);
    connect_qp(remote);
    const WireMessage message = format_wire_message(local);
    send_all(client, message, timeout, "our QP address");
    std::array<char, sizeof kDoneMessage> done{};
    const std::size_t got = receive_all(client, done, timeout, "\"done\"");
    if (got != done.size() || std::memcmp(done.data(), kDoneMessage, done.size()) != 0) {
        throw TutorialError(
            kExitPeer, "bad handshake from " + client_name +
                           ": expected \"done\" and a NUL, received " + std::to_string(got) +
                           " bytes: " + printable_bytes(std::span<const char>(done.data(), got)));
    }
    return remote;
}
//! [handshake]

}  // namespace tutorial
