// Step 11: atomics and memory windows. The server holds one target MR; its clients act on it
// with one-sided verbs, and it lends each client a memory window it can take back.
#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <span>
#include <string>
#include <system_error>

#include "cq_events.hpp"
#include "options.hpp"
#include "server.hpp"

namespace tutorial {

/// client.cpp: one client against the server on o.host; returns the exit code.
int run_client(const Options& o);

//! [run]
/// Without a HOST, a server: one thread and one epoll set watch the listening socket, a
/// signalfd, the device's async events, the one completion channel and every client's socket.
/// With a HOST, a client: --connections QPs act on the server's target with --op (client.cpp).
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

int Server::run() {
    open_event_sources();
    std::array<epoll_event, 64> ready{};
    while (!stopping_ && (o_.exit_after == 0 || ended_ < o_.exit_after)) {
        // Always a timeout: a lost completion event must not hang the server.
        const int n =
            ::epoll_wait(epoll_.get(), ready.data(), static_cast<int>(ready.size()), o_.safety_ms);
        if (n < 0) {
            if (errno == EINTR) { continue; }
            throw std::system_error(errno, std::generic_category(), "epoll_wait");
        }
        for (int i = 0; i < n; ++i) { dispatch(ready[static_cast<std::size_t>(i)].data.u64); }
        if (n == 0) {
            end_silent_sessions();
            safety_net_sweep();
        }
    }
    shut_down();
    return exit_code_;  // kExitOk: a server stopped by SIGINT/SIGTERM has done its job
}

/// One epoll set for everything: the signalfd, the async events, the one completion channel and
/// the listening socket now; each client's socket when it connects.
void Server::open_event_sources() {
    epoll_ = Socket(::epoll_create1(EPOLL_CLOEXEC));
    if (epoll_.get() < 0) {
        throw std::system_error(errno, std::generic_category(), "epoll_create1");
    }
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
    const int async_fd = device_.context()->async_fd;
    if (const int flags = ::fcntl(async_fd, F_GETFL);
        flags < 0 || ::fcntl(async_fd, F_SETFL, flags | O_NONBLOCK) != 0) {
        throw std::system_error(errno, std::generic_category(), "fcntl(async_fd, O_NONBLOCK)");
    }
    watch(async_fd, tag(0, kAsync));
    cq_.request_notify();
    watch(cq_.channel_fd(), tag(0, kChannel));
    listen_ = listen_for_clients(o_);
    watch(listen_.get(), tag(0, kListen));
    std::printf(
        "server: listening on TCP port %u; target of %llu bytes at 0x%llx, rkey 0x%08x "
        "(counter at 0, lock at 8, version at 16, record at 64; a page per client)\n",
        static_cast<unsigned>(o_.tcp_port),
        static_cast<unsigned long long>(target_bytes(o_.max_clients)),
        static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(target_.get())),
        target_mr_->rkey);
    std::fflush(stdout);
}

/// What one ready descriptor means, from its tag: the kind in the low 3 bits, the client above.
void Server::dispatch(std::uint64_t data) {
    const auto kind = static_cast<Kind>(data & 7);
    const std::uint64_t id = data >> 3;
    switch (kind) {
        case kListen: accept_clients(); return;
        case kSignal: on_signal(); return;
        case kAsync: on_async_event(); return;
        case kChannel: on_channel(); return;
        case kSocket: break;
    }
    auto it = sessions_.find(id);
    if (it != sessions_.end() && it->second.socket.get() >= 0) { on_socket(it->second); }
}

/// The one channel is readable: cq_events.hpp's protocol on the shared CQ, then each completion
/// to its session. The server's own work requests are the windows' binds and invalidations.
void Server::on_channel() {
    std::array<ibv_wc, 16> batch{};
    std::vector<ibv_wc> completions;
    tutorial::service_channel(cq_, cq_.events(), std::span<ibv_wc>(batch),
                              [&](const ibv_wc& wc) { completions.push_back(wc); });
    for (const ibv_wc& wc : completions) { on_completion(wc); }
}

/// The safety net: when epoll_wait timed out, poll the shared CQ anyway.
void Server::safety_net_sweep() {
    on_channel();
    std::array<ibv_wc, 16> batch{};
    std::vector<ibv_wc> found;
    tutorial::safety_net_poll(cq_, cq_.events(), std::span<ibv_wc>(batch),
                              [&](const ibv_wc& wc) { found.push_back(wc); });
    for (const ibv_wc& wc : found) { on_completion(wc); }
}

//! [window_server]
/// A client's command after the handshake: BIND opens its page to it through a type-2 window,
/// bound on its own QP; INVL takes the window back. Each answer goes out when the work request
/// has completed (on_completion()).
void Server::take_command(ClientSession& s) {
    while (s.inbox.size() >= 4 && sessions_.count(s.id) != 0) {
        const std::string command(s.inbox.begin(), s.inbox.begin() + 4);
        s.inbox.erase(s.inbox.begin(), s.inbox.begin() + 4);
        using W = ClientSession::WindowState;
        if (command == std::string(kBindCommand, 4) && s.window_state != W::binding &&
            s.window_state != W::bound) {
            if (!s.window) { s.window = allocate_window(device_.pd()); }
            const auto page = reinterpret_cast<std::uintptr_t>(target_.get()) + slot_offset(s.slot);
            s.pending_rkey = post_bind(s.connection->qp(), *s.window, target_mr_.get(), page,
                                       kWindowBytes, IBV_ACCESS_REMOTE_WRITE, kBindWrId);
            s.window_state = W::binding;
        } else if (command == std::string(kInvalidateCommand, 4) && s.window_state == W::bound) {
            post_local_invalidate(s.connection->qp(), s.window->rkey, kInvalidateWrId);
            s.window_state = W::invalidating;
        } else {
            fail(s.id, "unexpected command " + printable_bytes(command) + " (window " +
                           (s.window_state == W::bound ? "bound" : "not bound") + ")");
        }
    }
}

/// One completion of the shared CQ: its session by wc.qp_num. Only the server's own binds and
/// invalidations complete here; the clients' READs, WRITEs and atomics complete at the clients.
void Server::on_completion(const ibv_wc& wc) {
    const ConnectionTable::Entry owner = table_.find(wc.qp_num);
    if (owner.found != ConnectionTable::Found::live) {
        ++totals_.stale_completions;  // its QP was destroyed before the CQ gave it up
        return;
    }
    ClientSession& s = sessions_.at(owner.connection);
    if (wc.status != IBV_WC_SUCCESS) {
        fail(s.id, std::string(wc.wr_id == kBindWrId ? "the window's bind" : "the invalidation") +
                       " failed: " + ibv_wc_status_str(wc.status));
        return;
    }
    const std::chrono::seconds timeout(o_.timeout_seconds);
    if (wc.wr_id == kBindWrId) {
        bound(*s.window, s.pending_rkey);  // the window answers to the new key from now on
        s.window_state = ClientSession::WindowState::bound;
        ++totals_.windows_bound;
        const auto page = reinterpret_cast<std::uintptr_t>(target_.get()) + slot_offset(s.slot);
        send_all(s.socket, encode_window_reply({page, kWindowBytes, s.window->rkey}), timeout,
                 "the window");
    } else {
        s.window_state = ClientSession::WindowState::invalid;
        ++totals_.windows_invalidated;
        send_all(s.socket, std::span(kGoneReply, 4), timeout, "the invalidation's answer");
    }
    if (o_.verbose) {
        std::printf("server: client %llu: window %s, rkey 0x%08x\n",
                    static_cast<unsigned long long>(s.id),
                    wc.wr_id == kBindWrId ? "bound" : "invalidated", s.window->rkey);
    }
}
//! [window_server]

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
