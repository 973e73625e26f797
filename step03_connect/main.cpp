// Step 03: connect two RC QPs (RESET->INIT->RTR->RTS) over ibv_rc_pingpong's TCP handshake.
#include "errors.hpp"
#include "local_port.hpp"
#include "options.hpp"
#include "qp_transitions.hpp"
#include "resources.hpp"
#include "tcp.hpp"
#include "wc_status.hpp"
#include "wire_format.hpp"

#include <infiniband/verbs.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <span>
#include <string>
#include <system_error>

namespace tutorial {

// The pieces of run(), defined below it.
void post_hello_receive(const Resources& resources, std::size_t size);
void connect_to_peer(const Resources& resources, const OpenedDevice& opened,
                     const Options& options);
void post_hello_send(const Resources& resources, const std::string& text);
void wait_for_hello(const Resources& resources, std::size_t size, std::chrono::seconds timeout);

//! [run]
// The outline: step 02's resources, then a receive, the TCP connection and the handshake that
// connects the QP, a send, and the two completions.
void run(const Options& options) {
    install_stop_handlers();
    Resources resources;
    const OpenedDevice opened = open_and_check(resources.device_list, resources.context,
                                               options.device_name, options.ib_port);
    print_opened_device(resources.context.get(), opened, options.ib_port);
    check_limits(options, opened.attr);
    check_pkey_index(opened.port_attr, options.ib_port, options.pkey_index);
    const QueuePairCaps caps = build_resources(resources, options);
    print_resources(resources, options);
    print_queue_pair(*resources.qp, caps);
    // The receive must be posted before the peer can send: from INIT on, it may be.
    post_hello_receive(resources, options.size);
    connect_to_peer(resources, opened, options);

    post_hello_send(resources,
                    std::string("hello from the ") + (options.host.empty() ? "server" : "client"));
    wait_for_hello(resources, options.size, std::chrono::seconds(options.timeout_seconds));
}
//! [run]

//! [receive_endpoint_info]
// Reads the peer's 52-byte message and parses it strictly; anything else is a peer error that
// shows what arrived.
[[nodiscard]] QpEndpointInfo receive_endpoint_info(const Socket& peer, const std::string& peer_name,
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
//! [receive_endpoint_info]

//! [handshake_order]
// Client side: send ours, read theirs, connect our QP (connect_qp), then "done".
// Our QP is in RTR before "done", so the server may send as soon as it reads it.
template <typename ConnectQp>
[[nodiscard]] QpEndpointInfo client_handshake(const Socket& server, const std::string& server_name,
                                              const QpEndpointInfo& local,
                                              std::chrono::seconds timeout, ConnectQp connect_qp) {
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
[[nodiscard]] QpEndpointInfo server_handshake(const Socket& client, const std::string& client_name,
                                              const QpEndpointInfo& local,
                                              std::chrono::seconds timeout, ConnectQp connect_qp) {
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
//! [handshake_order]

// The port as this connection uses it: the GID that holds the connection's local address (or
// -g, or step 01's rule), printed with its rule, and the fabric controls -l and --tclass.
LocalPort local_port_for(const Resources& resources, const OpenedDevice& opened,
                         const Options& options, const Socket& peer) {
    LocalPort port = query_local_port(resources.context.get(), options.ib_port, options.gid_index,
                                      opened.attr.phys_port_cnt, local_address_bytes(peer));
    port.service_level = static_cast<std::uint8_t>(options.service_level);
    port.traffic_class = static_cast<std::uint8_t>(options.traffic_class);
    std::printf("%s\n", gid_choice_line(port).c_str());
    return port;
}

//! [connect]
// Both roles: TCP connect or accept; then the GID that holds the connection's local address, and
// the handshake, which calls connect_qp in the middle.
void connect_to_peer(const Resources& resources, const OpenedDevice& opened,
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
    local.psn = random_psn();
    local.gid = port.gid;
    print_address("local address: ", local);
    const auto connect = [&](const QpEndpointInfo& remote) {
        print_address("remote address:", remote);
        const ibv_mtu mtu = options.mtu != 0 ? *mtu_from_bytes(options.mtu) : port.attr.active_mtu;
        connect_qp(resources.qp.get(), port, options.ib_port, mtu, local.psn, remote);
        print_transition(*resources.qp, IBV_QPS_INIT, IBV_QPS_RTR);
        print_transition(*resources.qp, IBV_QPS_RTR, IBV_QPS_RTS);
    };
    if (!options.host.empty()) {
        (void)client_handshake(peer, peer_name, local, timeout, connect);
    } else {
        (void)server_handshake(peer, peer_name, local, timeout, connect);
    }
}  // the QPs are connected: TCP has done its job, and the sockets close here
//! [connect]

//! [hello]
// One receive into the second half of the buffer, one send from the first half.
void post_hello_receive(const Resources& resources, std::size_t size) {
    ibv_sge sge{};
    sge.addr = reinterpret_cast<std::uintptr_t>(resources.buffer.get() + size / 2);
    sge.length = static_cast<std::uint32_t>(size - size / 2);
    sge.lkey = resources.mr->lkey;
    ibv_recv_wr wr{};
    wr.wr_id = 1;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    // ibv_post_recv returns the error number itself: use it, not errno.
    if (const int rc = ibv_post_recv(resources.qp.get(), &wr, &bad); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_post_recv");
    }
}

void post_hello_send(const Resources& resources, const std::string& text) {
    std::memcpy(resources.buffer.get(), text.c_str(), text.size() + 1);
    ibv_sge sge{};
    sge.addr = reinterpret_cast<std::uintptr_t>(resources.buffer.get());
    sge.length = static_cast<std::uint32_t>(text.size() + 1);
    sge.lkey = resources.mr->lkey;
    ibv_send_wr wr{};
    wr.wr_id = 2;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    if (const int rc = ibv_post_send(resources.qp.get(), &wr, &bad); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_post_send");
    }
}

// Polls until our send and the peer's message have both completed, at most timeout.
void wait_for_hello(const Resources& resources, std::size_t size, std::chrono::seconds timeout) {
    const Clock::time_point deadline = Clock::now() + timeout;
    for (int done = 0; done < 2;) {
        ibv_wc wc{};
        const int n = ibv_poll_cq(resources.cq.get(), 1, &wc);
        if (n < 0) { throw std::system_error(EIO, std::generic_category(), "ibv_poll_cq"); }
        if (n == 0) {
            throw_if_stopped();
            if (Clock::now() >= deadline) {
                throw TutorialError(
                    kExitTimeout, "no completion within " + std::to_string(timeout.count()) + " s",
                    "is the peer still running?");
            }
            continue;
        }
        if (wc.status != IBV_WC_SUCCESS) { throw_wc_error(wc, wc.wr_id == 1); }
        ++done;
        if (wc.opcode == IBV_WC_RECV) {
            const auto* text = reinterpret_cast<const char*>(resources.buffer.get() + size / 2);
            std::printf("received %u bytes: %.*s\n", wc.byte_len,
                        static_cast<int>(strnlen(text, wc.byte_len)), text);
        }
    }
}
//! [hello]

}  // namespace tutorial

#ifndef RDMA_TUTORIAL_UNIT_TEST  // the unit tests include this file and bring their own main
//! [main]
int main(int argc, char** argv) {
    using namespace tutorial;
    try {
        const Options options = parse_options(argc, argv);
        if (options.help) {
            std::cout << usage_text();
            return kExitOk;
        }
        run(options);
        return kExitOk;
    } catch (const UsageError& e) {
        std::cerr << kProgram << ": " << e.what() << '\n' << usage_text();
        return kExitUsage;
    } catch (const TutorialError& e) {
        std::cout.flush();
        std::fflush(stdout);
        std::cerr << kProgram << ": " << e.what() << '\n';
        if (!e.hint().empty()) { std::cerr << "hint: " << e.hint() << '\n'; }
        return e.exit_code();
    } catch (const std::system_error& e) {
        std::cout.flush();
        std::fflush(stdout);
        std::cerr << kProgram << ": " << e.what() << '\n';
        return kExitRdma;
    }
}
//! [main]
#endif
