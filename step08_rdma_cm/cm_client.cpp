// Step 08: the client, on librdmacm's synchronous API, as rdma-core's rdma_client: resolve,
// create the endpoint, connect with private data, ping-pong, WRITE, disconnect.
#include <poll.h>
#include <unistd.h>

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

// What a failed rdma_create_ep (address and route resolution) most likely means.
[[noreturn]] void throw_resolve_error(int err, const std::string& host) {
    if (is_loopback(host)) {
        throw TutorialError(kExitNoSuchDevice,
                            "rdma_create_ep: " + host +
                                " is a loopback address: rdma_cm does not route it over RoCE (" +
                                std::strerror(err) + ")",
                            "RoCE (and Soft-RoCE) carry rdma_cm's traffic on an Ethernet "
                            "interface: give the address of the interface the RDMA device "
                            "sits on (rdma link show; ip -4 addr show dev IFACE)");
    }
    if (err == ENODEV || err == EADDRNOTAVAIL || err == ENETUNREACH) {
        throw TutorialError(kExitNoSuchDevice,
                            "rdma_create_ep: no RDMA device owns the route to " + host + " (" +
                                std::strerror(err) + ")",
                            "rdma link show lists the devices and their interfaces");
    }
    if (err == ETIMEDOUT || err == EHOSTUNREACH) {
        throw TutorialError(kExitTimeout,
                            "rdma_create_ep: " + host + " is unreachable: " + std::strerror(err),
                            "is the host up, and on the RDMA device's subnet?");
    }
    throw std::system_error(err, std::generic_category(), "rdma_create_ep");
}

//! [resolve]
// rdma_getaddrinfo turns HOST and the port into addresses; rdma_create_ep, on a synchronous id
// (no event channel of ours), resolves the address to a local device and GID (the ARP or
// neighbour lookup), then the route. The id then has its device: id->verbs and id->pd.
CmId resolve(const Options& o) {
    rdma_addrinfo hints{};
    hints.ai_port_space = RDMA_PS_TCP;
    rdma_addrinfo* found = nullptr;
    const std::string port = std::to_string(o.tcp_port);
    if (rdma_getaddrinfo(o.host.c_str(), port.c_str(), &hints, &found) != 0) {
        throw TutorialError(kExitPeer, "rdma_getaddrinfo: cannot resolve " + o.host);
    }
    const AddrInfo info(found);
    rdma_cm_id* id = nullptr;
    if (rdma_create_ep(&id, info.get(), nullptr, nullptr) != 0) throw_resolve_error(errno, o.host);
    return CmId(id);
}
//! [resolve]

// The server's reject, from the REJECTED event that rdma_connect left in id->event. Status 8 is
// the CM's reject reason "invalid service ID": nothing listens on that port.
[[noreturn]] void throw_rejected(const rdma_cm_event& event, const Options& o,
                                 const PrivateData& mine) {
    const auto theirs =
        decode_private_data(event.param.conn.private_data, event.param.conn.private_data_len);
    if (const std::string why = theirs ? describe_run_mismatch(mine, *theirs, false) : "";
        !why.empty()) {
        throw TutorialError(kExitPeer, why);
    }
    throw TutorialError(
        kExitPeer,
        o.host + " port " + std::to_string(o.tcp_port) + " rejected the connection: " +
            (event.status == 8 ? "no rdma_cm server listens there" : "the server refused it") +
            " (REJECTED, status " + std::to_string(event.status) + ")");
}

//! [connect]
// rdma_connect sends the request with our private data and blocks until the server accepts
// (ESTABLISHED) or rejects. On the way librdmacm moves the QP INIT -> RTR -> RTS with the
// server's QPN and PSN from its reply. It returns the accept's private data.
std::optional<PrivateData> connect_to_server(CmEndpoint& ep, const Options& o,
                                             const PrivateData& mine) {
    const PrivateData wire = wire_order(mine);
    rdma_conn_param param = connection_parameters(wire);
    alarm(static_cast<unsigned>(o.timeout_seconds));  // SIGALRM ends a blocked rdma_connect
    const int rc = rdma_connect(ep.id(), &param);
    const int err = errno;
    alarm(0);
    if (rc != 0) {
        throw_if_stopped();
        if (g_alarm_rang != 0 || err == ETIMEDOUT) {  // the alarm, or the CM's own retries
            throw TutorialError(
                kExitTimeout,
                "rdma_connect: no answer from " + o.host +
                    (g_alarm_rang != 0
                         ? " within --timeout (" + std::to_string(o.timeout_seconds) + " s)"
                         : ": the CM's retries ran out"),
                "is its RDMA device up? (rdma link show on that host)");
        }
        if (err == ECONNREFUSED && ep.id()->event) throw_rejected(*ep.id()->event, o, mine);
        throw std::system_error(err, std::generic_category(), "rdma_connect");
    }
    const rdma_cm_event* event = ep.id()->event;  // ESTABLISHED, with the accept's private data
    return decode_private_data(event->param.conn.private_data, event->param.conn.private_data_len);
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

}  // namespace

//! [client]
int run_client(const Options& o) {
    install_stop_handlers();
    CmEndpoint ep(resolve(o), endpoint_config(o, o.mode == WaitMode::event));
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
    alarm(static_cast<unsigned>(o.timeout_seconds));  // it waits for the DisconnectReply
    rdma_disconnect(ep.id());  // DisconnectRequest; the server answers DisconnectReply
    alarm(0);
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
