// Step 08: the client, on librdmacm's asynchronous API with its own event channel: resolve,
// create the endpoint, connect with private data, ping-pong, WRITE, disconnect.
#include <poll.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "cm_endpoint.hpp"
#include "pingpong.hpp"
#include "stats.hpp"
#include "stop_signals.hpp"

namespace tutorial {

namespace {

// librdmacm's own limit for each resolution step (rdma_create_ep's): the kernel reports the
// outcome as an event within it.
constexpr int kResolveMs = 2000;

// What a failed address or route resolution most likely means.
[[noreturn]] void throw_resolve_error(const char* verb, int err, const std::string& host) {
    if (is_loopback(host)) {
        throw TutorialError(kExitNoSuchDevice,
                            std::string(verb) + ": " + host +
                                " is a loopback address: rdma_cm does not route it over RoCE (" +
                                std::strerror(err) + ")",
                            "RoCE (and Soft-RoCE) carry rdma_cm's traffic on an Ethernet "
                            "interface: give the address of the interface the RDMA device "
                            "sits on (rdma link show; ip -4 addr show dev IFACE)");
    }
    if (err == ENODEV || err == EADDRNOTAVAIL || err == ENETUNREACH) {
        throw TutorialError(kExitNoSuchDevice,
                            std::string(verb) + ": no RDMA device owns the route to " + host +
                                " (" + std::strerror(err) + ")",
                            "rdma link show lists the devices and their interfaces");
    }
    if (err == ETIMEDOUT || err == EHOSTUNREACH) {
        throw TutorialError(
            kExitTimeout,
            std::string(verb) + ": " + host + " is unreachable: " + std::strerror(err),
            "is the host up, and on the RDMA device's subnet?");
    }
    throw std::system_error(err, std::generic_category(), verb);
}

//! [next_event]
// One CM event, copied and acked at once, as the server does: its type, its status (a negative
// errno, or the CM's reject reason) and its private data, decoded before the ack frees it.
struct CmEvent {
    rdma_cm_event_type event = RDMA_CM_EVENT_ADDR_ERROR;
    int status_code = 0;  // rdma_cm_event's status
    std::optional<PrivateData> theirs;
};

// The id's next event, waited for with stop_signals.hpp's ppoll on the channel's fd: SIGINT or
// SIGTERM ends the wait at once (exit 130). Nothing when the deadline passes first.
std::optional<CmEvent> next_event(rdma_event_channel* channel, Clock::time_point deadline) {
    for (;;) {
        rdma_cm_event* event = nullptr;
        if (rdma_get_cm_event(channel, &event) == 0) {  // O_NONBLOCK: EAGAIN when none is queued
            trace(rdma_event_str(event->event), event->id);
            CmEvent copy{event->event, event->status,
                         decode_private_data(event->param.conn.private_data,
                                             event->param.conn.private_data_len)};
            rdma_ack_cm_event(event);
            return copy;
        }
        if (errno != EAGAIN) {
            throw std::system_error(errno, std::generic_category(), "rdma_get_cm_event");
        }
        if (!wait_for(channel->fd, POLLIN, deadline)) return std::nullopt;
    }
}
//! [next_event]

// An event's failure as an errno, as librdmacm's synchronous calls report it.
int event_errno(const CmEvent& event) {
    if (event.event == RDMA_CM_EVENT_REJECTED) return ECONNREFUSED;
    if (event.status_code == 0) return EPROTO;  // an event that reports no error, unexpected here
    return event.status_code < 0 ? -event.status_code : event.status_code;
}

// One resolution step's event: \p wanted, or the error it reports.
void expect_resolved(rdma_event_channel* channel, rdma_cm_event_type wanted, const char* verb,
                     const std::string& host) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(kResolveMs + 1000);
    const std::optional<CmEvent> event = next_event(channel, deadline);
    if (!event) throw_resolve_error(verb, ETIMEDOUT, host);
    if (event->event != wanted) throw_resolve_error(verb, event_errno(*event), host);
}

//! [resolve]
// The client's id is on an event channel of its own, as the server's: each call returns at once,
// and its outcome comes as an event (next_event). rdma_getaddrinfo turns HOST and the port into
// addresses; rdma_resolve_addr finds the local device and GID (the ARP or neighbour lookup),
// rdma_resolve_route the path. The id then has its device: id->verbs and id->pd.
CmId resolve(rdma_event_channel* channel, const Options& o) {
    rdma_addrinfo hints{};
    hints.ai_port_space = RDMA_PS_TCP;
    rdma_addrinfo* found = nullptr;
    const std::string port = std::to_string(o.tcp_port);
    if (rdma_getaddrinfo(o.host.c_str(), port.c_str(), &hints, &found) != 0) {
        throw TutorialError(kExitPeer, "rdma_getaddrinfo: cannot resolve " + o.host);
    }
    const AddrInfo info(found);
    rdma_cm_id* raw = nullptr;
    if (rdma_create_id(channel, &raw, nullptr, RDMA_PS_TCP) != 0) {
        throw std::system_error(errno, std::generic_category(), "rdma_create_id");
    }
    CmId id(raw);
    if (rdma_resolve_addr(raw, info->ai_src_addr, info->ai_dst_addr, kResolveMs) != 0) {
        throw_resolve_error("rdma_resolve_addr", errno, o.host);
    }
    trace("rdma_resolve_addr", raw);
    expect_resolved(channel, RDMA_CM_EVENT_ADDR_RESOLVED, "rdma_resolve_addr", o.host);
    if (o.tos >= 0) {
        // Before the route: rdma_cm puts the ToS into the path (RoCE: the GRH's traffic class,
        // and an SL from it), and the connect request carries it to the server's side.
        auto tos = static_cast<std::uint8_t>(o.tos);
        if (rdma_set_option(raw, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos) != 0) {
            throw std::system_error(errno, std::generic_category(), "rdma_set_option(TOS)");
        }
    }
    if (rdma_resolve_route(raw, kResolveMs) != 0) {
        throw_resolve_error("rdma_resolve_route", errno, o.host);
    }
    trace("rdma_resolve_route", raw);
    expect_resolved(channel, RDMA_CM_EVENT_ROUTE_RESOLVED, "rdma_resolve_route", o.host);
    return id;
}
//! [resolve]

// The server's reject, with its private data. Status 8 is the CM's reject reason "invalid
// service ID": nothing listens on that port.
[[noreturn]] void throw_rejected(const CmEvent& event, const Options& o, const PrivateData& mine) {
    if (const std::string why =
            event.theirs ? describe_run_mismatch(mine, *event.theirs, false) : "";
        !why.empty()) {
        throw TutorialError(kExitPeer, why);
    }
    throw TutorialError(
        kExitPeer,
        o.host + " port " + std::to_string(o.tcp_port) + " rejected the connection: " +
            (event.status_code == 8 ? "no rdma_cm server listens there" : "the server refused it") +
            " (REJECTED, status " + std::to_string(event.status_code) + ")");
}

//! [connect]
// rdma_connect sends the request with our private data and returns; the server's accept comes as
// ESTABLISHED (or its reject as REJECTED). On the way librdmacm moves the QP INIT -> RTR -> RTS
// with the server's QPN and PSN from its reply. It returns the accept's private data.
std::optional<PrivateData> connect_to_server(CmEndpoint& ep, const Options& o,
                                             const PrivateData& mine) {
    const PrivateData wire = wire_order(mine);
    rdma_conn_param param = connection_parameters(wire);
    const timespec since = trace_clock();
    if (rdma_connect(ep.id(), &param) != 0) {
        throw std::system_error(errno, std::generic_category(), "rdma_connect");
    }
    trace("rdma_connect", ep.id(), since);
    const auto deadline = Clock::now() + std::chrono::seconds(o.timeout_seconds);
    const std::optional<CmEvent> event = next_event(ep.id()->channel, deadline);
    if (!event || event_errno(*event) == ETIMEDOUT) {  // --timeout, or the CM's own retries
        throw TutorialError(
            kExitTimeout,
            "rdma_connect: no answer from " + o.host +
                (!event ? " within --timeout (" + std::to_string(o.timeout_seconds) + " s)"
                        : ": the CM's retries ran out"),
            "is its RDMA device up? (rdma link show on that host)");
    }
    if (event->event == RDMA_CM_EVENT_REJECTED) throw_rejected(*event, o, mine);
    if (event->event != RDMA_CM_EVENT_ESTABLISHED) {
        throw std::system_error(event_errno(*event), std::generic_category(),
                                std::string("rdma_connect: ") + rdma_event_str(event->event));
    }
    return event->theirs;  // the accept's private data
}
//! [connect]

// step06's waits, busy and event, with the CM channel in place of the TCP socket.
template <typename Handle>
void wait_for_completion(CmEndpoint& ep, const Options& o, Handle&& handle) {
    std::array<ibv_wc, 16> batch{};
    const auto deadline = Clock::now() + std::chrono::seconds(o.timeout_seconds);
    for (std::uint32_t spins = 0;; ++spins) {
        if (o.mode == WaitMode::busy) {
            const int n = ep.poll(batch);
            for (int i = 0; i < n; ++i) { handle(batch[static_cast<std::size_t>(i)]); }
            if (n > 0) { return; }
            if ((spins & 1023) != 0) { continue; }
        } else {
            std::array<pollfd, 2> fds{
                {{ep.channel_fd(), POLLIN, 0}, {ep.id()->channel->fd, POLLIN, 0}}};
            if (::poll(fds.data(), fds.size(), o.safety_ms) > 0 && fds[0].revents != 0 &&
                service_channel(ep, ep.events(), std::span<ibv_wc>(batch), handle) > 0) {
                return;
            }
            if (safety_net_poll(ep, ep.events(), std::span<ibv_wc>(batch), handle) > 0) return;
        }
        throw_if_stopped();
        // A CM event on the id's own channel: DISCONNECTED when the server ended the connection.
        if (pollfd p{ep.id()->channel->fd, POLLIN, 0}; ::poll(&p, 1, 0) > 0) {
            rdma_cm_event* event = nullptr;
            const bool got = rdma_get_cm_event(ep.id()->channel, &event) == 0;
            const rdma_cm_event_type type = got ? event->event : RDMA_CM_EVENT_DISCONNECTED;
            if (got) rdma_ack_cm_event(event);
            throw TutorialError(kExitPeer,
                                type == RDMA_CM_EVENT_DISCONNECTED
                                    ? "the server disconnected during the run"
                                    : std::string(rdma_event_str(type)) + " during the run",
                                "the server's own output says why");
        }
        if (Clock::now() > deadline) {
            throw TutorialError(kExitTimeout, "no completion within --timeout");
        }
    }
}

std::vector<double> ping_pong(CmEndpoint& ep, const Options& o, PingPong& pingpong) {
    std::vector<double> round_trips;
    round_trips.reserve(o.iters);
    auto on_wc = [&](const ibv_wc& wc) {
        pingpong.on_completion(wc);
        if (wc.wr_id == kReceiveWrId) {
            const std::chrono::duration<double, std::micro> rtt =
                pingpong.last_receive() - pingpong.last_send();
            round_trips.push_back(rtt.count());
        }
    };
    while (!pingpong.complete()) {
        throw_if_stopped();
        pingpong.maybe_send();
        wait_for_completion(ep, o, on_wc);
    }
    return round_trips;
}

// One one-sided WRITE into the server's window, with the address and rkey of its private data:
// the replies this client received. The server reads it once the client has disconnected.
void write_report(CmEndpoint& ep, const Options& o, const PrivateData& server,
                  std::uint32_t received) {
    const std::uint32_t value = htobe32(received);  // big-endian, as the private data
    if (server.length < sizeof value) {
        throw TutorialError(kExitPeer, "the server's report window is " +
                                           std::to_string(server.length) +
                                           " bytes, too small for the 4-byte report");
    }
    const std::size_t at = 2 * o.size;  // this side's last bytes, as the source
    std::memcpy(ep.buffer().data() + at, &value, sizeof value);
    ep.post_write(kReportWrId, at, sizeof value, server);
    wait_for_completion(ep, o, [](const ibv_wc& wc) {  // the only one: the ping-pong is complete
        if (wc.status != IBV_WC_SUCCESS) throw WorkCompletionError(wc, false);  // the WRITE
    });
}

// An event channel of the client's own, its fd O_NONBLOCK, as the server's (Server::listen).
CmEventChannel open_event_channel() {
    CmEventChannel channel(rdma_create_event_channel());
    if (!channel) {
        throw std::system_error(errno, std::generic_category(), "rdma_create_event_channel");
    }
    set_nonblocking(channel->fd);
    return channel;
}

//! [disconnect]
// rdma_disconnect sends the DisconnectRequest and returns; the server's DisconnectReply comes as
// DISCONNECTED. The run is over either way: a reply that has not come within --timeout is not
// waited for any longer.
void disconnect(CmEndpoint& ep, const Options& o) {
    const timespec since = trace_clock();
    if (rdma_disconnect(ep.id()) != 0) return;  // e.g. the server disconnected first
    trace("rdma_disconnect", ep.id(), since);
    const auto deadline = Clock::now() + std::chrono::seconds(o.timeout_seconds);
    while (const std::optional<CmEvent> event = next_event(ep.id()->channel, deadline)) {
        if (event->event == RDMA_CM_EVENT_DISCONNECTED) return;
    }
}
//! [disconnect]

}  // namespace

//! [client]
int run_client(const Options& o) {
    install_stop_handlers();
    // Declared first: the channel outlives the id on it (rdma_destroy_event_channel(3)).
    const CmEventChannel channel = open_event_channel();
    CmEndpoint ep(resolve(channel.get(), o), endpoint_config(o, o.mode == WaitMode::event));
    PrivateData mine = ep.window(run_data(o));     // no remote window: address, rkey, length 0
    o.note.copy(mine.note, sizeof mine.note - 1);  // parse_options checked its length
    const std::optional<PrivateData> server = connect_to_server(ep, o, mine);
    if (o.mode == WaitMode::event) ep.request_notify();  // ibv_req_notify_cq
    // A peer without the magic is one of rdma-core's examples: one 16-byte SEND each way.
    const Options run = server ? o : example_run(o);
    PingPong pingpong(ep, run, kClientSide);
    pingpong.post_initial_receives();  // ibv_post_recv, before the first send
    std::printf("client: connected to %s port %d (%s), QPN 0x%06x\n", o.host.c_str(), o.tcp_port,
                server ? "a step08 server" : "no private data: rdma-core's example exchange",
                ep.id()->qp->qp_num);  // the QP that rdma_create_qp made
    const auto start = Clock::now();
    const std::vector<double> round_trips = ping_pong(ep, run, pingpong);
    const std::chrono::duration<double, std::micro> elapsed = Clock::now() - start;
    if (server) write_report(ep, o, *server, pingpong.received());
    disconnect(ep, o);  // DisconnectRequest; the server answers DisconnectReply
    std::printf("%s", rc_pingpong_summary(run.size, run.iters, elapsed.count()).c_str());
    std::printf("%s",
                latency_table(run.size, run.iters, compute_latency_stats(round_trips)).c_str());
    take_queued_events(ep);
    ack_all_before_destroy(ep, ep.events());
    if (o.check) std::printf("client: verified %u of %u replies\n", pingpong.verified(), o.iters);
    return kExitOk;
}
//! [client]

}  // namespace tutorial
