// The client: --connections ping-pongs on one shared CQ and SRQ, and three ways to wait for
// their completions (busy polling, completion events, or a spin then events), measured.
#include <poll.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "connection.hpp"
#include "connection_table.hpp"
#include "cpu_usage.hpp"
#include "cq_events.hpp"
#include "handshake.hpp"
#include "pingpong.hpp"
#include "shared_cq.hpp"
#include "shared_srq.hpp"
#include "stats.hpp"
#include "tcp.hpp"

namespace tutorial {

namespace {

/// Receives the ring keeps beyond the replies in flight; it is refilled once this many are free.
constexpr std::uint32_t kRefillBatch = 16;

/// The client's three ways to reap completions.
class CompletionWaiter {
  public:
    /// \p wait_mask: in event mode, the signal mask to sleep with, while the caller holds
    /// SIGINT and SIGTERM blocked for the whole loop (tcp.hpp's poll_unblocking()).
    /// \p servers[i] is the TCP connection of \p pingpongs[i]'s session.
    CompletionWaiter(SharedCompletionQueue& cq, std::span<const Socket> servers,
                     std::span<const std::unique_ptr<PingPong>> pingpongs, const Options& o,
                     const sigset_t* wait_mask)
        : ep_(cq), servers_(servers), pingpongs_(pingpongs), o_(o), wait_mask_(wait_mask) {}

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

    /// Once nothing came: has the server closed the TCP connection of a session not yet over?
    /// It closes one once its last reply is acked, and that reply may have completed since our
    /// last poll: so poll again before judging. Once every reply is in, only our own sends'
    /// completions can be missing, and the server had every message: the device may report
    /// those after the close (rxe handles an ACK in a deferred task), so the wait goes on, up
    /// to --timeout. Returns how many completions that poll found.
    template <typename Handle>
    std::uint64_t check_server(Handle& handle) {
        std::uint64_t found = 0;
        for (std::size_t i = 0; i < servers_.size(); ++i) {
            if (pingpongs_[i]->complete() || !peer_closed(servers_[i])) { continue; }
            found += drain(ep_, std::span<ibv_wc>(batch_), handle);  // cq_events.hpp's
            if (pingpongs_[i]->received() < o_.iters) {              // a reply still missing
                throw TutorialError(kExitPeer,
                                    "the server closed the connection during the run: it stopped, "
                                    "or ended this client's session",
                                    "its own output says why");
            }
        }
        return found;
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

    SharedCompletionQueue& ep_;
    std::span<const Socket> servers_;  // each connection's TCP connection, kept open
    std::span<const std::unique_ptr<PingPong>> pingpongs_;
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

/// Each connection's QP, its ping-pong, and the TCP connection the server keeps for its session.
struct ClientConnections {
    std::vector<std::unique_ptr<Connection>> connections;
    std::vector<std::unique_ptr<PingPong>> pingpongs;
    std::vector<Socket> servers;
};

ClientRun ping_pong(const Options& o, SharedCompletionQueue& cq, SharedReceiveQueue& srq,
                    const ConnectionTable& table, ClientConnections& cc) {
    // Event mode sleeps once per message: the stop signals stay blocked across the loop, and each
    // sleep unblocks them (ppoll's mask), so a SIGINT still ends the run within one wait. Busy and
    // spin modes may never sleep, so they keep them unblocked.
    std::optional<StopSignalsBlocked> held;
    if (o.mode == WaitMode::event) { held.emplace(); }
    CompletionWaiter waiter(cq, cc.servers, cc.pingpongs, o, held ? &held->before() : nullptr);
    ClientRun run;
    run.round_trips.reserve(std::size_t{o.iters} * cc.pingpongs.size());
    run.cpu_before = cpu_usage();
    const auto start = Clock::now();
    // Each completion to its connection by qp_num; a receive's bytes are its ring slot's.
    auto on_wc = [&](const ibv_wc& wc) {
        const ConnectionTable::Entry owner = table.find(wc.qp_num);
        if (owner.found != ConnectionTable::Found::live) {
            throw std::logic_error("a completion for QP " + std::to_string(wc.qp_num) +
                                   ", which is none of this client's");
        }
        PingPong& pingpong = *cc.pingpongs[owner.connection];
        const bool send = (wc.wr_id & kSendTag) != 0;
        std::span<const std::byte> bytes;
        if (!send) {
            srq.give_back(wc.wr_id);  // posted again only before the next send
            if (wc.status == IBV_WC_SUCCESS) { bytes = srq.received(wc.wr_id, wc.byte_len); }
        }
        pingpong.on_completion(wc, bytes);
        if (!send) {
            const std::chrono::duration<double, std::micro> rtt =
                pingpong.last_receive() - pingpong.last_send();
            run.round_trips.push_back(rtt.count());
        }
    };
    auto all_complete = [&] {
        return std::all_of(cc.pingpongs.begin(), cc.pingpongs.end(),
                           [](const auto& p) { return p->complete(); });
    };
    //! [client_loop]
    while (!all_complete()) {
        throw_if_stopped();
        // Receives first: every connection's reply must find one posted.
        if (srq.ring().free_count() >= kRefillBatch) { (void)srq.post_free_slots(); }
        std::optional<Clock::time_point> next_slot;
        for (auto& pingpong : cc.pingpongs) {  // round-robin over the connections
            if (!pingpong->ready_to_send()) { continue; }
            if (o.rate > 0) {
                const auto slot =
                    start + std::chrono::nanoseconds(1'000'000'000LL * pingpong->sent() / o.rate);
                if (Clock::now() < slot) {
                    next_slot = next_slot ? std::min(*next_slot, slot) : slot;
                    continue;
                }
            }
            pingpong->maybe_send();
        }
        waiter.wait(on_wc, next_slot);  // busy mode spins here; event modes sleep
    }
    //! [client_loop]
    const std::chrono::duration<double> elapsed = Clock::now() - start;
    run.cpu_after = cpu_usage();
    run.seconds = elapsed.count();
    return run;
}

/// ibv_rc_pingpong's two summary lines and the latency table (stats.hpp's, as steps 04 and 05).
void print_figures(const Options& o, const ClientRun& run) {
    const std::uint32_t messages = o.iters * o.connections;
    std::printf("%s", rc_pingpong_summary(o.size, messages, run.seconds * 1e6).c_str());
    std::printf("%s",
                latency_table(o.size, messages, compute_latency_stats(run.round_trips)).c_str());
}

void print_events_and_cpu(const Options& o, SharedCompletionQueue& ep, const ClientConnections& cc,
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
        std::uint32_t verified = 0;
        for (const auto& pingpong : cc.pingpongs) { verified += pingpong->verified(); }
        std::printf("client: verified %u of %u replies\n", verified, o.iters * o.connections);
    }
}

}  // namespace

int run_client(const Options& o) {
    install_stop_handlers();  // tcp.hpp's: SIGINT and SIGTERM set g_stop_signal

    // One device, one CQ and one SRQ for all the connections, each with one reply in flight.
    const Device device(device_config(o));
    SharedCompletionQueue cq(
        device, o.connections * (1 + static_cast<std::uint32_t>(o.tx_depth)) + kRefillBatch);
    SharedReceiveQueue srq(device, o.connections + kRefillBatch, o.size);
    if (o.mode == WaitMode::event) {
        cq.request_notify();  // armed before the first post
    }
    (void)srq.post_free_slots();

    // step05's client handshake, v3, once per connection in turn: TCP, exchange, RTR, RTS, "done".
    // Each TCP connection stays open: the server closes it when it ends that session.
    ClientConnections cc;
    ConnectionTable table;
    for (std::uint32_t i = 0; i < o.connections; ++i) {
        cc.connections.push_back(
            std::make_unique<Connection>(device, cq, srq, static_cast<std::uint32_t>(o.tx_depth),
                                         o.size, *mtu_from_bytes(o.mtu)));
        Connection& c = *cc.connections.back();
        cc.servers.push_back(connect_to_peer(c, o.host, o.tcp_port, handshake_settings(o)));
        (void)table.add(c.qp_num(), i);
        cc.pingpongs.push_back(std::make_unique<PingPong>(c, o, kClientSide));
        if (i == 0 || o.verbose) {
            std::printf("%s\n", gid_choice_line(c.local_port()).c_str());
            print_address("local", c.local_info());
            print_address("remote", *c.remote_info());
        }
    }
    if (o.connections > 1) {
        std::printf("client: %u connections, one shared CQ of %u entries and SRQ of %u receives\n",
                    o.connections, cq.capacity(), srq.ring().depth());
    }
    std::fflush(stdout);

    const ClientRun run = ping_pong(o, cq, srq, table, cc);
    print_figures(o, run);
    print_events_and_cpu(o, cq, cc, run);
    return kExitOk;
}

}  // namespace tutorial
