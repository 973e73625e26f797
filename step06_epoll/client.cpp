// The client: one endpoint, one ping-pong, and three ways to wait for its completions (busy
// polling, completion events, or a spin then events), measured.
#include <poll.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cpu_usage.hpp"
#include "cq_events.hpp"
#include "handshake.hpp"
#include "pingpong.hpp"
#include "rdma_endpoint.hpp"
#include "stats.hpp"
#include "tcp.hpp"

namespace tutorial {

namespace {

/// The client's three ways to reap completions.
class CompletionWaiter {
  public:
    /// \p wait_mask: in event mode, the signal mask to sleep with, while the caller holds
    /// SIGINT and SIGTERM blocked for the whole loop (tcp.hpp's poll_unblocking()).
    CompletionWaiter(RDMAEndpoint& ep, const Socket& server, const PingPong& pingpong,
                     const Options& o, const sigset_t* wait_mask)
        : ep_(ep), server_(server), pingpong_(pingpong), o_(o), wait_mask_(wait_mask) {}

    /// Calls `handle(wc)` for at least one completion (or returns at `wake_at`
    /// when that comes first). Throws on timeout or interruption.
    template <typename Handle>
    void wait(Handle&& handle, std::optional<Clock::time_point> wake_at = std::nullopt) {
        const auto deadline = Clock::now() + std::chrono::seconds(o_.timeout_seconds);
        switch (o_.mode) {
            case WaitMode::busy: wait_busy(handle, deadline, wake_at); break;
            case WaitMode::event: wait_event(handle, deadline, wake_at); break;
            case WaitMode::spin: wait_spin(handle, deadline, wake_at); break;
        }
    }

  private:
    template <typename Handle>
    int poll_once(Handle& handle) {
        const int n = ep_.poll(batch_);
        for (int i = 0; i < n; ++i) { handle(batch_[static_cast<std::size_t>(i)]); }
        return n;
    }

    /// Once nothing came: has the server closed the TCP connection it keeps for the session?
    /// It closes it once its last reply is acked, and that reply may have completed since our
    /// last poll: so poll again before judging. Once every reply is in, only our own sends'
    /// completions can be missing, and the server had every message: the device may report
    /// those after the close (rxe handles an ACK in a deferred task), so the wait goes on, up
    /// to --timeout. Returns what that poll found.
    template <typename Handle>
    int check_server(Handle& handle) {
        if (!peer_closed(server_)) { return 0; }
        if (const int n = poll_once(handle); n > 0) { return n; }
        if (pingpong_.received() == o_.iters) { return 0; }
        throw TutorialError(kExitPeer,
                            "the server closed the connection during the run: it stopped, "
                            "or ended this client's session",
                            "its own output says why");
    }

    static void check_deadline(Clock::time_point deadline, const char* mode) {
        if (Clock::now() > deadline) {
            throw TutorialError(kExitTimeout,
                                std::string("no completion within --timeout (") + mode + " mode)");
        }
    }

    //! [busy]
    template <typename Handle>
    void wait_busy(Handle& handle, Clock::time_point deadline,
                   std::optional<Clock::time_point> wake_at) {
        for (std::uint32_t spins = 0;; ++spins) {
            if (poll_once(handle) > 0) { return; }
            if ((spins & 1023) == 0) {
                throw_if_stopped();
                if (check_server(handle) > 0) { return; }
                const auto now = Clock::now();
                if (wake_at && now >= *wake_at) { return; }
                check_deadline(deadline, "busy");
            } else if (wake_at && Clock::now() >= *wake_at) {
                return;
            }
        }
    }
    //! [busy]

    /// Sleeps on the channel fd until readable, wake_at, or --safety-ms.
    bool sleep_on_channel(Clock::time_point deadline, std::optional<Clock::time_point> wake_at) {
        auto until = Clock::now() + std::chrono::milliseconds(o_.safety_ms);
        if (wake_at && *wake_at < until) { until = *wake_at; }
        until = std::min(until, deadline + std::chrono::milliseconds(1));
        pollfd p{ep_.channel_fd(), POLLIN, 0};
        if (wait_mask_ != nullptr) {
            return poll_unblocking(p, until - Clock::now(), *wait_mask_) > 0;  // tcp.hpp's
        }
        return poll_unless_stopped(p, until - Clock::now()) > 0;
    }

    //! [event]
    template <typename Handle>
    void wait_event(Handle& handle, Clock::time_point deadline,
                    std::optional<Clock::time_point> wake_at) {
        for (;;) {
            if (sleep_on_channel(deadline, wake_at)) {
                if (service_channel(ep_, ep_.events(), std::span<ibv_wc>(batch_), handle) > 0) {
                    return;
                }
                continue;  // an event whose CQE an earlier drain took: legal
            }
            if (wake_at && Clock::now() >= *wake_at) { return; }
            // Timed out: the safety net. A completion here had no event (yet).
            if (safety_net_poll(ep_, ep_.events(), std::span<ibv_wc>(batch_), handle) > 0) {
                return;
            }
            if (check_server(handle) > 0) { return; }
            check_deadline(deadline, "event");
        }
    }
    //! [event]

    //! [spin]
    /// rsocket's way: poll for up to --spin-us; only then arm the CQ, poll once
    /// more (a CQE may have landed before the arm), and sleep.
    template <typename Handle>
    void wait_spin(Handle& handle, Clock::time_point deadline,
                   std::optional<Clock::time_point> wake_at) {
        const auto spin_until = Clock::now() + std::chrono::microseconds(o_.spin_us);
        for (;;) {
            if (poll_once(handle) > 0) { return; }
            const auto now = Clock::now();
            if (wake_at && now >= *wake_at) { return; }
            if (now < spin_until) { continue; }
            if (!armed_) {
                ep_.request_notify();
                ep_.events().on_rearm();
                armed_ = true;
                continue;  // poll once more after arming
            }
            if (sleep_on_channel(deadline, wake_at)) {
                while (ep_.get_event()) {
                    ep_.events().on_event();
                    armed_ = false;  // the event used up the one-shot request
                }
                if (const std::uint32_t due = ep_.events().acks_due(); due > 0) {
                    ep_.ack(due);
                    ep_.events().on_acked(due);
                }
                continue;
            }
            if (wake_at && Clock::now() >= *wake_at) { return; }
            // The safety net; it re-arms the CQ before it polls.
            if (safety_net_poll(ep_, ep_.events(), std::span<ibv_wc>(batch_), handle) > 0) {
                return;
            }
            if (check_server(handle) > 0) { return; }
            check_deadline(deadline, "spin");
        }
    }
    //! [spin]

    RDMAEndpoint& ep_;
    const Socket& server_;  // the handshake's TCP connection, kept open
    const PingPong& pingpong_;
    const Options& o_;
    const sigset_t* wait_mask_;
    std::array<ibv_wc, 16> batch_{};
    bool armed_ = false;
};

/// What the measured loop gives: its wall time, and one round trip (usec) per message.
struct ClientRun {
    double seconds = 0;
    std::vector<double> round_trips;
    CpuUsage cpu_before, cpu_after;
};

ClientRun ping_pong(const Options& o, RDMAEndpoint& ep, const Socket& server, PingPong& pingpong) {
    // Event mode sleeps once per message: the stop signals stay blocked across the loop, and each
    // sleep unblocks them (ppoll's mask), so a SIGINT still ends the run within one wait. Busy and
    // spin modes may never sleep, so they keep them unblocked.
    std::optional<StopSignalsBlocked> held;
    if (o.mode == WaitMode::event) { held.emplace(); }
    CompletionWaiter waiter(ep, server, pingpong, o, held ? &held->before() : nullptr);
    ClientRun run;
    run.round_trips.reserve(o.iters);
    run.cpu_before = cpu_usage();
    const auto start = Clock::now();
    auto on_wc = [&](const ibv_wc& wc) {
        pingpong.on_completion(wc);
        if (wc.wr_id == kReceiveWrId) {
            const std::chrono::duration<double, std::micro> rtt =
                pingpong.last_receive() - pingpong.last_send();
            run.round_trips.push_back(rtt.count());
        }
    };
    //! [client_loop]
    while (!pingpong.complete()) {
        throw_if_stopped();
        if (pingpong.ready_to_send()) {
            if (o.rate > 0) {
                const auto slot =
                    start + std::chrono::nanoseconds(1'000'000'000LL * pingpong.sent() / o.rate);
                if (Clock::now() < slot) {
                    waiter.wait(on_wc, slot);  // busy mode spins here; event modes sleep
                    continue;
                }
            }
            pingpong.maybe_send();
        }
        waiter.wait(on_wc);
    }
    //! [client_loop]
    const std::chrono::duration<double> elapsed = Clock::now() - start;
    run.cpu_after = cpu_usage();
    run.seconds = elapsed.count();
    return run;
}

/// ibv_rc_pingpong's two summary lines and the latency table (stats.hpp's, as steps 04 and 05).
void print_figures(const Options& o, const ClientRun& run) {
    std::printf("%s", rc_pingpong_summary(o.size, o.iters, run.seconds * 1e6).c_str());
    std::printf("%s",
                latency_table(o.size, o.iters, compute_latency_stats(run.round_trips)).c_str());
}

void print_events_and_cpu(const Options& o, RDMAEndpoint& ep, const PingPong& pingpong,
                          const ClientRun& run) {
    const char* mode_name = o.mode == WaitMode::busy    ? "busy"
                            : o.mode == WaitMode::event ? "event"
                                                        : "spin";
    take_queued_events(ep);
    ack_all_before_destroy(ep, ep.events());
    std::printf("client: mode %s, %s\n", mode_name, event_counts(ep.events()).c_str());
    const CpuUsage& before = run.cpu_before;
    const CpuUsage& after = run.cpu_after;
    const double cpu_s = (after.user_s - before.user_s) + (after.system_s - before.system_s);
    std::printf(
        "client: cpu: %.3f s user, %.3f s system = %.1f%% of one core; context switches: %ld "
        "voluntary, %ld involuntary\n",
        after.user_s - before.user_s, after.system_s - before.system_s, 100.0 * cpu_s / run.seconds,
        after.voluntary - before.voluntary, after.involuntary - before.involuntary);
    if (o.check) {
        std::printf("client: verified %u of %u replies\n", pingpong.verified(), o.iters);
    }
}

}  // namespace

int run_client(const Options& o) {
    install_stop_handlers();  // tcp.hpp's: SIGINT and SIGTERM set g_stop_signal

    const Device device(device_config(o));
    RDMAEndpoint ep(device, endpoint_config(o, o.mode != WaitMode::busy));
    PingPong pingpong(ep, o, kClientSide);
    if (o.mode == WaitMode::event) {
        ep.request_notify();  // armed before the first post
    }
    pingpong.post_initial_receives();

    // step05's client handshake, v3: TCP, exchange, RTR, RTS, then "done". The TCP connection
    // stays open: the server closes it when it ends the session.
    const Socket server = connect_to_peer(ep, o.host, o.tcp_port, handshake_settings(o));
    const PeerInfo remote = *ep.remote_info();
    std::printf("%s\n", gid_choice_line(ep.local_port()).c_str());
    print_address("local", ep.local_info());
    print_address("remote", remote);
    std::fflush(stdout);

    const ClientRun run = ping_pong(o, ep, server, pingpong);
    print_figures(o, run);
    print_events_and_cpu(o, ep, pingpong, run);
    return kExitOk;
}

}  // namespace tutorial
