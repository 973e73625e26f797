// Step 05: handshake v3, the endpoint's own wire format, and the TCP exchange that connects an
// RDMAEndpoint to its peer: free functions beside the class.
#include "handshake.hpp"

#include "tcp.hpp"
#include "wire_format.hpp"

#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <string_view>
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

// --rc-pingpong-compat: step04's 52-byte message (wire_format.hpp), parsed strictly; anything
// else is a peer error that shows what arrived.
QpEndpointInfo receive_endpoint_info(const Socket& peer, const std::string& peer_name,
                                     std::chrono::seconds timeout) {
    WireMessage message{};
    const std::size_t got = receive_all(peer, message, timeout, "the peer's QP address");
    const std::span<const char> bytes(message.data(), got);
    if (got == 0) {
        protocol_error(peer_name + " closed the connection before sending its QP address",
                       "the peer failed before the handshake: look at its own error message");
    }
    std::string error;
    const std::optional<QpEndpointInfo> info = parse_wire_message(bytes, error);
    if (!info) {
        protocol_error("bad handshake from " + peer_name + ": " + error + "; received " +
                           std::to_string(got) + " bytes: " + printable_bytes(bytes),
                       "the peer must speak ibv_rc_pingpong's format LID:QPN:PSN:GID (52 bytes)");
    }
    return *info;
}

// The endpoint's connect() on that message. The MTU is not on that wire: both sides must be given
// the same -m.
void connect_rc_pingpong(RDMAEndpoint& endpoint, const QpEndpointInfo& remote) {
    PeerInfo peer;
    static_cast<QpEndpointInfo&>(peer) = remote;
    peer.mtu = endpoint.path_mtu();
    endpoint.connect(peer);
}

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

// Client side: send ours, read theirs, connect our QP, then "done". Our QP is in RTR before
// "done", so the server may send as soon as it reads it.
void handshake_as_client(RDMAEndpoint& endpoint, const Socket& server,
                         const std::string& server_name, const HandshakeSettings& settings) {
    // step03's rule: the GID that holds this connection's local address.
    endpoint.use_local_address(local_address_bytes(server));
    if (settings.format == HandshakeFormat::rc_pingpong) {
        // One send() for the whole message: ibv_rc_pingpong's server takes it in a single read().
        send_all(server, format_wire_message(endpoint.local_info()), settings.timeout,
                 "our QP address");
        connect_rc_pingpong(endpoint, receive_endpoint_info(server, server_name, settings.timeout));
    } else {
        const PeerInfo mine = with_run(endpoint.local_info(), settings);
        send_handshake(server, mine, settings.timeout);
        const PeerInfo remote = decode_handshake_v3(receive_handshake(server, settings.timeout));
        // The server has found the same mismatch, answered, and closed: both sides say it.
        if (std::string mismatch = describe_run_mismatch(mine, remote, false); !mismatch.empty())
            throw TutorialError(kExitPeer, mismatch);
        endpoint.connect(remote);
    }
    send_all(server, std::span(kDoneMessage, sizeof kDoneMessage), settings.timeout, "\"done\"");
}

// Server side: read theirs, connect our QP, answer with ours, wait for "done". The server
// connects before it answers: the client may send right after it has our address.
void handshake_as_server(RDMAEndpoint& endpoint, const Socket& client,
                         const std::string& client_name, const HandshakeSettings& settings) {
    // step03's rule: the GID that holds this connection's local address.
    endpoint.use_local_address(local_address_bytes(client));
    if (settings.format == HandshakeFormat::rc_pingpong) {
        connect_rc_pingpong(endpoint, receive_endpoint_info(client, client_name, settings.timeout));
        send_all(client, format_wire_message(endpoint.local_info()), settings.timeout,
                 "our QP address");
    } else {
        const HandshakeV3Message theirs = receive_handshake(client, settings.timeout);
        const PeerInfo mine = with_run(endpoint.local_info(), settings);
        // Before failing, answer anyway (the peer then names the problem too); a failed write
        // must not hide the problem, so it is ignored there.
        const auto answer_anyway = [&]() noexcept {
            try {
                send_handshake(client, mine, settings.timeout);
            } catch (const std::exception&) {}
        };
        PeerInfo remote;
        try {
            remote = decode_handshake_v3(theirs);
        } catch (const TutorialError&) {
            // Another version: answer first, so that the client can name both versions too.
            if (get_be(&theirs[4], 2) != kHandshakeVersion) answer_anyway();
            throw;
        }
        if (std::string mismatch = describe_run_mismatch(mine, remote, true); !mismatch.empty()) {
            answer_anyway();  // the client compares too, and says the same
            throw TutorialError(kExitPeer, mismatch);
        }
        endpoint.connect(remote);
        send_handshake(client, mine, settings.timeout);
    }
    std::array<char, sizeof kDoneMessage> done{};
    receive_exactly(client, done, settings.timeout, "the peer's \"done\"");
    if (std::string_view(done.data(), done.size()) !=
        std::string_view(kDoneMessage, sizeof kDoneMessage)) {
        protocol_error("expected \"done\" after the handshake, received " + printable_bytes(done));
    }
}

}  // namespace
//! [handshake]

// step04's connect_to_peer, in the two roles: TCP (tcp.hpp), then the handshake.
void connect_to_peer(RDMAEndpoint& endpoint, const std::string& host, std::uint16_t port,
                     const HandshakeSettings& settings) {
    std::string server_name;
    const Socket server = connect_to(host, port, settings.timeout, server_name);
    handshake_as_client(endpoint, server, server_name, settings);
}

// One listener for all the endpoints: the client connects once per QP, one after the other.
void accept_peer(std::span<RDMAEndpoint> endpoints, std::uint16_t port,
                 const std::string& bind_address, const HandshakeSettings& settings) {
    const Socket listener = listen_on(bind_address, port);
    for (RDMAEndpoint& endpoint : endpoints) {
        std::string client_name;
        const Socket client = accept_client(listener, port, settings.timeout, client_name);
        handshake_as_server(endpoint, client, client_name, settings);
    }
}

}  // namespace tutorial
