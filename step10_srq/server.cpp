// The server's bookkeeping around the event loop: accepting clients, the non-blocking handshake,
// starting a client's RDMA, its progress, the timeouts, and each session's end.
#include "server.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <system_error>
#include <utility>

#include "async_events.hpp"
#include "cpu_usage.hpp"
#include "cq_events.hpp"

namespace tutorial {

/// tcp.hpp's listener, made non-blocking for the event loop, and with room for a burst of clients
/// (a second listen() raises the backlog of 1 that a one-client server needs).
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
    ev.events = EPOLLIN;  // level-triggered: see the chapter
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
            if (errno == EMFILE || errno == ENFILE) {
                refuse_at_fd_limit();
                return;
            }
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
        s.last_progress = Clock::now();
        watch(s.socket.get(), tag(id, kSocket));
        if (o_.verbose) {
            std::printf("server: client %llu (%s): connected\n",
                        static_cast<unsigned long long>(id), s.peer.c_str());
        }
    }
}

/// How a client refused for want of a file descriptor is told about: the limit and who holds it.
std::string Server::fd_limit_text(std::size_t other_clients) const {
    rlimit limit{};
    ::getrlimit(RLIMIT_NOFILE, &limit);
    return "out of file descriptors (open-file limit " + std::to_string(limit.rlim_cur) +
           ", ulimit -n; " + std::to_string(other_clients) +
           " client(s) hold theirs): new clients are served again once some end";
}

/// accept4 found no free fd (it says so even when no client waits). A waiting client would stay
/// in the listen backlog, and level-triggered epoll would report the listener again at once,
/// forever. The spare fd kept for this moment makes room to accept the client and close it at
/// once (it sees the connection close); then the spare is taken again.
void Server::refuse_at_fd_limit() {
    spare_fd_.reset();
    if (Socket(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC)).get() >= 0) {
        std::printf("server: refused a client: %s\n", fd_limit_text(sessions_.size()).c_str());
    }  // closed here, before the spare is taken again
    spare_fd_ = Socket(::open("/dev/null", O_RDONLY | O_CLOEXEC));
}

void Server::on_signal() {
    signalfd_siginfo info{};
    while (::read(signal_fd_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        if (!stopping_) {
            std::printf("server: %s received: stop accepting, abort %zu in-flight client(s)\n",
                        info.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM", sessions_.size());
        }
        stopping_ = true;
    }
}

//! [on_async_event]
/// Each async event is printed and acked. A fatal one ends the connection whose QP or CQ it names:
/// after the ack, since ibv_destroy_qp() and ibv_destroy_cq() wait for their events' acks.
void Server::on_async_event() {
    ibv_async_event event{};
    while (ibv_get_async_event(device_.context(), &event) == 0) {
        std::optional<std::uint64_t> ended;
        for (const auto& [id, s] : sessions_) {
            if (s.endpoint && fatal_for_qp(event.event_type) &&
                (event.event_type == IBV_EVENT_CQ_ERR ? event.element.cq == s.endpoint->cq()
                                                      : event.element.qp == s.endpoint->qp())) {
                ended = id;
            }
        }
        const std::string text = async_event_text(event);
        std::printf("server: async event: %s\n", text.c_str());
        ibv_ack_async_event(&event);
        if (ended) { fail(*ended, "async event: " + text); }
    }
}
//! [on_async_event]

//! [start_rdma]
/// Returns the -s/-n mismatch with a v3 client (answered first, so that the client says it too),
/// or an empty string once the client's QP is connected and answered.
std::string Server::start_rdma(ClientSession& s, PeerInfo remote) {
    s.endpoint = std::make_unique<RDMAEndpoint>(device_, endpoint_config(o_, true));
    RDMAEndpoint& ep = *s.endpoint;
    ep.use_local_address(local_address_bytes(s.socket));  // step03's rule: this client's GID
    if (s.format == HandshakeFormat::v3) {
        if (std::string mismatch = describe_run_mismatch(
                with_run(ep.local_info(), handshake_settings(o_)), remote, true);
            !mismatch.empty()) {
            try {
                answer(s);
            } catch (const std::exception&) {  // the mismatch is the news, not a closed socket
            }
            s.endpoint.reset();
            return mismatch;
        }
    }
    s.pingpong = std::make_unique<PingPong>(ep, o_, kServerSide);
    // Arm BEFORE the first post: a completion that lands before the first
    // ibv_req_notify_cq() raises no event at all.
    ep.request_notify();
    s.pingpong->post_initial_receives();
    if (s.format != HandshakeFormat::v3) {
        remote.mtu = ep.path_mtu();  // not on rc_pingpong's wire: both sides are given -m
    }
    ep.connect(remote);
    watch(ep.channel_fd(), tag(s.id, kChannel));
    answer(s);
    if (o_.verbose) {
        std::printf("%s\n", gid_choice_line(ep.local_port()).c_str());
        print_address("local", ep.local_info());
        print_address("remote", remote);
    }
    return {};
}
//! [start_rdma]

void Server::answer(ClientSession& s) {
    const PeerInfo local = with_run(s.endpoint->local_info(), handshake_settings(o_));
    const std::chrono::seconds timeout(o_.timeout_seconds);
    if (s.format == HandshakeFormat::v3) {
        const HandshakeV3Message reply = encode_handshake_v3(local);
        send_all(s.socket, {reinterpret_cast<const char*>(reply.data()), reply.size()}, timeout,
                 "the handshake reply");
    } else {
        send_all(s.socket, format_wire_message(local), timeout, "the handshake reply");
    }
}

/// A client's socket is readable: the handshake's bytes, "done", or the end of the connection.
void Server::on_socket(ClientSession& s) {
    char chunk[256];
    const ssize_t n = ::read(s.socket.get(), chunk, sizeof chunk);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) { return; }
        if (errno != ECONNRESET) {
            throw std::system_error(errno, std::generic_category(), "read");
        }
    }
    const std::size_t wire_size =
        s.format == HandshakeFormat::v3 ? kHandshakeV3Size : kWireMessageSize;
    if (n <= 0) {  // EOF or reset
        if (s.state == ClientSession::State::handshake) {
            reject(s.id, "peer closed after " + std::to_string(s.inbox.size()) + " of " +
                             std::to_string(wire_size) + " handshake bytes (" +
                             printable_bytes(s.inbox) + ")");
            return;
        }
        if (s.state == ClientSession::State::await_done) {
            reject(s.id, "peer closed before sending \"done\"");
            return;
        }
        // ibv_rc_pingpong (and step05's class) close the TCP connection after the
        // handshake: from here on only the QP tells whether the client is alive.
        ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, s.socket.get(), nullptr);
        s.socket.reset();
        return;
    }
    s.inbox.insert(s.inbox.end(), chunk, chunk + n);
    if (!s.format && s.inbox.size() >= 4) {
        s.format = detect_handshake(std::span<const char, 4>(s.inbox.data(), 4));
    }
    const std::uint64_t id = s.id;
    take_handshake(s);
    if (sessions_.count(id) != 0) { take_done(s); }
    if (sessions_.count(id) != 0 && s.state == ClientSession::State::running && !s.inbox.empty()) {
        fail(s.id, "unexpected bytes after the handshake (" + printable_bytes(s.inbox) + ")");
    }
}

/// Once the whole handshake message is in: parse it, start the client's RDMA, answer.
void Server::take_handshake(ClientSession& s) {
    const std::size_t size = s.format == HandshakeFormat::v3 ? kHandshakeV3Size : kWireMessageSize;
    if (s.state != ClientSession::State::handshake || !s.format || s.inbox.size() < size) {
        return;
    }
    const auto end = s.inbox.begin() + static_cast<std::ptrdiff_t>(size);
    const std::vector<char> message(s.inbox.begin(), end);
    s.inbox.erase(s.inbox.begin(), end);
    PeerInfo remote;
    if (s.format == HandshakeFormat::v3) {
        try {
            remote = decode_handshake_v3(std::as_bytes(std::span(message)));
        } catch (const TutorialError& e) {
            reject(s.id, e.what());
            return;
        }
    } else {
        std::string error;
        const std::optional<QpEndpointInfo> info = parse_wire_message(message, error);
        if (!info) {
            reject(s.id, "bad handshake: " + error + "; received " +
                             std::to_string(message.size()) +
                             " bytes: " + printable_bytes(message));
            return;
        }
        static_cast<QpEndpointInfo&>(remote) = *info;
    }
    try {
        if (std::string mismatch = start_rdma(s, remote); !mismatch.empty()) {
            reject(s.id, mismatch);
            return;
        }
    } catch (const std::system_error& e) {
        if (e.code().value() == EMFILE || e.code().value() == ENFILE) {  // e.g. the channel's fd
            reject(s.id, fd_limit_text(sessions_.size() - 1) + " (" + e.what() + ")");
        } else {
            fail(s.id, e.what());
        }
        return;
    } catch (const std::exception& e) {
        fail(s.id, e.what());
        return;
    }
    ++totals_.connected;
    s.state = ClientSession::State::await_done;
    s.last_progress = Clock::now();
}

/// After the handshake, the client sends "done" (and a NUL): ibv_rc_pingpong's last word.
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

void Server::progress(ClientSession& s, std::span<const ibv_wc> completions) {
    try {
        for (const ibv_wc& wc : completions) {
            s.pingpong->on_completion(wc);
            s.pingpong->maybe_send();
            s.last_progress = Clock::now();
        }
    } catch (const std::exception& e) {  // a failed completion, a payload check, a failed post
        fail(s.id, e.what());
        return;
    }
    if (s.pingpong->complete()) { finish(s.id, "complete", &ServerTotals::complete); }
}

void Server::reject(std::uint64_t id, const std::string& why) {
    finish(id, "rejected: " + why, &ServerTotals::rejected);
}

void Server::fail(std::uint64_t id, const std::string& why) {
    finish(id, "failed: " + why, &ServerTotals::failed);
}

//! [finish]
void Server::finish(std::uint64_t id, const std::string& outcome,
                    std::uint32_t ServerTotals::*counter) {
    auto it = sessions_.find(id);
    if (it == sessions_.end()) { return; }
    ClientSession& s = it->second;
    std::string line = "server: client " + std::to_string(id) + " (" + s.peer + "): " + outcome;
    if (s.endpoint) {
        RDMAEndpoint& ep = *s.endpoint;
        // Leave the epoll set, then ack every event: ibv_destroy_cq waits for that.
        ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, ep.channel_fd(), nullptr);
        take_queued_events(ep);
        ack_all_before_destroy(ep, ep.events());
        const CqEventTracker& ev = ep.events();
        line += "; " + std::to_string(s.pingpong->received()) + " received, " +
                std::to_string(s.pingpong->sent()) + " sent, " +
                std::to_string(s.pingpong->verified()) + " verified; " + event_counts(ev);
        totals_.events += ev.received();
        totals_.acked += ev.acked();
        totals_.empty_drains += ev.empty_drains();
        totals_.safety_net_finds += ev.safety_net_finds();
        totals_.messages += s.pingpong->received();
    }
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    totals_.*counter += 1;
    ++ended_;
    sessions_.erase(it);  // PingPong, then the endpoint (QP, CQ, channel, MR, buffer)
}
//! [finish]

/// The timeouts, checked once per safety period: a client that went silent, and a handshake that
/// never came.
void Server::end_silent_sessions() {
    const auto now = Clock::now();
    for (auto it = sessions_.begin(); it != sessions_.end();) {
        const auto id = (it++)->first;
        ClientSession& s = sessions_.at(id);
        if (s.pingpong && now - s.last_progress > std::chrono::seconds(o_.timeout_seconds) &&
            s.format == HandshakeFormat::rc_pingpong && s.pingpong->received() > 0 &&
            s.pingpong->received() == s.pingpong->sent()) {
            // ibv_rc_pingpong's handshake cannot carry -n: a client started with a smaller
            // -n took its last answer and ended, as if killed. Name the likelier cause.
            fail(id, "the client ended the session after " +
                         std::to_string(s.pingpong->received()) +
                         " messages; both sides must use the same -n (this server uses -n " +
                         std::to_string(o_.iters) +
                         "; ibv_rc_pingpong's handshake cannot carry -n to compare it)");
            continue;
        }
        if (s.pingpong && now - s.last_progress > std::chrono::seconds(o_.timeout_seconds)) {
            // A client killed while we wait for its next message leaves no trace
            // but silence (with a reply in flight, IBV_WC_RETRY_EXC_ERR comes first).
            fail(id, "no message for " + std::to_string(o_.timeout_seconds) + " s after " +
                         std::to_string(s.pingpong->received()) + " of " +
                         std::to_string(o_.iters) +
                         " (client killed or stalled); its resources are freed");
            continue;
        }
        if (s.state == ClientSession::State::handshake && now > s.handshake_deadline) {
            reject(id, "no handshake within " + std::to_string(o_.timeout_seconds) + " s (" +
                           std::to_string(s.inbox.size()) + " bytes received)");
        }
    }
}

/// Shutdown: no more accepts, then every client is ended and its events acked; the totals.
void Server::shut_down() {
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listen_.get(), nullptr);
    listen_.reset();
    while (!sessions_.empty()) {
        auto& [id, s] = *sessions_.begin();
        finish(id,
               s.pingpong ? "aborted by shutdown after " + std::to_string(s.pingpong->received()) +
                                " of " + std::to_string(o_.iters) + " messages"
                          : std::string("aborted by shutdown during the handshake"),
               &ServerTotals::aborted);
    }
    const CpuUsage cpu = cpu_usage();
    std::printf("server: clients: %u connected, %u complete, %u failed, %u rejected, %u aborted\n",
                totals_.connected, totals_.complete, totals_.failed, totals_.rejected,
                totals_.aborted);
    std::printf("server: messages received: %llu\n",
                static_cast<unsigned long long>(totals_.messages));
    std::printf(
        "server: CQ events: received %llu, acked %llu, empty drains %llu, safety-net finds "
        "%llu\n",
        static_cast<unsigned long long>(totals_.events),
        static_cast<unsigned long long>(totals_.acked),
        static_cast<unsigned long long>(totals_.empty_drains),
        static_cast<unsigned long long>(totals_.safety_net_finds));
    std::printf(
        "server: cpu: user %.3f s, system %.3f s; context switches: %ld voluntary, %ld "
        "involuntary\n",
        cpu.user_s, cpu.system_s, cpu.voluntary, cpu.involuntary);
    assert(totals_.events == totals_.acked);
}

}  // namespace tutorial
