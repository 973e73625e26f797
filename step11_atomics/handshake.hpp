// Step 06: step05's handshake v3 and the client's TCP exchange, free functions beside
// Connection (the server does its side in its event loop).
#pragma once

#include "connection.hpp"
#include "tcp.hpp"

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace tutorial {

//! [handshake-v3]
/// \brief Handshake v3, the endpoint's own wire format. 64 bytes, every field big-endian:
///
/// | offset | size | field                                        |
/// |-------:|-----:|----------------------------------------------|
/// |      0 |    4 | magic 0x52444d41 ("RDMA")                    |
/// |      4 |    2 | version, 3                                   |
/// |      6 |    2 | LID                                          |
/// |      8 |    4 | QPN (≤ 0xffffff)                             |
/// |     12 |    4 | PSN (≤ 0xffffff)                             |
/// |     16 |   16 | GID, raw bytes                               |
/// |     32 |    1 | MTU as enum ibv_mtu (1..5 = 256..4096)       |
/// |     33 |    1 | RDMA READ depth (1..255)                     |
/// |     34 |    2 | reserved, zero                               |
/// |     36 |    4 | message size, the program's -s (0: not said) |
/// |     40 |    8 | buffer address                               |
/// |     48 |    4 | rkey                                         |
/// |     52 |    4 | iterations, the program's -n (0: not said)   |
/// |     56 |    8 | buffer length (> 0, addr + length ≤ 2^64)   |
///
/// Version 2 had the same layout with bytes 36..39 and 52..55 reserved: it could not tell a
/// mismatch of -s or -n, so a v3 side refuses it.
inline constexpr std::uint32_t kHandshakeMagic = 0x52444d41;  // "RDMA"
inline constexpr std::uint16_t kHandshakeVersion = 3;
inline constexpr std::size_t kHandshakeV3Size = 64;
using HandshakeV3Message = std::array<std::byte, kHandshakeV3Size>;
//! [handshake-v3]

[[nodiscard]] HandshakeV3Message encode_handshake_v3(const PeerInfo& info) noexcept;

/// \throws TutorialError (kExitPeer) naming what is wrong: the length, the magic (with what was
///         received), the version (both), a reserved byte, or a field out of range
[[nodiscard]] PeerInfo decode_handshake_v3(std::span<const std::byte> bytes);

/// \brief Compares the -s and -n both sides announced in handshake v3 (a 0 is not compared).
/// \param mine this side's details
/// \param theirs the peer's
/// \param server true on the side that accepted the connection
/// \return empty when they agree; else one line naming the options and both values, e.g.
///         "the client uses -n 2000, this server -n 1000: both sides must use the same -n"
[[nodiscard]] std::string describe_run_mismatch(const PeerInfo& mine, const PeerInfo& theirs,
                                                bool server);

/// \brief Which handshake a client speaks on the TCP connection: the endpoint speaks v3, and the
/// server (server.hpp) detects either.
enum class HandshakeFormat {
    v3,          ///< the 64-byte versioned message: the buffer's address, rkey, length, -s and -n
    rc_pingpong  ///< ibv_rc_pingpong's text message: no buffer, no -s or -n
};

/// \brief What the handshake carries besides the endpoint's own data: the program's -s and -n
/// (compared with the peer's; 0: not said), and how long each step may wait.
struct HandshakeSettings {
    std::uint32_t message_size = 0;  ///< v3: the program's -s
    std::uint32_t iterations = 0;    ///< v3: the program's -n
    std::chrono::seconds timeout{10};
};

/// \brief What this side's handshake sends: \p info (the endpoint's local_info()) with the run's
/// -s and -n, for the peer to compare.
[[nodiscard]] PeerInfo with_run(PeerInfo info, const HandshakeSettings& settings);

/// \brief Connects \p connection as the client: TCP to \p host:\p port, handshake v3, RTR and RTS.
/// (The server, server.hpp, does its side in its event loop.)
/// \return the TCP connection, open: the server keeps its end until the session ends, so its
///         close tells the client that the server has gone (see peer_closed())
/// \throws TutorialError kExitPeer (refused, closed, bad handshake, or in v3 a -s or -n that
///         differs from the peer's: describe_run_mismatch()), kExitTimeout
/// \throws std::system_error naming the verb or socket call that failed
[[nodiscard]] Socket connect_to_peer(Connection& connection, const std::string& host,
                                     std::uint16_t port, const HandshakeSettings& settings);

/// \brief True once the peer has closed \p connection (or reset it): a check that never blocks.
/// A QP that the peer destroyed sends nothing, so a client waiting for a receive would learn of
/// the server's end only at --timeout; its TCP connection tells at once.
[[nodiscard]] bool peer_closed(const Socket& connection);

}  // namespace tutorial
