// Step 06: epoll-driven completions, done right: one thread serves many ping-pong clients.
#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "cq_events.hpp"
#include "options.hpp"
#include "rdma_endpoint.hpp"
#include "server.hpp"

namespace tutorial {

/// client.cpp: one client against the server on o.host; returns the exit code.
int run_client(const Options& o);

//! [run]
/// The outline. Without a HOST, a server: one thread and one epoll set watch the listening
/// socket, a signalfd, every client's handshake socket and every client's completion channel
/// (Server::run, below). With a HOST, a client: one ping-pong, whose completions it waits for in
/// one of three ways (client.cpp).
int run(const Options& options) {
    if (options.help) {
        std::fputs(usage_text().c_str(), stdout);
        return kExitOk;
    }
    if (options.host.empty()) {
        Server server(options);
        return server.run();
    }
    return run_client(options);
}
//! [run]

// ================================================================== the server's event loop

//! [server_loop]
int Server::run() {
    open_event_sources();
    std::array<epoll_event, 64> ready{};
    auto next_sweep = Clock::now() + std::chrono::milliseconds(o_.safety_ms);
    while (!stopping_ && (o_.exit_after == 0 || ended_ < o_.exit_after)) {
        // Always a timeout: a lost completion event must not hang the server.
        const int n =
            ::epoll_wait(epoll_.get(), ready.data(), static_cast<int>(ready.size()), o_.safety_ms);
        if (n < 0) {
            if (errno == EINTR) { continue; }
            throw std::system_error(errno, std::generic_category(), "epoll_wait");
        }
        for (int i = 0; i < n; ++i) { dispatch(ready[static_cast<std::size_t>(i)].data.u64); }
        const auto now = Clock::now();
        if (n == 0 || now >= next_sweep) {  // the timeouts, once per safety period
            end_silent_sessions();
            safety_net_sweep(n == 0);
            next_sweep = now + std::chrono::milliseconds(o_.safety_ms);
        }
    }
    shut_down();
    return kExitOk;  // a server stopped by SIGINT/SIGTERM has done its job
}
//! [server_loop]

/// One epoll set for everything: the signalfd and the listening socket now; each client's
/// socket when it connects, and its completion channel once its QP exists.
void Server::open_event_sources() {
    epoll_ = Socket(::epoll_create1(EPOLL_CLOEXEC));
    if (epoll_.get() < 0) {
        throw std::system_error(errno, std::generic_category(), "epoll_create1");
    }
    // SIGINT and SIGTERM arrive as readable data on a signalfd, in the same epoll set. One that
    // a parent ignores stays out of the mask (tcp.hpp's ignored_by_parent): blocked, it would be
    // queued and read all the same.
    sigset_t mask;
    sigemptyset(&mask);
    for (const int signal_number : {SIGINT, SIGTERM}) {
        if (!ignored_by_parent(signal_number)) sigaddset(&mask, signal_number);
    }
    if (::sigprocmask(SIG_BLOCK, &mask, nullptr) != 0) {
        throw std::system_error(errno, std::generic_category(), "sigprocmask");
    }
    signal_fd_ = Socket(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
    if (signal_fd_.get() < 0) {
        throw std::system_error(errno, std::generic_category(), "signalfd");
    }
    watch(signal_fd_.get(), tag(0, kSignal));
    // The device's async events (a port down, a QP or CQ error) come on its context's async_fd;
    // non-blocking, so that ibv_get_async_event() returns when none is left.
    const int async_fd = device_.context()->async_fd;
    if (const int flags = ::fcntl(async_fd, F_GETFL);
        flags < 0 || ::fcntl(async_fd, F_SETFL, flags | O_NONBLOCK) != 0) {
        throw std::system_error(errno, std::generic_category(), "fcntl(async_fd, O_NONBLOCK)");
    }
    watch(async_fd, tag(0, kAsync));
    listen_ = listen_for_clients(o_);
    watch(listen_.get(), tag(0, kListen));
    std::printf("server: listening on TCP port %u; one thread, level-triggered epoll\n",
                static_cast<unsigned>(o_.tcp_port));
    std::fflush(stdout);
}

//! [dispatch]
/// What one ready descriptor means, from its tag: the kind in the low 3 bits, the client above.
void Server::dispatch(std::uint64_t data) {
    const auto kind = static_cast<Kind>(data & 7);
    const std::uint64_t id = data >> 3;
    if (kind == kListen) {
        accept_clients();
        return;
    }
    if (kind == kSignal) {
        on_signal();
        return;
    }
    if (kind == kAsync) {
        on_async_event();
        return;
    }
    auto it = sessions_.find(id);
    if (it == sessions_.end()) {
        return;  // ended earlier in this batch
    }
    if (kind == kSocket) {
        on_socket(it->second);
    } else {
        on_channel(it->second);
    }
}
//! [dispatch]

//! [on_channel]
void Server::on_channel(ClientSession& s) {
    std::array<ibv_wc, 16> batch{};
    std::vector<ibv_wc>& completions = completions_;  // kept, with its capacity
    completions.clear();
    try {
        tutorial::service_channel(*s.endpoint, s.endpoint->events(), std::span<ibv_wc>(batch),
                                  [&](const ibv_wc& wc) { completions.push_back(wc); });
    } catch (const std::exception& e) {  // a verb failed: ibv_get_cq_event, ibv_poll_cq, ...
        const std::uint64_t id = s.id;   // progress() may end the session, and free s with it
        progress(s, completions);
        if (sessions_.count(id) != 0) {
            finish(id, std::string("failed: ") + e.what(), &ServerTotals::failed);
        }
        return;
    }
    progress(s, completions);
}
//! [on_channel]

//! [safety_net]
/// The safety net: when epoll_wait timed out, or a client made no progress for
/// --safety-ms, poll its CQ anyway. Events should have woken us; a completion
/// found here is counted as a safety-net find.
void Server::safety_net_sweep(bool timed_out) {
    const auto now = Clock::now();
    const auto idle = std::chrono::milliseconds(o_.safety_ms);
    std::vector<std::uint64_t> ids;
    for (auto& [id, s] : sessions_) {
        if (s.endpoint && (timed_out || now - s.last_progress >= idle)) { ids.push_back(id); }
    }
    for (const std::uint64_t id : ids) {
        auto it = sessions_.find(id);
        if (it == sessions_.end()) { continue; }
        ClientSession& s = it->second;
        on_channel(s);  // first, any event that is queued but not yet seen
        if (sessions_.count(id) == 0) { continue; }
        std::array<ibv_wc, 16> batch{};
        std::vector<ibv_wc> found;
        try {
            tutorial::safety_net_poll(*s.endpoint, s.endpoint->events(), std::span<ibv_wc>(batch),
                                      [&](const ibv_wc& wc) { found.push_back(wc); });
        } catch (const std::exception& e) {
            finish(id, std::string("failed: ") + e.what(), &ServerTotals::failed);
            continue;
        }
        if (!found.empty() && o_.verbose) {
            std::printf(
                "server: client %llu (%s): safety net found %zu completion(s) without an event\n",
                static_cast<unsigned long long>(id), s.peer.c_str(), found.size());
        }
        if (!found.empty()) { progress(s, found); }
    }
}
//! [safety_net]

}  // namespace tutorial

//! [main]
int main(int argc, char** argv) {
    using namespace tutorial;
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    try {
        return run(parse_options(argc, argv));
    } catch (const UsageError& e) {
        std::fprintf(stderr, "%s: %s\n%s", kProgram, e.what(), usage_text().c_str());
        return kExitUsage;
    } catch (const TutorialError& e) {
        std::fprintf(stderr, "%s: %s\n", kProgram, e.what());
        if (!e.hint().empty()) { std::fprintf(stderr, "hint: %s\n", e.hint().c_str()); }
        return e.exit_code();
    } catch (const std::exception& e) {  // a programming error, e.g. a range check in the class
        std::fprintf(stderr, "%s: %s\n", kProgram, e.what());
        return kExitRdma;
    }
}
//! [main]
