// Step 08: rdma_cm: connect the way real applications do, on step06's epoll loop.
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <string>
#include <system_error>

#include "cm_server.hpp"
#include "options.hpp"

namespace tutorial {

/// cm_client.cpp: one client against the server on o.host; returns the exit code.
int run_client(const Options& o);

/// The outline. Without a HOST, a server: one thread and one epoll set watch a signalfd, the
/// CM event channel and every client's completion channel (Server::run, below). With a HOST, a
/// client that waits for each CM event on its own channel: connect, one ping-pong, disconnect
/// (cm_client.cpp).
int run(const Options& options) {
    if (options.help) {
        std::fputs(usage_text().c_str(), stdout);
        return kExitOk;
    }
    if (options.trace) enable_trace();  // --trace
    if (options.host.empty()) {
        Server server(options);
        return server.run();
    }
    return run_client(options);
}

int Server::run() {
    open_event_sources();
    std::array<epoll_event, 64> ready{};
    auto next_sweep = Clock::now() + std::chrono::milliseconds(o_.safety_ms);
    while (!stopping_ && (o_.exit_after == 0 || ended_ < o_.exit_after)) {
        // Always a timeout: a lost completion event must not hang the server. --busy-poll: none.
        const int n = ::epoll_wait(epoll_.get(), ready.data(), static_cast<int>(ready.size()),
                                   o_.busy_poll ? 0 : o_.safety_ms);
        if (n < 0) {
            if (errno == EINTR) { continue; }
            throw std::system_error(errno, std::generic_category(), "epoll_wait");
        }
        for (int i = 0; i < n; ++i) { dispatch(ready[static_cast<std::size_t>(i)].data.u64); }
        const auto now = Clock::now();
        if (o_.busy_poll) sweep(Poll::busy);
        if (now >= next_sweep || (n == 0 && !o_.busy_poll)) {  // once per safety period
            if (!o_.busy_poll) sweep(Poll::safety_net);
            end_silent_connections();
            next_sweep = now + std::chrono::milliseconds(o_.safety_ms);
        }
    }
    shut_down();
    return kExitOk;  // a server stopped by SIGINT/SIGTERM has done its job
}

/// One epoll set for everything: the signalfd and the CM event channel now; each client's
/// completion channel once its connect request has made its QP.
void Server::open_event_sources() {
    epoll_ = Socket(::epoll_create1(EPOLL_CLOEXEC));
    if (epoll_.get() < 0) {
        throw std::system_error(errno, std::generic_category(), "epoll_create1");
    }
    // One that a parent ignores stays out of the signalfd's mask (stop_signals.hpp's
    // ignored_by_parent): blocked, it would be queued and read all the same.
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
    //! [cm_fd]
    listen();  // rdma_create_event_channel, rdma_create_id, rdma_bind_addr, rdma_listen
    // The CM event channel's fd is O_NONBLOCK (listen()): rdma_get_cm_event returns EAGAIN
    // when no event is left, so one readable fd is drained in one go.
    watch(channel_->fd, tag(0, kCm));  // the rdma_event_channel's fd, beside the CQs' channels
    //! [cm_fd]
    std::printf("server: listening on rdma_cm port %u; one thread, level-triggered epoll\n",
                static_cast<unsigned>(o_.tcp_port));
    std::fflush(stdout);
}

/// What one ready descriptor means, from its tag: the kind in the low 2 bits, the client above.
void Server::dispatch(std::uint64_t data) {
    const auto kind = static_cast<Kind>(data & 3);
    if (kind == kSignal) {
        signalfd_siginfo info{};
        while (::read(signal_fd_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
            std::printf("server: %s received: disconnect %zu client(s)\n",
                        info.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM", connections_.size());
            stopping_ = true;
        }
        return;
    }
    if (kind == kCm) {
        on_cm_events();
        return;
    }
    auto it = connections_.find(data >> 2);
    if (it != connections_.end())
        progress(it->second, Poll::event);  // else ended earlier in the batch
}

}  // namespace tutorial

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
