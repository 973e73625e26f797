// The server's bookkeeping around the event loop: the target, accepting clients, the
// non-blocking handshake, the async events, the timeouts, and each session's end.
#include "server.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>

#include "async_events.hpp"
#include "atomics.hpp"
#include "cq_events.hpp"
#include "qp_transitions.hpp"
#include "wire_format.hpp"

namespace tutorial {

//! [target_mr]
Server::Server(const Options& options)
    : o_(options),
      device_(device_config(options)),
      target_(allocate_buffer(target_bytes(options.max_clients))),
      cq_(device_, 2 * options.max_clients),  // a bind or an invalidation per client at a time
      slot_taken_(options.max_clients, false) {
    if (std::string refusal = atomic_cap_refusal(device_.name(), device_.attr().atomic_cap);
        !refusal.empty()) {
        throw TutorialError(kExitRdma, refusal, "ibv_devinfo -v shows atomic_cap");
    }
    // Remote atomics need IBV_ACCESS_REMOTE_ATOMIC on the MR and on each QP; windows over it
    // need IBV_ACCESS_MW_BIND. The counter, lock and version are 8-byte aligned in it.
    const std::uint64_t bytes = target_bytes(options.max_clients);
    target_mr_.reset(ibv_reg_mr(device_.pd(), target_.get(), bytes,
                                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC |
                                    IBV_ACCESS_MW_BIND));
    if (!target_mr_) { throw_reg_mr_error(errno, bytes); }
}
//! [target_mr]

std::uint64_t Server::word(std::uint64_t offset) const {
    std::uint64_t value = 0;
    std::memcpy(&value, target_.get() + offset, sizeof value);
    return value;
}

/// tcp.hpp's listener, made non-blocking for the event loop, with room for a burst of clients.
Socket listen_for_clients(const Options& o) {
    Socket listener = listen_on(o.bind_address, o.tcp_port);
    const int flags = ::fcntl(listener.get(), F_GETFL);
    if (flags < 0 || ::fcntl(listener.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
        throw std::system_error(errno, std::generic_category(), "fcntl(O_NONBLOCK)");
    }
    if (::listen(listener.get(), 64) != 0) {
        throw std::system_error(errno, std::generic_category(), "listen");
    }
    return listener;
}

void Server::watch(int fd, std::uint64_t data) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = data;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
        throw std::system_error(errno, std::generic_category(), "epoll_ctl(ADD)");
    }
}

void Server::accept_clients() {
    for (;;) {
        sockaddr_storage addr{};
        socklen_t len = sizeof addr;
        Socket fd(::accept4(listen_.get(), reinterpret_cast<sockaddr*>(&addr), &len,
                            SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (fd.get() < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED) { return; }
            if (errno == EINTR) { continue; }
            throw std::system_error(errno, std::generic_category(), "accept4");
        }
        const int one = 1;
        ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        const std::uint64_t id = next_id_++;
        ClientSession& s = sessions_[id];
        s.id = id;
        s.peer = endpoint_text(reinterpret_cast<const sockaddr*>(&addr), len);
        s.socket = std::move(fd);
        s.handshake_deadline = Clock::now() + std::chrono::seconds(o_.timeout_seconds);
        watch(s.socket.get(), tag(id, kSocket));
        if (o_.verbose) {
            std::printf("server: client %llu (%s): connected\n",
                        static_cast<unsigned long long>(id), s.peer.c_str());
        }
    }
}

void Server::on_signal() {
    signalfd_siginfo info{};
    while (::read(signal_fd_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        if (!stopping_) {
            std::printf("server: %s received: stop accepting, end %zu client(s)\n",
                        info.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM", sessions_.size());
        }
        stopping_ = true;
    }
}

/// Each async event is acked right after it is read: ibv_destroy_qp() and _cq() wait for the
/// acks of the events that were read. A QP's event ends its session: a client's WRITE through
/// an invalidated window raises IBV_EVENT_QP_ACCESS_ERR on the server's QP.
void Server::on_async_event() {
    ibv_async_event event{};
    while (ibv_get_async_event(device_.context(), &event) == 0) {
        const ibv_event_type type = event.event_type;
        const std::string text = async_event_text(event);
        ConnectionTable::Entry owner;
        if (fatal_for_qp(type)) { owner = table_.find(event.element.qp->qp_num); }
        ibv_ack_async_event(&event);
        std::printf("server: async event: %s\n", text.c_str());
        if (fatal_for_server(type)) {
            std::printf("server: every connection is lost: ending %zu client(s)\n",
                        sessions_.size());
            exit_code_ = kExitRdma;
            stopping_ = true;
        } else if (owner.found == ConnectionTable::Found::live) {
            fail(owner.connection, "async event: " + text);
        }
    }
}

/// The client's connection: a QP that grants READ, WRITE and atomics, and the target's address,
/// length and rkey in the handshake's answer. A client gets the first free page of the target.
void Server::start_rdma(ClientSession& s, const PeerInfo& remote) {
    const auto free_slot = std::find(slot_taken_.begin(), slot_taken_.end(), false);
    if (free_slot == slot_taken_.end()) {
        reject(s.id, "every one of the --max-clients " + std::to_string(o_.max_clients) +
                         " pages of the target is taken: raise --max-clients");
        return;
    }
    const Exposed target{reinterpret_cast<std::uintptr_t>(target_.get()),
                         target_bytes(o_.max_clients), target_mr_->rkey};
    s.connection = std::make_unique<Connection>(
        device_, cq_.get(), static_cast<std::uint32_t>(o_.tx_depth), *mtu_from_bytes(o_.mtu),
        IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC, target);
    Connection& c = *s.connection;
    c.use_local_address(local_address_bytes(s.socket));  // step03's rule: this client's GID
    c.connect(remote);
    (void)table_.add(c.qp_num(), s.id);
    s.slot = static_cast<std::uint32_t>(free_slot - slot_taken_.begin());
    *free_slot = true;
    const HandshakeV3Message reply = encode_handshake_v3(with_run(c.local_info(), {}));
    send_all(s.socket, {reinterpret_cast<const char*>(reply.data()), reply.size()},
             std::chrono::seconds(o_.timeout_seconds), "the handshake reply");
    if (o_.verbose) {
        std::printf("%s\n", gid_choice_line(c.local_port()).c_str());
        print_address("local", c.local_info());
        print_address("remote", remote);
    }
    ++totals_.connected;
    s.state = ClientSession::State::await_done;
}

/// A client's socket is readable: the handshake's bytes, "done", a window command, or the end.
void Server::on_socket(ClientSession& s) {
    char chunk[256];
    const ssize_t n = ::read(s.socket.get(), chunk, sizeof chunk);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) { return; }
        if (errno != ECONNRESET) {
            throw std::system_error(errno, std::generic_category(), "read");
        }
    }
    if (n <= 0) {  // EOF or reset: the client is done, or gone
        if (s.state == ClientSession::State::handshake) {
            reject(s.id, "peer closed after " + std::to_string(s.inbox.size()) + " of " +
                             std::to_string(kHandshakeV3Size) + " handshake bytes (" +
                             printable_bytes(s.inbox) + ")");
        } else if (s.state == ClientSession::State::await_done) {
            reject(s.id, "peer closed before sending \"done\"");
        } else {
            finish(s.id, "complete", &ServerTotals::complete);
        }
        return;
    }
    s.inbox.insert(s.inbox.end(), chunk, chunk + n);
    const std::uint64_t id = s.id;
    take_handshake(s);
    if (sessions_.count(id) != 0) { take_done(s); }
    if (sessions_.count(id) != 0 && s.state == ClientSession::State::running) {
        try {
            take_command(s);
        } catch (const std::exception& e) {  // a failed post or send
            fail(id, e.what());
        }
    }
}

/// Once the whole handshake message is in: parse it, start the client's RDMA, answer.
void Server::take_handshake(ClientSession& s) {
    if (s.state != ClientSession::State::handshake || s.inbox.size() < kHandshakeV3Size) { return; }
    const auto end = s.inbox.begin() + static_cast<std::ptrdiff_t>(kHandshakeV3Size);
    const std::vector<char> message(s.inbox.begin(), end);
    s.inbox.erase(s.inbox.begin(), end);
    try {
        start_rdma(s, decode_handshake_v3(std::as_bytes(std::span(message))));
    } catch (const TutorialError& e) { reject(s.id, e.what()); } catch (const std::exception& e) {
        fail(s.id, e.what());
    }
}

/// After the handshake, the client sends "done" (and a NUL): then its run begins.
void Server::take_done(ClientSession& s) {
    const std::string_view done(kDoneMessage, sizeof kDoneMessage);  // with its NUL
    if (s.state != ClientSession::State::await_done || s.inbox.size() < done.size()) { return; }
    if (!std::equal(done.begin(), done.end(), s.inbox.begin())) {
        reject(s.id, "expected \"done\" after the handshake, got " +
                         printable_bytes(std::span<const char>(s.inbox).first(done.size())));
        return;
    }
    s.inbox.erase(s.inbox.begin(), s.inbox.begin() + static_cast<std::ptrdiff_t>(done.size()));
    s.state = ClientSession::State::running;
}

void Server::reject(std::uint64_t id, const std::string& why) {
    finish(id, "rejected: " + why, &ServerTotals::rejected);
}

void Server::fail(std::uint64_t id, const std::string& why) {
    finish(id, "failed: " + why, &ServerTotals::failed);
}

/// A session's end: its line, its socket closed (so that the client knows), its window
/// deallocated and its QP destroyed. A completion of that QP still in the shared CQ is stale.
void Server::finish(std::uint64_t id, const std::string& outcome,
                    std::uint32_t ServerTotals::*counter) {
    auto it = sessions_.find(id);
    if (it == sessions_.end()) { return; }
    ClientSession& s = it->second;
    std::printf("server: client %llu (%s): %s; counter %llu\n", static_cast<unsigned long long>(id),
                s.peer.c_str(), outcome.c_str(),
                static_cast<unsigned long long>(word(kCounterOffset)));
    totals_.*counter += 1;
    if (s.socket.get() >= 0) { ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, s.socket.get(), nullptr); }
    if (s.connection) {
        table_.retire(s.connection->qp_num());
        slot_taken_[s.slot] = false;
    }
    ++ended_;
    sessions_.erase(it);  // the socket, the window, then the QP
}

/// The handshake's timeout, checked once per safety period.
void Server::end_silent_sessions() {
    const auto now = Clock::now();
    for (auto it = sessions_.begin(); it != sessions_.end();) {
        const auto& [id, s] = *(it++);
        if (s.state == ClientSession::State::handshake && now > s.handshake_deadline) {
            reject(id, "no handshake within " + std::to_string(o_.timeout_seconds) + " s (" +
                           std::to_string(s.inbox.size()) + " bytes received)");
        }
    }
}

/// Shutdown: no more accepts, every client ended; the target's words and the totals.
void Server::shut_down() {
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listen_.get(), nullptr);
    listen_.reset();
    while (!sessions_.empty()) {
        finish(sessions_.begin()->first, "aborted by shutdown", &ServerTotals::aborted);
    }
    std::printf("server: clients: %u connected, %u complete, %u failed, %u rejected, %u aborted\n",
                totals_.connected, totals_.complete, totals_.failed, totals_.rejected,
                totals_.aborted);
    std::printf("server: target: counter %llu, lock %llu, version %llu\n",
                static_cast<unsigned long long>(word(kCounterOffset)),
                static_cast<unsigned long long>(word(kLockOffset)),
                static_cast<unsigned long long>(word(kVersionOffset)));
    std::printf("server: windows: %u bound, %u invalidated; %llu stale completions\n",
                totals_.windows_bound, totals_.windows_invalidated,
                static_cast<unsigned long long>(totals_.stale_completions));
}

}  // namespace tutorial
