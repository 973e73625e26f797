// The server's bookkeeping around the event loop: accepting clients, the non-blocking handshake,
// admission to the shared CQ and SRQ, the async events, the timeouts, and each session's end.
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

std::uint32_t shared_cq_entries(const Options& o, const Device& device) {
    // -t sends per client at most (PingPong::ready_to_send), plus the drain marker of its end.
    const std::uint64_t entries =
        static_cast<std::uint64_t>(o.rx_depth) +
        std::uint64_t{o.max_clients} * (static_cast<std::uint64_t>(o.tx_depth) + 1);
    const auto max_cqe = static_cast<std::uint64_t>(device.attr().max_cqe);
    if (entries > max_cqe) {
        throw TutorialError(kExitUsage,
                            "the shared CQ needs " + std::to_string(o.rx_depth) + " + " +
                                std::to_string(o.max_clients) + " x (" +
                                std::to_string(o.tx_depth) + " + 1) = " + std::to_string(entries) +
                                " entries, over " + device.name() +
                                "'s limit max_cqe = " + std::to_string(max_cqe) +
                                ": lower --max-clients, -t or --srq-depth",
                            "ibv_devinfo -v shows the device's limits");
    }
    return static_cast<std::uint32_t>(entries);
}

std::size_t Server::connections() const {
    std::size_t n = 0;
    for (const auto& [id, s] : sessions_) { n += s.connection ? 1 : 0; }
    return n;
}

/// Why one more client would not fit the shared CQ or SRQ (closing QPs still count), or empty.
std::string Server::admission_refusal() const {
    const std::size_t next = connections() + 1;
    if (next > o_.max_clients) {
        return "the shared CQ is sized for --max-clients " + std::to_string(o_.max_clients) + " (" +
               std::to_string(o_.rx_depth) + " receives + " + std::to_string(o_.max_clients) +
               " x (" + std::to_string(o_.tx_depth) + " + 1) sends): connection " +
               std::to_string(next) + " could overrun it";
    }
    // Each client has one message in flight towards the server at a time.
    if (next > static_cast<std::size_t>(o_.rx_depth)) {
        return "connection " + std::to_string(next) + " could have " + std::to_string(next) +
               " messages in flight, more than the " + std::to_string(o_.rx_depth) +
               " receives of --srq-depth: raise --srq-depth";
    }
    return {};
}

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
/// Each async event is acked right after it is read: ibv_destroy_qp(), _srq() and _cq() wait
/// for the acks of the events that were read. The SRQ's limit refills it; an error of the shared
/// CQ or SRQ ends every connection; a QP's event is its connection's.
void Server::on_async_event() {
    ibv_async_event event{};
    while (ibv_get_async_event(device_.context(), &event) == 0) {
        const ibv_event_type type = event.event_type;
        const std::string text = async_event_text(event);
        // A QP's event is read before that QP is destroyed: its number finds its session.
        const bool last_wqe = type == IBV_EVENT_QP_LAST_WQE_REACHED;
        ConnectionTable::Entry owner;
        if (fatal_for_qp(type) || last_wqe) { owner = table_.find(event.element.qp->qp_num); }
        ibv_ack_async_event(&event);
        if (type == IBV_EVENT_SRQ_LIMIT_REACHED) {
            ++totals_.limit_events;
            refill();                      // first post every free slot,
            srq_.arm_limit(o_.srq_limit);  // then re-arm: the event was one-shot
            continue;
        }
        if (!last_wqe || o_.verbose) { std::printf("server: async event: %s\n", text.c_str()); }
        const bool live = owner.found == ConnectionTable::Found::live;
        if (fatal_for_server(type)) {
            std::printf("server: every connection is lost: ending %zu connection(s)\n",
                        connections());
            exit_code_ = kExitRdma;
            stopping_ = true;
        } else if (live && last_wqe) {  // Soft-RoCE on 6.12 may raise it more than once
            ++sessions_.at(owner.connection).last_wqe_events;
        } else if (live) {
            fail(owner.connection, "async event: " + text);
        }
    }
}
//! [on_async_event]

//! [start_rdma]
/// Returns why the client is refused (no room on the shared CQ or SRQ; a -s/-n mismatch with a
/// v3 client, answered first so that the client says it too), or empty once it is answered.
std::string Server::start_rdma(ClientSession& s, PeerInfo remote) {
    if (std::string refusal = admission_refusal(); !refusal.empty()) { return refusal; }
    s.connection =
        std::make_unique<Connection>(device_, cq_, srq_, static_cast<std::uint32_t>(o_.tx_depth),
                                     o_.size, *mtu_from_bytes(o_.mtu));
    Connection& c = *s.connection;
    c.use_local_address(local_address_bytes(s.socket));  // step03's rule: this client's GID
    if (s.format == HandshakeFormat::v3) {
        if (std::string mismatch = describe_run_mismatch(
                with_run(c.local_info(), handshake_settings(o_)), remote, true);
            !mismatch.empty()) {
            try {
                answer(s);
            } catch (const std::exception&) {  // the mismatch is the news, not a closed socket
            }
            s.connection.reset();  // never connected: nothing of it can be in the shared CQ
            return mismatch;
        }
    }
    s.pingpong = std::make_unique<PingPong>(c, o_, kServerSide);
    if (s.format != HandshakeFormat::v3) {
        remote.mtu = c.path_mtu();  // not on rc_pingpong's wire: both sides are given -m
    }
    c.connect(remote);
    (void)table_.add(c.qp_num(), s.id);  // from now on its completions find this session
    answer(s);
    if (o_.verbose) {
        std::printf("%s\n", gid_choice_line(c.local_port()).c_str());
        print_address("local", c.local_info());
        print_address("remote", remote);
    }
    return {};
}
//! [start_rdma]

void Server::answer(ClientSession& s) {
    const PeerInfo local = with_run(s.connection->local_info(), handshake_settings(o_));
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
        // A v3 client keeps its TCP connection for the run: its end before the last message
        // means the client is gone. Its QP then ends at once, not at --timeout.
        if (s.format == HandshakeFormat::v3 && s.pingpong && s.pingpong->received() < o_.iters) {
            fail(s.id, "the client closed its TCP connection after " +
                           std::to_string(s.pingpong->received()) + " of " +
                           std::to_string(o_.iters) + " messages (killed?)");
            return;
        }
        // ibv_rc_pingpong closes the TCP connection after the handshake: from here on only the
        // QP tells whether the client is alive.
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

void Server::reject(std::uint64_t id, const std::string& why) {
    finish(id, "rejected: " + why, &ServerTotals::rejected);
}

void Server::fail(std::uint64_t id, const std::string& why) {
    finish(id, "failed: " + why, &ServerTotals::failed);
}

//! [finish]
/// A session's end: its line now, and its socket closed, so that the client knows. Its QP, if
/// it has one, goes to ERR and stays until advance_closing() destroys it.
void Server::finish(std::uint64_t id, const std::string& outcome,
                    std::uint32_t ServerTotals::*counter) {
    auto it = sessions_.find(id);
    if (it == sessions_.end() || it->second.state == ClientSession::State::closing) { return; }
    ClientSession& s = it->second;
    std::string line = "server: client " + std::to_string(id) + " (" + s.peer + "): " + outcome;
    if (s.pingpong) {
        line += "; " + std::to_string(s.pingpong->received()) + " received, " +
                std::to_string(s.pingpong->sent()) + " sent, " +
                std::to_string(s.pingpong->verified()) + " verified";
        totals_.messages += s.pingpong->received();
    }
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    totals_.*counter += 1;
    if (s.socket.get() >= 0) {
        ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, s.socket.get(), nullptr);
        s.socket.reset();
    }
    if (!s.connection || !s.pingpong) {  // no QP in the table: nothing on the shared CQ
        ++ended_;
        sessions_.erase(it);
        return;
    }
    s.state = ClientSession::State::closing;
    s.close_deadline = Clock::now() + std::chrono::milliseconds(std::max(200, 2 * o_.safety_ms));
    try {
        s.connection->move_to_error();  // its sends flush; its receives stay on the SRQ
        // A send that completed unsignaled leaves no completion, flushed or not: a signaled
        // marker, posted in ERR, flushes after every send before it. Its completion is the drain.
        s.connection->post_send(kDrainMarkerWrId, 0, true);
        s.marker_posted = true;
    } catch (const std::exception& e) {
        std::printf("server: client %llu: %s\n", static_cast<unsigned long long>(id), e.what());
    }
}

/// A closing QP is destroyed once the SRQ is done with it (the last-WQE event, or the deadline)
/// and its sends are accounted for; or at twice the deadline, whatever is left.
void Server::advance_closing() {
    const auto bound = std::chrono::milliseconds(std::max(200, 2 * o_.safety_ms));
    const auto ready = [&](const ClientSession& s) {
        if (s.state != ClientSession::State::closing) { return false; }
        const auto now = Clock::now();
        const bool waited = s.last_wqe_events > 0 || now >= s.close_deadline;
        // With the marker posted, its completion is the proof; else the sends' own.
        const bool drained = s.marker_posted ? s.drained : !s.pingpong->sends_outstanding();
        return (waited && drained) || now >= s.close_deadline + bound;
    };
    if (std::none_of(sessions_.begin(), sessions_.end(),
                     [&](const auto& entry) { return ready(entry.second); })) {
        return;
    }
    // Poll the CQ empty first, as the kernel's own SRQ drain does after the last-WQE event: a
    // receive that completed on the QP gives its slot back now. libmlx5 removes a destroyed QP's
    // completions from the CQ, and their receives never complete.
    std::array<ibv_wc, 16> batch{};
    auto handle = [&](const ibv_wc& wc) { on_completion(wc); };
    tutorial::drain(cq_, std::span<ibv_wc>(batch), handle);
    refill_after_pass();
    for (auto it = sessions_.begin(); it != sessions_.end();) {
        ClientSession& s = (it++)->second;
        if (ready(s)) { destroy_connection(s); }
    }
}

void Server::destroy_connection(ClientSession& s) {
    const std::uint32_t qp_num = s.connection->qp_num();
    std::printf(
        "server: client %llu: QP 0x%06x destroyed: %s; %u flushed send(s)%s\n",
        static_cast<unsigned long long>(s.id), qp_num,
        s.last_wqe_events > 0
            ? ("last WQE reached (" + std::to_string(s.last_wqe_events) + " event(s))").c_str()
            : "no last-WQE event before the deadline",
        s.flushed_sends, s.drained ? ", drained" : ", not drained");
    std::fflush(stdout);
    (s.last_wqe_events > 0 ? totals_.last_wqe_ends : totals_.deadline_ends) += 1;
    table_.retire(qp_num);  // a completion still in the CQ for it is now stale, not another's
    ++ended_;
    sessions_.erase(s.id);  // PingPong, then the connection: QP, send slot
}
//! [finish]

/// The timeouts, checked once per safety period: a client that went silent, and a handshake that
/// never came.
void Server::end_silent_sessions() {
    const auto now = Clock::now();
    for (auto it = sessions_.begin(); it != sessions_.end();) {
        const auto id = (it++)->first;
        ClientSession& s = sessions_.at(id);
        if (s.state == ClientSession::State::closing) { continue; }
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

/// Shutdown: no more accepts, then every client is ended and its QP destroyed; the totals.
void Server::shut_down() {
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listen_.get(), nullptr);
    listen_.reset();
    for (auto it = sessions_.begin(); it != sessions_.end();) {
        auto& [id, s] = *(it++);
        finish(id,
               s.pingpong ? "aborted by shutdown after " + std::to_string(s.pingpong->received()) +
                                " of " + std::to_string(o_.iters) + " messages"
                          : std::string("aborted by shutdown during the handshake"),
               &ServerTotals::aborted);
    }
    // The closing QPs: keep serving the shared CQ and the async events until each is destroyed.
    while (!sessions_.empty()) {
        safety_net_sweep(true);
        on_async_event();
        advance_closing();
        if (!sessions_.empty()) { ::usleep(1000); }
    }
    take_queued_events(cq_);
    ack_all_before_destroy(cq_, cq_.events());
    const CqEventTracker& ev = cq_.events();
    const CpuUsage cpu = cpu_usage();
    std::printf("server: clients: %u connected, %u complete, %u failed, %u rejected, %u aborted\n",
                totals_.connected, totals_.complete, totals_.failed, totals_.rejected,
                totals_.aborted);
    std::printf("server: messages received: %llu\n",
                static_cast<unsigned long long>(totals_.messages));
    std::printf(
        "server: CQ events: received %llu, acked %llu, empty drains %llu, safety-net finds "
        "%llu\n",
        static_cast<unsigned long long>(ev.received()), static_cast<unsigned long long>(ev.acked()),
        static_cast<unsigned long long>(ev.empty_drains()),
        static_cast<unsigned long long>(ev.safety_net_finds()));
    std::printf(
        "server: shared resources: 1 CQ of %u entries, 1 SRQ of %u receives in 1 MR of %zu "
        "bytes; %llu refills, %llu limit events, %llu stale completions\n",
        cq_.capacity(), srq_.ring().depth(), std::size_t{srq_.ring().depth()} * o_.size,
        static_cast<unsigned long long>(totals_.refills),
        static_cast<unsigned long long>(totals_.limit_events),
        static_cast<unsigned long long>(totals_.stale_completions));
    std::printf("server: QPs ended: %u after the last-WQE event, %u at the deadline\n",
                totals_.last_wqe_ends, totals_.deadline_ends);
    std::printf(
        "server: cpu: user %.3f s, system %.3f s; context switches: %ld voluntary, %ld "
        "involuntary\n",
        cpu.user_s, cpu.system_s, cpu.voluntary, cpu.involuntary);
}

}  // namespace tutorial
