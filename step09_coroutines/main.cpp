// Step 09: C++20 coroutines over step06's event loop: one coroutine per connection, one thread.

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <system_error>

#include "async_endpoint.hpp"
#include "options.hpp"
#include "pingpong.hpp"
#include "reactor.hpp"
#include "server.hpp"
#include "task.hpp"

namespace tutorial {

/// client.cpp: one client against the server on o.host; returns the exit code.
int run_client(const Options& o);

/// The outline. Without a HOST, a server: one thread, one reactor (one epoll set),
/// and one coroutine per client from its accept to its last line (Server::run, below). With a
/// HOST, a client: step06's handshake, then one coroutine that ping-pongs (client.cpp).
int run(const Options& options) {
    if (options.help) {
        std::fputs(usage_text().c_str(), stdout);
        return kExitOk;
    }
    // SIGINT and SIGTERM set tcp.hpp's g_stop_signal, as in step06's client. The reactor lets
    // them in only while it waits, so either side sees one at once.
    install_stop_handlers();
    if (options.host.empty()) {
        Server server(options);
        return server.run();
    }
    return run_client(options);
}

// ========================================================================= the server

/// Reactor rounds until SIGINT/SIGTERM or --exit-after, each followed by housekeeping(), which
/// reaps the clients whose coroutine ended; then the shutdown, in its order.
int Server::run() {
    open_event_sources();  // the listener; the reactor made its epoll set
    accepting_ = accept_loop();
    watching_ = watchdog();
    async_watching_ = watch_async_events();
    reactor_.spawn(accepting_);
    reactor_.spawn(watching_);
    reactor_.spawn(async_watching_);
    reactor_.run_until([this] { return housekeeping(); });
    shut_down();
    print_totals();
    return kExitOk;  // a server stopped by SIGINT/SIGTERM has done its job
}

/// One coroutine accepts; each client gets a session and a coroutine of its own, started by
/// putting its handle on the reactor's ready queue. The session owns the frame.
Task<void> Server::accept_loop() {
    for (;;) {
        co_await reactor_.readable(*listen_watch_);  // suspends until a client connects
        while (std::optional<TcpPeer> peer = accept_now(listen_)) {
            ClientSession& s = add_session(std::move(*peer));
            s.coroutine = serve_client(s);
            reactor_.spawn(s.coroutine);
        }
        if (errno == EMFILE || errno == ENFILE) {  // accept_now's accept4 found no free fd
            refuse_at_fd_limit();
        }
    }
}

//! [serve_client]
/// One client, from its accept to its last line, written as the straight line it is. Every
/// co_await suspends this coroutine only; the others go on. Whatever ends it early (a bad
/// handshake, a failed completion, the watchdog, the shutdown) lands in the one catch below.
Task<void> Server::serve_client(ClientSession& s) {
    Outcome outcome{"complete", &ServerTotals::complete};
    try {
        // The handshake: v3 or ibv_rc_pingpong's, told from the first 4 bytes.
        const PeerInfo remote = co_await take_handshake(s);
        // The endpoint, its receives posted (CQ armed first), RTR, RTS, and the answer.
        start_rdma(s, remote);
        co_await take_done(s);  // "done", the client's last word on TCP
        AsyncEndpoint& ep = *s.endpoint;
        // The ping-pong: answer each message. No allocation, no Task: only awaiters.
        for (std::uint32_t i = 0; i < o_.iters; ++i) {
            const Received message = co_await ep.recv();  // the next completed receive slot
            check_message(s, message);                    // its size, and --check's pattern
            ep.repost(message.slot);
            if (o_.check) { fill_payload(ep.send_slot().first(o_.size), i, kServerSide); }
            // Suspends only while the send queue is full; every tx_depth/2-th send is signaled.
            co_await ep.send(o_.size, i + 1 == o_.iters);
            ++s.sent;
        }
        co_await ep.sends_done();      // the last reply's completion
    } catch (const SessionEnd& end) {  // a rejected handshake, or a silent client
        outcome = end.outcome();
    } catch (const std::exception& e) {  // a failed completion (flushes too), a check, a cancel
        outcome = ended_by(s, e);
    }
    finish(s, outcome);  // leave the epoll set, ack every event, print the client's line
}
//! [serve_client]

/// A silent client wakes nobody: no completion comes. So once per --safety-ms one coroutine
/// looks at every running client: its message count and its socket, nothing per message.
Task<void> Server::watchdog() {
    for (;;) {
        co_await reactor_.sleep_until(Clock::now() + std::chrono::milliseconds(o_.safety_ms));
        end_silent_sessions();
    }
}

//! [shutdown]
/// SIGINT/SIGTERM (or --exit-after reached), in this order. Nothing is destroyed while a
/// coroutine could still touch it, and every event is acked before its CQ goes.
void Server::shut_down() {
    // 1. Stop accepting: no reactor round runs any more (the SIGINT line was printed then).
    // 2. Every QP to the error state: each outstanding request completes with a flush error.
    for (auto& [id, s] : sessions_) {
        s->aborted = true;
        if (s->endpoint) { s->endpoint->enter_error_state(); }
    }
    // 3. Client by client, its flush completions drained, those of the unsignaled sends and the
    //    posted receives too. Its waiter is queued with the flush error.
    for (auto& [id, s] : sessions_) {
        if (s->endpoint) { s->endpoint->cancel(kFlushTimeout); }
    }
    // 4. Every waiter on a socket or a timer (the accept loop, the watchdog, a handshake) is
    //    queued with CancelledError; then all resume: each client's coroutine prints "aborted by
    //    shutdown after K of N messages" and acks its events.
    reactor_.cancel_waiters();
    reactor_.ready().resume_all();
    // 5. The coroutine frames.
    accepting_.reset();
    watching_.reset();
    async_watching_.reset();
    for (auto& [id, s] : sessions_) { s->coroutine.reset(); }
    // 6. The sessions: each one's socket, and its endpoint (QP, CQ, channel, MR, buffer), events
    //    acked. The listener and the device (PD, context) go with the server.
    sessions_.clear();
}
//! [shutdown]

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
