// Step 09: the server around its coroutines: handshake steps, checks, watchdog rules, end lines.
#include "server.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "async_events.hpp"
#include "cpu_usage.hpp"
#include "cq_events.hpp"

namespace tutorial {

namespace {

[[noreturn]] void reject(const std::string& why) {
    throw SessionEnd({"rejected: " + why, &ServerTotals::rejected});
}

[[nodiscard]] std::size_t handshake_size(std::optional<HandshakeFormat> format) {
    return format == HandshakeFormat::v3 ? kHandshakeV3Size : kWireMessageSize;
}

}  // namespace

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

std::optional<TcpPeer> accept_now(const Socket& listener) {
    sockaddr_storage address{};
    socklen_t length = sizeof address;
    TcpPeer client{Socket(::accept4(listener.get(), reinterpret_cast<sockaddr*>(&address), &length,
                                    SOCK_NONBLOCK | SOCK_CLOEXEC)),
                   {}};
    if (client.socket.get() < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED || errno == EINTR ||
            errno == EMFILE || errno == ENFILE) {  // the last two: see refuse_at_fd_limit()
            return std::nullopt;
        }
        throw std::system_error(errno, std::generic_category(), "accept4");
    }
    const int one = 1;
    ::setsockopt(client.socket.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    client.name = endpoint_text(reinterpret_cast<const sockaddr*>(&address), length);
    return client;
}

Server::Server(const Options& options)
    : o_(options),
      reactor_(std::chrono::milliseconds(options.safety_ms)),
      device_(device_config(options)) {}

/// The reactor has its epoll set; the server adds the listener.
void Server::open_event_sources() {
    listen_ = listen_for_clients(o_);
    listen_watch_.emplace(reactor_, listen_.get());
    // The device's async events (a port down, a QP or CQ error) come on its context's async_fd;
    // non-blocking, so that ibv_get_async_event() returns when none is left.
    const int async_fd = device_.context()->async_fd;
    if (const int flags = ::fcntl(async_fd, F_GETFL);
        flags < 0 || ::fcntl(async_fd, F_SETFL, flags | O_NONBLOCK) != 0) {
        throw std::system_error(errno, std::generic_category(), "fcntl(async_fd, O_NONBLOCK)");
    }
    async_watch_.emplace(reactor_, async_fd);
    std::printf("server: listening on TCP port %u; one thread, level-triggered epoll\n",
                static_cast<unsigned>(o_.tcp_port));
    std::fflush(stdout);
}

ClientSession& Server::add_session(TcpPeer peer) {
    const std::uint64_t id = next_id_++;
    auto& s = *(sessions_[id] = std::make_unique<ClientSession>());
    s.id = id;
    s.peer = std::move(peer.name);
    s.socket = std::move(peer.socket);
    s.socket_watch.emplace(reactor_, s.socket.get());
    s.handshake_deadline = Clock::now() + std::chrono::seconds(o_.timeout_seconds);
    if (o_.verbose) {
        std::printf("server: client %llu (%s): connected\n", static_cast<unsigned long long>(id),
                    s.peer.c_str());
    }
    return s;
}

/// After every resume phase: reap the clients whose coroutine ended (frame, then endpoint), note
/// a signal, and say whether the server is done (SIGINT/SIGTERM, or --exit-after reached).
bool Server::housekeeping() {
    if (reaped_ != ended_) {  // finish() ran since the last look: the frame is done now
        for (auto it = sessions_.begin(); it != sessions_.end();) {
            it = it->second->coroutine.done() ? sessions_.erase(it) : std::next(it);
        }
        reaped_ = ended_;
    }
    if (accepting_.done()) {
        accepting_.result();  // accept4 failed: rethrown to main(), as step06's loop did
    }
    if (watching_.done()) { watching_.result(); }
    if (async_watching_.done()) { async_watching_.result(); }
    if (const int signal = g_stop_signal; signal != 0 && !stopping_) {
        std::printf("server: %s received: stop accepting, abort %zu in-flight client(s)\n",
                    signal == SIGINT ? "SIGINT" : "SIGTERM", sessions_.size());
        stopping_ = true;
    }
    return stopping_ || (o_.exit_after != 0 && ended_ >= o_.exit_after);
}

/// After readable(): what the socket holds, appended to the inbox. Returns the bytes read; 0 at
/// the end of the stream (or a reset); -1 when there was nothing after all.
std::ptrdiff_t Server::read_into_inbox(ClientSession& s) {
    char chunk[256];
    const ssize_t n = ::read(s.socket.get(), chunk, sizeof chunk);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) { return -1; }
        if (errno != ECONNRESET) {
            throw std::system_error(errno, std::generic_category(), "read");
        }
        return 0;
    }
    s.inbox.insert(s.inbox.end(), chunk, chunk + n);
    return n;
}

/// Gathers the client's handshake message without blocking anyone: its format from the first 4
/// bytes, then the whole message, within --timeout of the accept.
Task<PeerInfo> Server::take_handshake(ClientSession& s) {
    for (;;) {
        if (!s.format && s.inbox.size() >= 4) {
            s.format = detect_handshake(std::span<const char, 4>(s.inbox.data(), 4));
        }
        if (s.format && s.inbox.size() >= handshake_size(s.format)) { break; }
        const bool ready = co_await reactor_.readable(*s.socket_watch, s.handshake_deadline);
        if (!ready) {
            reject("no handshake within " + std::to_string(o_.timeout_seconds) + " s (" +
                   std::to_string(s.inbox.size()) + " bytes received)");
        }
        if (read_into_inbox(s) == 0) {
            reject("peer closed after " + std::to_string(s.inbox.size()) + " of " +
                   std::to_string(handshake_size(s.format)) + " handshake bytes (" +
                   printable_bytes(s.inbox) + ")");
        }
    }
    co_return parse_handshake(s);
}

PeerInfo Server::parse_handshake(ClientSession& s) {
    const auto end = s.inbox.begin() + static_cast<std::ptrdiff_t>(handshake_size(s.format));
    const std::vector<char> message(s.inbox.begin(), end);
    s.inbox.erase(s.inbox.begin(), end);
    PeerInfo remote;
    if (s.format == HandshakeFormat::v3) {
        try {
            remote = decode_handshake_v3(std::as_bytes(std::span(message)));
        } catch (const TutorialError& e) { reject(e.what()); }
        return remote;
    }
    std::string error;
    const std::optional<QpEndpointInfo> info = parse_wire_message(message, error);
    if (!info) {
        reject("bad handshake: " + error + "; received " + std::to_string(message.size()) +
               " bytes: " + printable_bytes(message));
    }
    static_cast<QpEndpointInfo&>(remote) = *info;
    return remote;
}

//! [start_rdma]
/// The client's endpoint, RTR and RTS, and the answer. A v3 client with another -s or -n is
/// answered first (so that it says so too), then rejected.
void Server::start_rdma(ClientSession& s, PeerInfo remote) {
    RDMAEndpoint rdma(device_, async_endpoint_config(o_));
    rdma.use_local_address(local_address_bytes(s.socket));  // step03's rule: this client's GID
    const std::string mismatch =
        s.format == HandshakeFormat::v3
            ? describe_run_mismatch(with_run(rdma.local_info(), handshake_settings(o_)), remote,
                                    true)
            : std::string();
    if (!mismatch.empty()) {
        try {
            answer(s, rdma.local_info());
        } catch (const std::exception&) {  // the mismatch is the news, not a closed socket
        }
        reject(mismatch);
    }
    s.endpoint = std::make_unique<AsyncEndpoint>(reactor_, std::move(rdma), async_config(o_));
    AsyncEndpoint& ep = *s.endpoint;
    // Arms the CQ BEFORE the first post: a completion that lands before the first
    // ibv_req_notify_cq() raises no event at all.
    ep.post_initial_receives();
    if (s.format != HandshakeFormat::v3) {
        remote.mtu = ep.endpoint().path_mtu();  // not on rc_pingpong's wire: both sides get -m
    }
    ep.endpoint().connect(remote);
    answer(s, ep.endpoint().local_info());
    if (o_.verbose) {
        std::printf("%s\n", gid_choice_line(ep.endpoint().local_port()).c_str());
        print_address("local", ep.endpoint().local_info());
        print_address("remote", remote);
    }
    ++totals_.connected;
    s.state = ClientSession::State::await_done;
}
//! [start_rdma]

/// The server's half of the handshake, in the client's format: tcp.hpp's send_all, as step06.
/// A few dozen bytes into the empty buffer of a new socket: it does not wait.
void Server::answer(ClientSession& s, PeerInfo local) {
    const std::chrono::seconds timeout(o_.timeout_seconds);
    if (s.format == HandshakeFormat::v3) {
        const HandshakeV3Message reply =
            encode_handshake_v3(with_run(local, handshake_settings(o_)));
        send_all(s.socket, {reinterpret_cast<const char*>(reply.data()), reply.size()}, timeout,
                 "the handshake reply");
    } else {
        send_all(s.socket, format_wire_message(local), timeout, "the handshake reply");
    }
}

/// After the handshake, the client sends "done" (and a NUL): ibv_rc_pingpong's last word. A
/// client that sends nothing for --timeout is silent, as in the ping-pong.
Task<void> Server::take_done(ClientSession& s) {
    const std::string_view done(kDoneMessage, sizeof kDoneMessage);  // with its NUL
    const auto deadline = Clock::now() + std::chrono::seconds(o_.timeout_seconds);
    while (s.inbox.size() < done.size()) {
        const bool ready = co_await reactor_.readable(*s.socket_watch, deadline);
        if (!ready) { throw SessionEnd(silent_outcome(s)); }
        if (read_into_inbox(s) == 0) { reject("peer closed before sending \"done\""); }
    }
    if (!std::equal(done.begin(), done.end(), s.inbox.begin())) {
        reject("expected \"done\" after the handshake, got " +
               printable_bytes(std::span<const char>(s.inbox).first(done.size())));
    }
    s.inbox.erase(s.inbox.begin(), s.inbox.begin() + static_cast<std::ptrdiff_t>(done.size()));
    if (!s.inbox.empty()) {
        throw SessionEnd(
            {"failed: unexpected bytes after the handshake (" + printable_bytes(s.inbox) + ")",
             &ServerTotals::failed});
    }
    s.state = ClientSession::State::running;
    s.quiet_since = Clock::now();
}

/// step06's PingPong::on_completion for a receive: the size, then --check's pattern. Builds a
/// string only to throw.
void Server::check_message(ClientSession& s, const Received& message) {
    if (message.bytes.size() != o_.size) {
        throw TutorialError(kExitPeer, "message " + std::to_string(s.received) + " has " +
                                           std::to_string(message.bytes.size()) +
                                           " bytes, expected " + std::to_string(o_.size) +
                                           " (same -s on both sides?)");
    }
    if (o_.check) {
        if (!payload_ok(message.bytes, s.received, kClientSide)) {
            throw TutorialError(
                kExitPeer, "message " + std::to_string(s.received) + " failed the --check pattern");
        }
        ++s.verified;
    }
    ++s.received;
}

/// step06's timeouts for a running client, checked once per --safety-ms: bytes (or the end)
/// on its TCP socket, and no message for --timeout.
void Server::end_silent_sessions() {
    const auto now = Clock::now();
    for (auto& [id, session] : sessions_) {
        ClientSession& s = *session;
        if (s.state != ClientSession::State::running || s.stop) { continue; }
        // ibv_rc_pingpong (and step05's class) close the TCP connection after the handshake:
        // from here on only the QP tells whether the client is alive. Bytes are an error.
        if (s.socket.get() >= 0) {
            char chunk[256];
            const ssize_t n = ::recv(s.socket.get(), chunk, sizeof chunk, MSG_DONTWAIT);
            if (n > 0) {
                const std::span<const char> bytes(chunk, static_cast<std::size_t>(n));
                stop(s, {"failed: unexpected bytes after the handshake (" + printable_bytes(bytes) +
                             ")",
                         &ServerTotals::failed});
                continue;
            }
            if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                s.socket_watch.reset();  // out of epoll first, while the fd is open
                s.socket.reset();        // the end of the stream (or a reset)
            }
        }
        if (s.received != s.watched_received) {
            s.watched_received = s.received;
            s.quiet_since = now;
        } else if (now - s.quiet_since > std::chrono::seconds(o_.timeout_seconds)) {
            stop(s, silent_outcome(s));
        }
    }
}

/// A silent client's line. ibv_rc_pingpong's handshake cannot carry -n: a client started with a
/// smaller -n took its last answer and ended, as if killed. Name the likelier cause.
Outcome Server::silent_outcome(const ClientSession& s) const {
    if (s.format == HandshakeFormat::rc_pingpong && s.received > 0 && s.received == s.sent) {
        return {"failed: the client ended the session after " + std::to_string(s.received) +
                    " messages; both sides must use the same -n (this server uses -n " +
                    std::to_string(o_.iters) +
                    "; ibv_rc_pingpong's handshake cannot carry -n to compare it)",
                &ServerTotals::failed};
    }
    // A client killed while we wait for its next message leaves no trace but silence (with a
    // reply in flight, IBV_WC_RETRY_EXC_ERR comes first).
    return {"failed: no message for " + std::to_string(o_.timeout_seconds) + " s after " +
                std::to_string(s.received) + " of " + std::to_string(o_.iters) +
                " (client killed or stalled); its resources are freed",
            &ServerTotals::failed};
}

/// Ends a running client from outside its coroutine: its QP to the error state, and the
/// coroutine resumes (next resume phase) with the flush error, which its catch turns into `why`.
void Server::stop(ClientSession& s, Outcome why) {
    s.stop = std::move(why);
    s.endpoint->cancel(kFlushTimeout);
}

Task<void> Server::watch_async_events() {
    for (;;) {
        co_await reactor_.readable(*async_watch_);
        on_async_event();
    }
}

//! [on_async_event]
/// Each async event is printed and acked. A fatal one ends the client whose QP or CQ it names:
/// after the ack, since ibv_destroy_qp() and ibv_destroy_cq() wait for their events' acks.
void Server::on_async_event() {
    ibv_async_event event{};
    while (ibv_get_async_event(device_.context(), &event) == 0) {
        ClientSession* ended = nullptr;
        for (const auto& [id, s] : sessions_) {
            const RDMAEndpoint* ep = s->endpoint ? &s->endpoint->endpoint() : nullptr;
            if (ep != nullptr && fatal_for_qp(event.event_type) &&
                (event.event_type == IBV_EVENT_CQ_ERR ? event.element.cq == ep->cq()
                                                      : event.element.qp == ep->qp())) {
                ended = s.get();
            }
        }
        const std::string text = async_event_text(event);
        std::printf("server: async event: %s\n", text.c_str());
        ibv_ack_async_event(&event);
        if (ended != nullptr) {
            stop(*ended, {"failed: async event: " + text, &ServerTotals::failed});
        }
    }
}
//! [on_async_event]

/// The line of a coroutine that ended by an exception: the shutdown's, the watchdog's, or
/// "failed: what()".
Outcome Server::ended_by(const ClientSession& s, const std::exception& e) const {
    if (s.aborted) {
        return {s.endpoint ? "aborted by shutdown after " + std::to_string(s.received) + " of " +
                                 std::to_string(o_.iters) + " messages"
                           : std::string("aborted by shutdown during the handshake"),
                &ServerTotals::aborted};
    }
    if (s.stop) { return *s.stop; }
    if (const auto* error = dynamic_cast<const std::system_error*>(&e);
        error != nullptr && (error->code().value() == EMFILE || error->code().value() == ENFILE)) {
        return {"rejected: " + fd_limit_text(sessions_.size() - 1) + " (" + e.what() + ")",
                &ServerTotals::rejected};  // e.g. the endpoint's completion channel
    }
    return {std::string("failed: ") + e.what(), &ServerTotals::failed};
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

//! [finish]
/// A client's last act, from its own coroutine: leave the epoll set, ack every event (the
/// endpoint's close()), then print its line and add it to the totals. The frame and the endpoint
/// go in the next housekeeping().
void Server::finish(ClientSession& s, const Outcome& outcome) {
    std::string line =
        "server: client " + std::to_string(s.id) + " (" + s.peer + "): " + outcome.text;
    if (s.endpoint) {
        s.endpoint->close();
        const CqEventTracker& ev = s.endpoint->endpoint().events();
        line += "; " + std::to_string(s.received) + " received, " + std::to_string(s.sent) +
                " sent, " + std::to_string(s.verified) + " verified; " + event_counts(ev);
        totals_.events += ev.received();
        totals_.acked += ev.acked();
        totals_.empty_drains += ev.empty_drains();
        totals_.safety_net_finds += ev.safety_net_finds();
        totals_.messages += s.received;
    }
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    totals_.*outcome.counter += 1;
    ++ended_;
    s.state = ClientSession::State::ended;
}
//! [finish]

void Server::print_totals() const {
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
