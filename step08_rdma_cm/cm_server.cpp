// Step 08: the server's CM events, its connections, and their ping-pong.
#include <netdb.h>
#include <sys/epoll.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <system_error>

#include "cm_server.hpp"

namespace tutorial {

namespace {

std::string peer_text(rdma_cm_id* id) {
    char text[NI_MAXHOST] = "?";
    getnameinfo(rdma_get_peer_addr(id), sizeof(sockaddr_storage), text, sizeof text, nullptr, 0,
                NI_NUMERICHOST);
    return text;
}

}  // namespace

//! [listen]
// rdma_getaddrinfo with RAI_PASSIVE gives the address to bind (--bind, or any); the id is made
// on our own event channel, which makes it asynchronous: every step returns at once, and its
// outcome comes as an event on the channel.
void Server::listen() {
    channel_.reset(rdma_create_event_channel());
    if (!channel_) {
        throw std::system_error(errno, std::generic_category(), "rdma_create_event_channel");
    }
    set_nonblocking(channel_->fd);
    rdma_addrinfo hints{};
    hints.ai_flags = RAI_PASSIVE;
    hints.ai_port_space = RDMA_PS_TCP;
    rdma_addrinfo* found = nullptr;
    const std::string port = std::to_string(o_.tcp_port);
    const char* node = o_.bind_address.empty() ? nullptr : o_.bind_address.c_str();
    if (rdma_getaddrinfo(node, port.c_str(), &hints, &found) != 0) {
        throw TutorialError(kExitUsage,
                            "rdma_getaddrinfo: cannot resolve --bind=" + o_.bind_address);
    }
    const AddrInfo info(found);
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(channel_.get(), &id, nullptr, RDMA_PS_TCP) != 0) {
        throw std::system_error(errno, std::generic_category(), "rdma_create_id");
    }
    listen_.reset(id);
    if (rdma_bind_addr(id, info->ai_src_addr) != 0) {
        if (errno == EADDRNOTAVAIL || errno == ENODEV) {
            throw TutorialError(kExitNoSuchDevice,
                                "rdma_bind_addr: no RDMA device owns " + o_.bind_address,
                                "rdma link show lists the devices and their interfaces; bind to "
                                "the address of one of those");
        }
        throw std::system_error(errno, std::generic_category(), "rdma_bind_addr");
    }
    if (rdma_listen(id, 128) != 0) {
        throw std::system_error(errno, std::generic_category(), "rdma_listen");
    }
    trace("rdma_listen", id);
    if (is_loopback(o_.bind_address)) {  // the bind succeeds, with no device (id->verbs null)
        std::fprintf(stderr,
                     "%s: warning: --bind=%s is a loopback address, which rdma_cm does not route "
                     "over RoCE: no RoCE client can reach this server; bind to the address of the "
                     "interface the device sits on (rdma link show)\n",
                     kProgram, o_.bind_address.c_str());
    }
}
//! [listen]

void Server::watch(int fd, std::uint64_t data) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = data;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
        throw std::system_error(errno, std::generic_category(), "epoll_ctl");
    }
}

//! [take_event]
// Each event is copied and acked before anyone acts on it: rdma_destroy_id waits for the acks
// of its id's events, so a handler that destroys the id must not hold one. The copy's pointer to
// the private data dies with the ack: a connect request's is decoded first.
void Server::on_cm_events() {
    rdma_cm_event* event = nullptr;
    while (rdma_get_cm_event(channel_.get(), &event) == 0) {
        trace(rdma_event_str(event->event), event->id);
        const rdma_cm_event copy = *event;
        std::optional<PrivateData> theirs;
        if (copy.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
            theirs =
                decode_private_data(copy.param.conn.private_data, copy.param.conn.private_data_len);
        }
        rdma_ack_cm_event(event);
        on_cm_event(copy, theirs);
    }
    if (errno != EAGAIN)
        throw std::system_error(errno, std::generic_category(), "rdma_get_cm_event");
}
//! [take_event]

//! [events]
// Every event a server can get, already acked.
void Server::on_cm_event(const rdma_cm_event& event, const std::optional<PrivateData>& theirs) {
    const std::string status = " (status " + std::to_string(event.status) + ")";
    switch (event.event) {
        case RDMA_CM_EVENT_CONNECT_REQUEST: on_connect_request(event.id, theirs); break;
        case RDMA_CM_EVENT_ESTABLISHED:  // the client's ReadyToUse: the QP is in RTS
            break;
        case RDMA_CM_EVENT_DISCONNECTED:  // the client's DisconnectRequest; ending the id answers
            // First the completions that came before it and no event has shown yet.
            if (Connection* c = find(event.id)) progress(*c, Poll::busy);
            if (Connection* c = find(event.id)) {
                end(event.id, c->pingpong->complete() ? "complete"
                                                      : "the client disconnected during the run");
            }
            break;
        case RDMA_CM_EVENT_REJECTED: end(event.id, "rejected by the client" + status); break;
        case RDMA_CM_EVENT_CONNECT_ERROR: end(event.id, "connect error" + status); break;
        case RDMA_CM_EVENT_UNREACHABLE:  // our reply went unanswered
            end(event.id, "unreachable: no ReadyToUse after our reply" + status);
            break;
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
            if (event.id == listen_.get()) {
                throw TutorialError(kExitRdma, "the listening id's RDMA device was removed");
            }
            end(event.id, "the RDMA device was removed");
            break;
        case RDMA_CM_EVENT_ADDR_CHANGE:  // the address moved (e.g. a bond's failover)
            std::printf("server: the address of %s changed\n",
                        event.id == listen_.get() ? "the listening id" : "a connection");
            break;
        case RDMA_CM_EVENT_TIMEWAIT_EXIT:  // only for an id not yet destroyed: nothing to do
            break;
        default: std::printf("server: ignored CM event %s\n", rdma_event_str(event.event)); break;
    }
}
//! [events]

// A new id for the new client, with its device (id->verbs, id->pd): ours to destroy. A reject
// carries our own -s and -n, so that the client can name the option that differs.
void Server::on_connect_request(rdma_cm_id* new_id, const std::optional<PrivateData>& theirs) {
    CmId id(new_id);
    Connection c;
    c.number = next_number_++;
    c.peer = peer_text(id.get());
    c.example = !theirs;
    c.note = theirs ? theirs->note : "";
    const PrivateData mine = run_data(o_);
    if (const std::string why = theirs ? describe_run_mismatch(mine, *theirs, true) : "";
        !why.empty()) {
        const PrivateData wire = wire_order(mine);
        std::string outcome = "rejected: " + why;
        if (rdma_reject(id.get(), &wire, sizeof wire) != 0) {
            outcome += " (rdma_reject: " + std::string(std::strerror(errno)) + ")";
        }
        return report(c, outcome);  // CmId destroys the id
    }
    try {
        accept(std::move(id), c);
        watch(c.endpoint->channel_fd(), tag(c.number, kChannel));
    } catch (const std::exception& e) {  // the id is destroyed: the client sees a reject
        return report(c, std::string("failed: ") + e.what());
    }
    connections_.emplace(c.number, std::move(c));
}

//! [accept]
// The endpoint on the new id, the receives posted before the accept (rdma-core's rdma_client
// sends as soon as its rdma_connect returns), then rdma_accept with our window and run, which
// rdma-core's examples ignore.
void Server::accept(CmId id, Connection& c) {
    const Options run = c.example ? example_run(o_) : o_;
    CmEndpointConfig config = endpoint_config(run, true);
    config.remote_window = kReportBytes;  // the client WRITEs its report there, and nowhere else
    c.endpoint = std::make_unique<CmEndpoint>(std::move(id), config);
    c.pingpong = std::make_unique<PingPong>(*c.endpoint, run, kServerSide);
    if (!o_.busy_poll) c.endpoint->request_notify();  // ibv_req_notify_cq
    c.pingpong->post_initial_receives();              // ibv_post_recv
    const PrivateData wire = wire_order(c.endpoint->window(run_data(run)));
    rdma_conn_param param = connection_parameters(wire);
    // rdma_accept moves the QP to RTR and RTS and sends the ConnectReply; it does not wait.
    const timespec since = trace_clock();
    if (rdma_accept(c.endpoint->id(), &param) != 0) {
        throw std::system_error(errno, std::generic_category(), "rdma_accept");
    }
    trace("rdma_accept", c.endpoint->id(), since);
    c.last_progress = Clock::now();
}
//! [accept]

// The completions found \p how, then the ping-pong's next step.
void Server::progress(Connection& c, Poll how) {
    std::array<ibv_wc, 16> batch{};
    completions_.clear();
    auto keep = [&](const ibv_wc& wc) { completions_.push_back(wc); };
    const ibv_wc* current = nullptr;
    try {
        if (how == Poll::event) {
            service_channel(*c.endpoint, c.endpoint->events(), std::span<ibv_wc>(batch), keep);
        } else if (how == Poll::safety_net) {
            safety_net_poll(*c.endpoint, c.endpoint->events(), std::span<ibv_wc>(batch), keep);
        } else {
            drain(*c.endpoint, std::span<ibv_wc>(batch), keep);
        }
        for (const ibv_wc& wc : completions_) {
            current = &wc;
            c.pingpong->on_completion(wc);
            c.pingpong->maybe_send();
            c.last_progress = Clock::now();
        }
    } catch (const std::exception& e) {
        // A flushed receive after the client vanished: its DISCONNECTED event says so.
        if (current == nullptr || current->status != IBV_WC_WR_FLUSH_ERR) {
            end(c.endpoint->id(), std::string("failed: ") + e.what());
        }
    }
}

void Server::sweep(Poll how) {
    for (auto it = connections_.begin(); it != connections_.end();) {
        Connection& c = (it++)->second;  // progress() may end c, and nothing else
        progress(c, how);
    }
}

//! [silent]
// A client whose host lost power or its link sends no DisconnectRequest, and while none of our
// sends is outstanding, no retry fails either: only silence tells. After --timeout seconds
// without a completion, the server disconnects it (the DisconnectRequest goes unanswered, which
// is fine) and destroys what it held. A client that connects and never sends ends the same way.
void Server::end_silent_connections() {
    const auto now = Clock::now();
    const auto limit = std::chrono::seconds(o_.timeout_seconds);
    for (auto it = connections_.begin(); it != connections_.end();) {
        Connection& c = (it++)->second;  // end() erases c, and nothing else
        if (now - c.last_progress <= limit) continue;
        std::string outcome = "no completion for " + std::to_string(o_.timeout_seconds) +
                              " s after " + std::to_string(c.pingpong->received()) +
                              " messages (the client's host is gone, or the client stalled)";
        if (rdma_disconnect(c.endpoint->id()) != 0) {
            outcome += "; rdma_disconnect: " + std::string(std::strerror(errno));
        }
        end(c.endpoint->id(), outcome + "; disconnected, its resources freed");
    }
}
//! [silent]

Connection* Server::find(rdma_cm_id* id) {
    for (auto& [number, c] : connections_) {
        if (c.endpoint->id() == id) return &c;
    }
    return nullptr;
}

void Server::report(const Connection& c, const std::string& outcome) {
    std::printf("server: client %llu (%s%s%s): %s\n", static_cast<unsigned long long>(c.number),
                c.peer.c_str(), c.note.empty() ? "" : ", ", c.note.c_str(), outcome.c_str());
    ++ended_;
}

// The connection's end, with the report that the client's one WRITE put in our window. The
// endpoint's destructor destroys the QP, CQ, channel, MR and buffer, then the id.
void Server::end(rdma_cm_id* id, std::string outcome) {
    Connection* c = find(id);
    if (c == nullptr) return;
    if (c->example) {
        outcome += "; rdma-core's example exchange";
    } else if (c->pingpong->complete()) {
        std::uint32_t reported = 0;
        std::memcpy(&reported, c->endpoint->buffer().data() + 2 * o_.size, sizeof reported);
        outcome += "; its WRITE says it received " + std::to_string(be32toh(reported)) + " replies";
    }
    report(*c, outcome);
    const timespec since = trace_clock();
    connections_.erase(c->number);  // rdma_destroy_qp, then rdma_destroy_id
    trace("rdma_destroy_id", nullptr, since);
}

void Server::shut_down() {
    std::printf("server: shutting down: %zu connection(s) open\n", connections_.size());
    connections_.clear();  // each id's destruction sends its client a DisconnectRequest
}

}  // namespace tutorial
