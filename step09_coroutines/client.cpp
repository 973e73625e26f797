// Step 09: the client: step06's handshake, then the ping-pong as one coroutine on the reactor,
// straight-line code (co_await send, co_await recv), timed, paced and checked.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "async_endpoint.hpp"
#include "cpu_usage.hpp"
#include "handshake.hpp"
#include "pingpong.hpp"
#include "rdma_endpoint.hpp"
#include "reactor.hpp"
#include "stats.hpp"
#include "task.hpp"
#include "tcp.hpp"

namespace tutorial {

namespace {

/// What the client coroutine measures, and what its watchdog reads.
struct ClientRun {
    double seconds = 0;
    std::vector<double> round_trips;  // usec; reserved up front: no allocation per message
    CpuUsage cpu_before, cpu_after;
    std::uint32_t verified = 0;
    bool awaiting_completion = false;  // in the loop, not pacing: --timeout applies
    Clock::time_point waiting_since{};
};

/// step06's checks of a reply (PingPong::on_completion): its length, then its --check pattern.
void check_reply(const Received& reply, std::uint32_t i, const Options& o, ClientRun& run) {
    if (reply.bytes.size() != o.size) {
        throw TutorialError(kExitPeer, "message " + std::to_string(i) + " has " +
                                           std::to_string(reply.bytes.size()) +
                                           " bytes, expected " + std::to_string(o.size) +
                                           " (same -s on both sides?)");
    }
    if (o.check) {
        if (!payload_ok(reply.bytes, i, kServerSide)) {
            throw TutorialError(kExitPeer,
                                "message " + std::to_string(i) + " failed the --check pattern");
        }
        ++run.verified;
    }
}

/// The measured loop, one message at a time: wait for its --rate slot, send, await the reply,
/// time the round trip. The send suspends only when tx_depth sends are outstanding; every
/// co_await here is an awaiter in this frame, so a message allocates nothing.
Task<void> ping_pong(Reactor& reactor, AsyncEndpoint& ep, const Options& o, ClientRun& run) {
    const auto start = Clock::now();
    for (std::uint32_t i = 0; i < o.iters; ++i) {
        if (o.rate > 0) {
            run.awaiting_completion = false;
            co_await reactor.sleep_until(start +
                                         std::chrono::nanoseconds(1'000'000'000LL * i / o.rate));
        }
        if (o.check) { fill_payload(ep.send_slot(), i, kClientSide); }
        const auto sent_at = Clock::now();
        run.waiting_since = sent_at;
        run.awaiting_completion = true;
        co_await ep.send(o.size, i + 1 == o.iters);  // the last send is signaled
        const Received reply = co_await ep.recv();
        const auto replied_at = Clock::now();
        run.waiting_since = replied_at;
        check_reply(reply, i, o, run);
        ep.repost(reply.slot);
        const std::chrono::duration<double, std::micro> rtt = replied_at - sent_at;
        run.round_trips.push_back(rtt.count());
    }
    co_await ep.sends_done();  // as step06: done when the last send has completed too
    run.awaiting_completion = false;
    const std::chrono::duration<double> elapsed = Clock::now() - start;
    run.seconds = elapsed.count();
}

/// ibv_rc_pingpong's two summary lines and the latency table.
void print_figures(const Options& o, const ClientRun& run) {
    std::printf("%s", rc_pingpong_summary(o.size, o.iters, run.seconds * 1e6).c_str());
    std::printf("%s",
                latency_table(o.size, o.iters, compute_latency_stats(run.round_trips)).c_str());
}

/// The events the client's CQ raised (after the endpoint's close(): every queued event taken
/// and acked, as step06), and the CPU time the run took.
void print_events_and_cpu(const Options& o, AsyncEndpoint& ep, const ClientRun& run) {
    ep.close();
    std::printf("client: mode event, %s\n", event_counts(ep.endpoint().events()).c_str());
    const CpuUsage& before = run.cpu_before;
    const CpuUsage& after = run.cpu_after;
    const double cpu_s = (after.user_s - before.user_s) + (after.system_s - before.system_s);
    std::printf(
        "client: cpu: %.3f s user, %.3f s system = %.1f%% of one core; context switches: %ld "
        "voluntary, %ld involuntary\n",
        after.user_s - before.user_s, after.system_s - before.system_s, 100.0 * cpu_s / run.seconds,
        after.voluntary - before.voluntary, after.involuntary - before.involuntary);
    if (o.check) { std::printf("client: verified %u of %u replies\n", run.verified, o.iters); }
}

/// step06's --timeout, "no completion within --timeout": a second coroutine that sleeps until
/// the client has waited --timeout for a completion. It wakes about once per --timeout, not per
/// message (the client only moves waiting_since), and ends when the client looks silent.
Task<void> watchdog(Reactor& reactor, const ClientRun& run, std::chrono::seconds timeout) {
    for (;;) {
        const auto now = Clock::now();
        if (run.awaiting_completion && now - run.waiting_since > timeout) { co_return; }
        co_await reactor.sleep_until(run.awaiting_completion ? run.waiting_since + timeout +
                                                                   std::chrono::milliseconds(1)
                                                             : now + timeout);
    }
}

/// The server keeps the handshake's TCP connection open until it ends this client's session, and
/// sends nothing on it after the handshake: readable means closed. (A QP that the server
/// destroyed sends nothing, so without this the client would learn only at --timeout.) It closes
/// it once its last reply is acked, and that reply may complete after the close is seen: so the
/// CQ is polled once more, and the client runs before this round's end is judged. With every
/// reply in, the close ends nothing: only our own sends' completions can still be due.
Task<void> server_gone(Reactor& reactor, FdWatch& connection, const Socket& server,
                       AsyncEndpoint& ep) {
    do { co_await reactor.readable(connection); } while (!peer_closed(server));
    (void)ep.safety_net(reactor.ready());
}

/// Runs the reactor until the client coroutine ends, a signal comes, the server closes the
/// connection, or the watchdog finds the client silent. A client stopped early has its frame
/// destroyed here (its awaiters leave the reactor and the endpoint), and the error says why.
void run_to_end(Reactor& reactor, Task<void>& task, const Options& o, const ClientRun& run,
                const Socket& server, AsyncEndpoint& ep) {
    FdWatch connection(reactor, server.get());  // declared first: it outlives gone's awaiter
    Task<void> gone = server_gone(reactor, connection, server, ep);
    Task<void> silent = watchdog(reactor, run, std::chrono::seconds(o.timeout_seconds));
    reactor.spawn(task);
    reactor.spawn(gone);
    reactor.spawn(silent);
    const auto reply_missing = [&] { return run.round_trips.size() < o.iters; };
    reactor.run_until([&] {
        return task.done() || g_stop_signal != 0 || (gone.done() && reply_missing()) ||
               silent.done();
    });
    if (task.done()) {
        task.result();  // rethrows what ended it
        return;
    }
    task.reset();
    throw_if_stopped();  // tcp.hpp's "interrupted by SIGINT", exit 130, as step06
    if (gone.done() && reply_missing()) {
        throw TutorialError(kExitPeer,
                            "the server closed the connection during the run: it stopped, or "
                            "ended this client's session",
                            "its own output says why");
    }
    throw TutorialError(kExitTimeout, "no completion within --timeout (event mode)");
}

}  // namespace

int run_client(const Options& o) {
    Reactor reactor(std::chrono::milliseconds(o.safety_ms));
    const Device device(device_config(o));
    AsyncEndpoint ep(reactor, RDMAEndpoint(device, async_endpoint_config(o)), async_config(o));
    ep.post_initial_receives();  // the CQ armed first; receives before connecting

    // step06's client handshake, v3: TCP, exchange, RTR, RTS, then "done". Its waits block:
    // the client has no other coroutine to run yet.
    const Socket server = connect_to_peer(
        ep.endpoint(), o.host, static_cast<std::uint16_t>(o.tcp_port), handshake_settings(o));
    std::printf("%s\n", gid_choice_line(ep.endpoint().local_port()).c_str());
    print_address("local", ep.endpoint().local_info());
    print_address("remote", *ep.endpoint().remote_info());
    std::fflush(stdout);

    ClientRun run;
    run.round_trips.reserve(o.iters);
    run.cpu_before = cpu_usage();
    Task<void> task = ping_pong(reactor, ep, o, run);
    run_to_end(reactor, task, o, run, server, ep);
    run.cpu_after = cpu_usage();

    print_figures(o, run);
    print_events_and_cpu(o, ep, run);
    return kExitOk;
}

}  // namespace tutorial
