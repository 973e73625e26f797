// Step 06: step05's handshake v3 and the client's TCP exchange, free functions beside
// Connection (the server does its side in its event loop).
#include "handshake.hpp"

#include "tcp.hpp"
#include "wire_format.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace tutorial {

namespace {

std::string hex32(std::uint64_t value, int width) {
    char text[24];
    std::snprintf(text, sizeof text, "0x%0*llx", width, static_cast<unsigned long long>(value));
    return text;
}

[[noreturn]] void protocol_error(const std::string& message, std::string hint = {}) {
    throw TutorialError(kExitPeer, message, std::move(hint));
}

// ------------------------------------------------------------------ big-endian fields

void put_be(std::byte* at, std::uint64_t value, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) {
        at[i] = static_cast<std::byte>(value & 0xff);
        value >>= 8;
    }
}

std::uint64_t get_be(const std::byte* at, int bytes) {
    std::uint64_t value = 0;
    for (int i = 0; i < bytes; ++i) value = (value << 8) | std::to_integer<std::uint64_t>(at[i]);
    return value;
}

// receive_all, for a message that must arrive whole: a peer that closes early is a peer error.
void receive_exactly(const Socket& peer, std::span<char> bytes, std::chrono::seconds timeout,
                     const char* what) {
    const std::size_t got = receive_all(peer, bytes, timeout, what);
    if (got < bytes.size()) {
        protocol_error("the peer closed the connection after " + std::to_string(got) + " of " +
                       std::to_string(bytes.size()) + " bytes of " + what +
                       (got != 0 ? " (received " + printable_bytes(bytes.first(got)) + ")" : ""));
    }
}

}  // namespace

// ====================================================================== handshake v3

HandshakeV3Message encode_handshake_v3(const PeerInfo& info) noexcept {
    HandshakeV3Message m{};
    put_be(&m[0], kHandshakeMagic, 4);
    put_be(&m[4], kHandshakeVersion, 2);
    put_be(&m[6], info.lid, 2);
    put_be(&m[8], info.qpn, 4);
    put_be(&m[12], info.psn, 4);
    std::memcpy(&m[16], info.gid.data(), 16);
    m[32] = static_cast<std::byte>(info.mtu);
    m[33] = static_cast<std::byte>(info.read_depth);
    put_be(&m[36], info.message_size, 4);
    put_be(&m[40], info.addr, 8);
    put_be(&m[48], info.rkey, 4);
    put_be(&m[52], info.iterations, 4);
    put_be(&m[56], info.length, 8);
    return m;
}

PeerInfo decode_handshake_v3(std::span<const std::byte> bytes) {
    const auto as_chars = [&] {
        return std::span<const char>(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    };
    if (bytes.size() != kHandshakeV3Size) {
        protocol_error("handshake v3: expected " + std::to_string(kHandshakeV3Size) +
                       " bytes, got " + std::to_string(bytes.size()));
    }
    const auto magic = static_cast<std::uint32_t>(get_be(&bytes[0], 4));
    if (magic != kHandshakeMagic) {
        protocol_error("handshake v3: bad magic " + hex32(magic, 8) +
                           " (expected 0x52444d41 \"RDMA\"); received " +
                           printable_bytes(as_chars().first(4)),
                       "the peer does not speak handshake v3; with ibv_rc_pingpong or step04, use "
                       "--rc-pingpong-compat");
    }
    const auto version = static_cast<std::uint16_t>(get_be(&bytes[4], 2));
    if (version != kHandshakeVersion) {
        protocol_error("handshake v3: the peer speaks version " + std::to_string(version) +
                           ", this program speaks version " + std::to_string(kHandshakeVersion),
                       "both sides must be built from the same version of the tutorial");
    }
    PeerInfo info;
    info.lid = static_cast<std::uint16_t>(get_be(&bytes[6], 2));
    info.qpn = static_cast<std::uint32_t>(get_be(&bytes[8], 4));
    info.psn = static_cast<std::uint32_t>(get_be(&bytes[12], 4));
    std::memcpy(info.gid.data(), &bytes[16], 16);
    const auto mtu = std::to_integer<unsigned>(bytes[32]);
    info.addr = get_be(&bytes[40], 8);
    info.rkey = static_cast<std::uint32_t>(get_be(&bytes[48], 4));
    info.length = get_be(&bytes[56], 8);
    info.message_size = static_cast<std::uint32_t>(get_be(&bytes[36], 4));
    info.iterations = static_cast<std::uint32_t>(get_be(&bytes[52], 4));
    info.read_depth = std::to_integer<std::uint8_t>(bytes[33]);
    for (std::size_t offset : {34, 35}) {
        if (bytes[offset] != std::byte{0}) {
            protocol_error("handshake v3: reserved byte " + std::to_string(offset) + " is " +
                           hex32(std::to_integer<unsigned>(bytes[offset]), 2) + ", not 0");
        }
    }
    if (info.qpn < 2 || info.qpn > 0xffffff) {
        protocol_error("handshake v3: QPN " + hex32(info.qpn, 6) +
                       " is out of range (2..0xffffff)");
    }
    if (info.psn > 0xffffff) {
        protocol_error("handshake v3: PSN " + hex32(info.psn, 6) + " is over 24 bits");
    }
    if (mtu < IBV_MTU_256 || mtu > IBV_MTU_4096) {
        protocol_error("handshake v3: MTU code " + std::to_string(mtu) +
                       " is not an ibv_mtu (1..5 = 256..4096 bytes)");
    }
    info.mtu = static_cast<ibv_mtu>(mtu);
    if (info.read_depth == 0)
        protocol_error("handshake v3: the peer's RDMA READ depth is 0 (1..255)");
    if (info.length == 0) protocol_error("handshake v3: the peer advertises an empty buffer");
    if (info.addr + info.length < info.addr && info.addr + info.length != 0) {
        protocol_error("handshake v3: the buffer at " + hex32(info.addr, 16) + " of " +
                       std::to_string(info.length) + " bytes wraps around the address space");
    }
    return info;
}

//! [run-mismatch]
std::string describe_run_mismatch(const PeerInfo& mine, const PeerInfo& theirs, bool server) {
    std::string their_values, my_values, options;
    const auto compare = [&](const char* option, std::uint32_t my_value,
                             std::uint32_t their_value) {
        if (my_value == 0 || their_value == 0 || my_value == their_value) return;
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
//! [run-mismatch]

PeerInfo with_run(PeerInfo info, const HandshakeSettings& settings) {
    info.message_size = settings.message_size;
    info.iterations = settings.iterations;
    return info;
}

//! [handshake]
namespace {

// The peer's 64 bytes: the magic first, so that a peer speaking another format is told so, not
// left waiting for bytes it will never send.
HandshakeV3Message receive_handshake(const Socket& peer, std::chrono::seconds timeout) {
    HandshakeV3Message theirs{};
    std::span<char> raw(reinterpret_cast<char*>(theirs.data()), theirs.size());
    receive_exactly(peer, raw.first(4), timeout, "the peer's handshake");
    if (get_be(theirs.data(), 4) != kHandshakeMagic) (void)decode_handshake_v3(theirs);  // throws
    receive_exactly(peer, raw.subspan(4), timeout, "the peer's handshake");
    return theirs;
}

void send_handshake(const Socket& peer, const PeerInfo& mine, std::chrono::seconds timeout) {
    const HandshakeV3Message bytes = encode_handshake_v3(mine);
    send_all(peer, std::span(reinterpret_cast<const char*>(bytes.data()), bytes.size()), timeout,
             "the handshake");
}

void handshake_as_client(Connection& connection, const Socket& server,
                         const HandshakeSettings& settings) {
    // step03's rule: the GID that holds this connection's local address.
    connection.use_local_address(local_address_bytes(server));
    const PeerInfo mine = with_run(connection.local_info(), settings);
    send_handshake(server, mine, settings.timeout);
    const PeerInfo remote = decode_handshake_v3(receive_handshake(server, settings.timeout));
    // The server has found the same mismatch, answered, and closed: both sides say it.
    if (std::string mismatch = describe_run_mismatch(mine, remote, false); !mismatch.empty())
        throw TutorialError(kExitPeer, mismatch);
    connection.connect(remote);
    send_all(server, std::span(kDoneMessage, sizeof kDoneMessage), settings.timeout, "\"done\"");
}

}  // namespace
//! [handshake]

// step04's connect_to_peer, in the two roles: TCP (tcp.hpp), then the handshake.
Socket connect_to_peer(Connection& connection, const std::string& host, std::uint16_t port,
                       const HandshakeSettings& settings) {
    std::string server_name;
    Socket server = connect_to(host, port, settings.timeout, server_name);
    handshake_as_client(connection, server, settings);
    return server;
}

bool peer_closed(const Socket& connection) {
    char byte = 0;
    const ssize_t n = ::recv(connection.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace tutorial
