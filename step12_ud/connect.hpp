// --handshake: ibv_ud_pingpong's TCP exchange of both sides' QP details, and connect_to_peer,
// which ends with the peer's address handle.
#pragma once

#include "address_handles.hpp"
#include "device.hpp"
#include "errors.hpp"
#include "local_port.hpp"
#include "options.hpp"
#include "resources.hpp"
#include "tcp.hpp"
#include "ud_qp.hpp"
#include "wc_status.hpp"
#include "wire_format.hpp"

#include <infiniband/verbs.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdio>
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

inline void print_address(const char* which, const QpEndpointInfo& info) {
    // The same line as ibv_rc_pingpong prints, so the two programs' outputs compare line by line.
    std::printf("  %s LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", which, info.lid, info.qpn,
                info.psn, format_gid(info.gid).c_str());
    std::fflush(stdout);
}

// The port as this connection uses it: the GID that holds the connection's local address (or
// -g, or step 01's rule), printed with its rule, and the fabric controls -l and --tclass.
inline LocalPort local_port_for(const Resources& resources, const OpenedDevice& opened,
                                const Options& options, const Socket& peer) {
    LocalPort port = query_local_port(resources.context.get(), options.ib_port, options.gid_index,
                                      opened.attr.phys_port_cnt, local_address_bytes(peer));
    port.service_level = static_cast<std::uint8_t>(options.service_level);
    port.traffic_class = static_cast<std::uint8_t>(options.traffic_class);
    std::printf("%s\n", gid_choice_line(port).c_str());
    return port;
}

//! [connect]
// --handshake, both roles: TCP connect or accept; then the GID that holds the connection's local
// address, and ibv_ud_pingpong's exchange, which gives the peer's address: resources.peer, the
// address handle, is made from it. Returns the peer's QP number. Our QP is in RTS already, so it
// may receive as soon as the peer has our QPN.
[[nodiscard]] inline std::uint32_t connect_to_peer(Resources& resources, const OpenedDevice& opened,
                                                   const Options& options) {
    const std::chrono::seconds timeout(options.timeout_seconds);
    std::string peer_name;
    Socket listener;  // the server's: it stays open until the handshake is over
    const Socket peer = open_connection(options.host, options.bind_address, options.tcp_port,
                                        timeout, listener, peer_name);
    const LocalPort port = local_port_for(resources, opened, options, peer);
    QpEndpointInfo local;
    local.lid = port.attr.lid;
    local.qpn = resources.qp->qp_num;
    local.psn = resources.psn;
    local.gid = port.gid;
    print_address("local address: ", local);
    std::uint32_t peer_qpn = 0;
    const auto connect = [&](const QpEndpointInfo& remote) {
        print_address("remote address:", remote);
        if (port.attr.link_layer == IBV_LINK_LAYER_ETHERNET && is_zero_gid(remote.gid)) {
            throw TutorialError(kExitPeer,
                                "the peer sent GID :: (all zeros), but RoCE routes by GID",
                                "start the peer with a GID index (-g), e.g. ibv_ud_pingpong -g 1");
        }
        ibv_ah_attr attr = peer_address(port, options.ib_port, remote.gid, remote.lid);
        resources.peer.reset(ibv_create_ah(resources.pd.get(), &attr));
        if (!resources.peer) {
            throw std::system_error(errno, std::generic_category(), "ibv_create_ah");
        }
        peer_qpn = remote.qpn;
    };
    if (!options.host.empty()) {
        (void)client_handshake(peer, peer_name, local, timeout, connect);
    } else {
        (void)server_handshake(peer, peer_name, local, timeout, connect);
    }
    return peer_qpn;
}  // the peer's address is known: TCP has done its job, and the sockets close here
//! [connect]

}  // namespace tutorial
