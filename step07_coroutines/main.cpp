// Step 07: C++20 coroutines over step06's event loop: one coroutine per connection, one thread.

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

/// client.cpp: one client against the server on o.host, on a one-thread reactor; returns the
/// exit code.
int run_client(const Options& o);

//! [run]
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
//! [run]

// ========================================================================= the server

//! [server_run]
/// The accept loop, the watchdog and the async-event watch start as coroutines; the reactor runs
/// rounds (wait, route every completion, THEN resume) until SIGINT/SIGTERM or --exit-after, and
/// after each round housekeeping() reaps the clients whose coroutine ended. Then the shutdown, in
/// its order.
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
//! [server_run]

//! [accept_loop]
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
//! [accept_loop]

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
            if (o_.check) {
                fill_payload(ep.send_slot().first(o_.size), i, kServerSide);
            }
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

//! [watchdog]
/// A silent client wakes nobody: no completion comes. So once per --safety-ms one coroutine
/// looks at every running client: its message count and its socket, nothing per message.
Task<void> Server::watchdog() {
    for (;;) {
        co_await reactor_.sleep_for(std::chrono::milliseconds(o_.safety_ms));
        end_silent_sessions();
    }
}
//! [watchdog]

//! [shutdown]
/// SIGINT/SIGTERM (or --exit-after reached), in this order. Nothing is destroyed while a
/// coroutine could still touch it, and every event is acked before its CQ goes.
void Server::shut_down() {
    // 1. Stop accepting (the SIGINT line was printed when it came): the accept loop's wait
    //    ends with CancelledError.
    reactor_.cancel(*listen_watch_, "the server stops accepting");
    // 2. Every QP to the error state: each outstanding request completes with a flush error.
    for (auto& [id, s] : sessions_) {
        s->aborted = true;
        if (s->endpoint) {
            s->endpoint->enter_error_state();
        }
    }
    // 3. Client by client, its flush completions drained, those of the unsignaled sends and the
    //    posted receives too. Its waiter is queued with the flush error, or, waiting on its
    //    socket, with CancelledError.
    for (auto& [id, s] : sessions_) {
        if (s->endpoint) {
            s->endpoint->cancel(kFlushTimeout);
        }
        if (s->socket_watch) {
            reactor_.cancel(*s->socket_watch, "the server shuts down");
        }
    }
    // 4. Resume every waiter (the watchdog's timer is cancelled too): each client's coroutine
    //    prints "aborted by shutdown after K of N messages" and acks its events.
    reactor_.cancel_waiters("the server shuts down");
    reactor_.ready().resume_all();
    // 5. The coroutine frames.
    accepting_.reset();
    watching_.reset();
    async_watching_.reset();
    for (auto& [id, s] : sessions_) {
        s->coroutine.reset();
    }
    // 6. The sessions: each one's socket, and its endpoint (QP, CQ, channel, MR, buffer), events
    // acked; the device (PD, context) goes with the server.
    sessions_.clear();
    listen_watch_.reset();  // out of the epoll set, then closed
    listen_.reset();
    async_watch_.reset();
}
//! [shutdown]

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
        if (!e.hint().empty()) {
            std::fprintf(stderr, "hint: %s\n", e.hint().c_str());
        }
        return e.exit_code();
    } catch (const std::exception& e) {  // a programming error, e.g. a range check in the class
        std::fprintf(stderr, "%s: %s\n", kProgram, e.what());
        return kExitRdma;
    }
}
//! [main]
