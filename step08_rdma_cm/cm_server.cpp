// Step 08: the server's CM events, its connections, and their ping-pong.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <system_error>

#include "cm_server.hpp"

namespace tutorial {

namespace {

std::string peer_text(rdma_cm_id* id) {
    const sockaddr* address = rdma_get_peer_addr(id);
    char text[INET6_ADDRSTRLEN] = "?";
    if (address->sa_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(address)->sin_addr, text,
                  sizeof text);
    } else if (address->sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr, text,
                  sizeof text);
    }
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

void Server::on_cm_events() {
    CmEvent event;
    while (take_cm_event(channel_.get(), event)) { on_cm_event(event); }
}

//! [events]
// Every event a server can get, already acked (take_cm_event).
void Server::on_cm_event(const CmEvent& event) {
    const std::string status = " (status " + std::to_string(event.status) + ")";
    switch (event.type) {
        case RDMA_CM_EVENT_CONNECT_REQUEST: on_connect_request(event); break;
        case RDMA_CM_EVENT_ESTABLISHED:  // the client's ReadyToUse: the QP is in RTS
            if (Connection* c = find(event.id)) c->established = true;
            break;
        case RDMA_CM_EVENT_DISCONNECTED:  // the client's DisconnectRequest, answered already
            if (Connection* c = find(event.id)) {
                end(event.id, c->pingpong->complete() ? "complete"
                                                      : "the client disconnected "
                                                        "during the run");
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
        default: std::printf("server: ignored CM event %s\n", rdma_event_str(event.type)); break;
    }
}
//! [events]

//! [connect_request]
// A new id for the new client, with its device (id->verbs, id->pd): ours to destroy. A reject
// carries our own -s and -n, so that the client can name the option that differs.
void Server::on_connect_request(const CmEvent& event) {
    CmId id(event.id);
    Connection c;
    c.number = next_number_++;
    c.peer = peer_text(id.get());
    const std::optional<PrivateData> theirs = decode_private_data(event.private_data);
    c.example = !theirs;
    PrivateData mine;
    mine.message_size = static_cast<std::uint32_t>(o_.size);
    mine.iterations = o_.iters;
    if (theirs) {
        c.note = theirs->note;
        if (const std::string why = describe_run_mismatch(mine, *theirs, true); !why.empty()) {
            const std::vector<std::byte> data = encode_private_data(mine);
            rdma_reject(id.get(), data.data(), static_cast<std::uint8_t>(data.size()));
            std::printf("server: client %llu (%s): rejected: %s\n",
                        static_cast<unsigned long long>(c.number), c.peer.c_str(), why.c_str());
            ++ended_;
            return;  // CmId destroys the id
        }
    }
    try {
        accept(std::move(id), theirs ? &*theirs : nullptr, c);
    } catch (const std::exception& e) {  // the id is destroyed: the client sees a reject
        std::printf("server: client %llu (%s): failed: %s\n",
                    static_cast<unsigned long long>(c.number), c.peer.c_str(), e.what());
        ++ended_;
        return;
    }
    watch(c.endpoint->channel_fd(), tag(c.number, kChannel));
    connections_.emplace(c.number, std::move(c));
}

//! [connect_request]

//! [accept]
// The endpoint on the new id, the receives posted before the accept (rdma-core's rdma_client
// sends as soon as its rdma_connect returns), then rdma_accept with our window and run.
void Server::accept(CmId id, const PrivateData* theirs, Connection& c) {
    Options run = o_;
    if (theirs == nullptr) {  // rdma-core's examples: one 16-byte message each way
        run.size = kExampleMessageBytes;
        run.iters = 1;
        run.check = false;
    }
    c.endpoint = std::make_unique<CmEndpoint>(std::move(id), endpoint_config(run, true));
    c.pingpong = std::make_unique<PingPong>(*c.endpoint, run, kServerSide);
    c.endpoint->request_notify();         // ibv_req_notify_cq
    c.pingpong->post_initial_receives();  // ibv_post_recv
    PrivateData reply = c.endpoint->window(2 * run.size, kReportBytes);
    reply.message_size = static_cast<std::uint32_t>(run.size);
    reply.iterations = run.iters;
    const std::vector<std::byte> data = encode_private_data(reply);
    rdma_conn_param param{};
    if (theirs != nullptr) {
        param.private_data = data.data();
        param.private_data_len = static_cast<std::uint8_t>(data.size());
    }
    param.responder_resources = 1;
    param.initiator_depth = 1;
    param.rnr_retry_count = 7;
    // rdma_accept moves the QP to RTR and RTS and sends the ConnectReply; it does not wait.
    if (rdma_accept(c.endpoint->id(), &param) != 0) {
        throw std::system_error(errno, std::generic_category(), "rdma_accept");
    }
}
//! [accept]

void Server::on_channel(Connection& c) {
    std::array<ibv_wc, 16> batch{};
    completions_.clear();
    try {
        service_channel(*c.endpoint, c.endpoint->events(), std::span<ibv_wc>(batch),
                        [&](const ibv_wc& wc) { completions_.push_back(wc); });
    } catch (const std::exception& e) {
        end(c.endpoint->id(), std::string("failed: ") + e.what());
        return;
    }
    progress(c, completions_);
}

void Server::progress(Connection& c, std::span<const ibv_wc> completions) {
    try {
        for (const ibv_wc& wc : completions) {
            c.pingpong->on_completion(wc);
            c.pingpong->maybe_send();
        }
    } catch (const std::exception& e) {
        // A flushed receive after the client vanished: its DISCONNECTED event says so.
        if (!completions.empty() && completions.back().status == IBV_WC_WR_FLUSH_ERR) return;
        end(c.endpoint->id(), std::string("failed: ") + e.what());
    }
}

// step06's safety net, once per --safety-ms: a completion whose event never came.
void Server::sweep() {
    for (auto& [number, c] : connections_) {
        std::array<ibv_wc, 16> batch{};
        completions_.clear();
        try {
            safety_net_poll(*c.endpoint, c.endpoint->events(), std::span<ibv_wc>(batch),
                            [&](const ibv_wc& wc) { completions_.push_back(wc); });
        } catch (const std::exception&) {
            continue;  // on_channel reports it
        }
        if (!completions_.empty()) {
            progress(c, completions_);
            return;  // progress may have ended c: look again next time
        }
    }
}

Connection* Server::find(rdma_cm_id* id) {
    for (auto& [number, c] : connections_) {
        if (c.endpoint->id() == id) return &c;
    }
    return nullptr;
}

//! [end]
// The client's report, which its one WRITE put in our window, then the connection's end:
// the endpoint's destructor destroys the QP, CQ, channel, MR and buffer, then the id.
void Server::end(rdma_cm_id* id, const std::string& outcome) {
    Connection* c = find(id);
    if (c == nullptr) return;
    std::string line = "server: client " + std::to_string(c->number) + " (" + c->peer +
                       (c->note.empty() ? "" : ", " + c->note) + "): " + outcome;
    if (c->example) {
        line += "; rdma-core's example exchange";
    } else if (c->pingpong->complete()) {
        std::uint32_t reported = 0;
        std::memcpy(&reported, c->endpoint->buffer().data() + 2 * o_.size, sizeof reported);
        line += "; its WRITE says it received " + std::to_string(reported) + " replies";
    }
    std::printf("%s\n", line.c_str());
    ++ended_;
    connections_.erase(c->number);
}
//! [end]

void Server::shut_down() {
    std::printf("server: shutting down: %zu connection(s) open\n", connections_.size());
    connections_.clear();  // each id's destruction sends its client a DisconnectRequest
}

}  // namespace tutorial
