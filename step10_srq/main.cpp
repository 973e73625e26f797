// Step 10: many clients on shared resources: one CQ, one channel and one SRQ for every connection.
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
#include "pingpong.hpp"
#include "server.hpp"

namespace tutorial {

/// client.cpp: one client against the server on o.host; returns the exit code.
int run_client(const Options& o);
/// srq_pingpong_compat.cpp: one ibv_srq_pingpong client on the shared CQ and SRQ.
int run_srq_pingpong_server(const Options& o);

//! [run]
/// The outline. Without a HOST, a server: one thread and one epoll set watch the listening
/// socket, a signalfd, the device's async events, the ONE completion channel and every client's
/// socket (Server::run, below). With a HOST, a client: --connections ping-pongs on one shared CQ
/// and SRQ, whose completions it waits for in one of three ways (client.cpp).
int run(const Options& options) {
    if (options.help) {
        std::fputs(usage_text().c_str(), stdout);
        return kExitOk;
    }
    if (options.srq_compat) { return run_srq_pingpong_server(options); }
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
        advance_closing();  // the connections that ended: destroy each QP once it is done
        const auto now = Clock::now();
        if (n == 0 || now >= next_sweep) {  // the timeouts, once per safety period
            end_silent_sessions();
            safety_net_sweep(n == 0);
            next_sweep = now + std::chrono::milliseconds(o_.safety_ms);
        }
    }
    shut_down();
    return exit_code_;  // kExitOk: a server stopped by SIGINT/SIGTERM has done its job
}
//! [server_loop]

/// One epoll set for everything: the signalfd, the async events, the one completion channel and
/// the listening socket now; each client's socket when it connects.
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
    //! [shared_start]
    // Arm BEFORE the first receive is posted: a completion that lands before the first
    // ibv_req_notify_cq() raises no event at all.
    cq_.request_notify();
    watch(cq_.channel_fd(), tag(0, kChannel));
    totals_.refills += srq_.post_free_slots() > 0 ? 1 : 0;
    if (o_.srq_limit > 0) { srq_.arm_limit(o_.srq_limit); }
    //! [shared_start]
    listen_ = listen_for_clients(o_);
    watch(listen_.get(), tag(0, kListen));
    std::printf(
        "server: listening on TCP port %u; one thread, level-triggered epoll; shared CQ of %u "
        "entries, SRQ of %u receives, %s\n",
        static_cast<unsigned>(o_.tcp_port), cq_.capacity(), srq_.ring().depth(),
        o_.srq_limit > 0 ? ("refilled below " + std::to_string(o_.srq_limit)).c_str()
                         : "refilled after each completion pass");
    std::fflush(stdout);
}

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
    if (kind == kChannel) {
        on_channel();
        return;
    }
    auto it = sessions_.find(id);
    if (it == sessions_.end()) {
        return;  // ended earlier in this batch
    }
    // A session that ended earlier in this batch has closed its socket, but may stay (closing).
    if (kind == kSocket && it->second.socket.get() >= 0) { on_socket(it->second); }
}

//! [on_channel]
/// The one channel is readable: cq_events.hpp's protocol on the shared CQ, then each completion
/// to its connection. A verb that fails on the shared CQ ends the server (main() prints it).
void Server::on_channel() {
    std::array<ibv_wc, 16> batch{};
    std::vector<ibv_wc>& completions = completions_;  // kept, with its capacity
    completions.clear();
    tutorial::service_channel(cq_, cq_.events(), std::span<ibv_wc>(batch),
                              [&](const ibv_wc& wc) { completions.push_back(wc); });
    for (const ibv_wc& wc : completions) { on_completion(wc); }
    refill_after_pass();
}
//! [on_channel]

//! [dispatch]
/// One completion of the shared CQ: its connection by wc.qp_num, then by wr_id a send of that
/// connection or a receive into a ring slot. A failed completion's opcode is undefined
/// (ibv_poll_cq(3)), but its wr_id and qp_num are valid.
void Server::on_completion(const ibv_wc& wc) {
    const bool send = (wc.wr_id & kSendTag) != 0;
    std::span<const std::byte> bytes;
    if (!send) {
        // The slot is free again at once: it is posted again only after this pass, so its bytes
        // stay as they landed while the ping-pong checks them.
        srq_.give_back(wc.wr_id);
        if (wc.status == IBV_WC_SUCCESS) { bytes = srq_.received(wc.wr_id, wc.byte_len); }
    }
    const ConnectionTable::Entry owner = table_.find(wc.qp_num);
    if (owner.found != ConnectionTable::Found::live) {
        ++totals_.stale_completions;  // its QP was destroyed before the CQ gave it up
        return;
    }
    ClientSession& s = sessions_.at(owner.connection);
    if (s.state == ClientSession::State::closing) {
        on_closing_completion(s, wc);
        return;
    }
    try {
        s.pingpong->on_completion(wc, bytes);
        s.pingpong->maybe_send();
        s.last_progress = Clock::now();
    } catch (const std::exception& e) {  // a failed completion, a payload check, a failed post
        fail(s.id, e.what());
        return;
    }
    if (s.pingpong->complete()) { finish(s.id, "complete", &ServerTotals::complete); }
}
//! [dispatch]

//! [closing_completion]
/// A closing connection's completion: a send, flushed or not, is accounted for; a receive's
/// slot is already back in the ring.
void Server::on_closing_completion(ClientSession& s, const ibv_wc& wc) {
    if ((wc.wr_id & kSendTag) == 0) { return; }
    if (wc.wr_id == kDrainMarkerWrId) {
        s.drained = true;  // every send before it has completed
        return;
    }
    if (wc.status == IBV_WC_WR_FLUSH_ERR) { ++s.flushed_sends; }
    try {
        s.pingpong->on_send_done(wc.wr_id);
    } catch (const std::logic_error&) {  // not a send it posted: nothing to account for
    }
}
//! [closing_completion]

void Server::refill() {
    if (srq_.post_free_slots() > 0) { ++totals_.refills; }
}

/// Without --srq-limit, every pass refills. With it, the limit event refills, and so does a pass
/// that ends below the limit: the slots it polled would wait for an event that may never come.
void Server::refill_after_pass() {
    if (o_.srq_limit == 0 || srq_.ring().posted() < o_.srq_limit) { refill(); }
}

//! [safety_net]
/// The safety net: when epoll_wait timed out, or a running client made no progress for
/// --safety-ms, poll the shared CQ anyway. Events should have woken us; a completion
/// found here is counted as a safety-net find.
void Server::safety_net_sweep(bool timed_out) {
    const auto now = Clock::now();
    const auto idle = std::chrono::milliseconds(o_.safety_ms);
    bool quiet = timed_out;
    for (const auto& [id, s] : sessions_) {
        if (s.state == ClientSession::State::running && now - s.last_progress >= idle) {
            quiet = true;
        }
    }
    if (!quiet) { return; }
    on_channel();  // first, any event that is queued but not yet seen
    std::array<ibv_wc, 16> batch{};
    std::vector<ibv_wc> found;
    tutorial::safety_net_poll(cq_, cq_.events(), std::span<ibv_wc>(batch),
                              [&](const ibv_wc& wc) { found.push_back(wc); });
    if (!found.empty() && o_.verbose) {
        std::printf("server: safety net found %zu completion(s) without an event\n", found.size());
    }
    for (const ibv_wc& wc : found) { on_completion(wc); }
    refill_after_pass();
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
