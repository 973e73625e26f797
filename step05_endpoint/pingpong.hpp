// step04's ping-pong loop, moved onto RDMAEndpoint: the same traffic, signaling and idle probe.
#pragma once

#include "check.hpp"
#include "errors.hpp"
#include "options.hpp"
#include "rdma_endpoint.hpp"
#include "tcp.hpp"

#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace tutorial {

//! [pingpong_setup]
// Send work requests carry their sequence number; receives, the probe and the one-sided modes'
// final message carry these.
inline constexpr std::uint64_t kReceiveWrId = UINT64_MAX;
inline constexpr std::uint64_t kProbeWrId = UINT64_MAX - 1;
inline constexpr std::uint64_t kSendWrId = UINT64_MAX - 2;

// What the loop needs to know, fixed before it starts.
struct PingPongPlan {
    std::size_t size = 0;
    long long iters = 0;  // measured iterations
    int rx_depth = 0;
    int tx_depth = 0;
    bool check = false;
    bool client = false;
    bool rc_pingpong_compat = false;  // the wire cannot carry -n: name an early end
    std::chrono::seconds timeout{10};
};

struct PingPongResult {
    double usec = 0;                  // wall time of the measured iterations
    std::vector<double> round_trips;  // usec, one per measured iteration but the last
};

// --check: message i of the client and message i of the server carry different patterns, so a
// peer that only echoes what it received does not pass.
inline void check_pingpong_message(std::span<const std::byte> message, long long iteration,
                                   std::uint64_t pattern) {
    if (const auto offset = find_pattern_mismatch(message, pattern)) {
        throw TutorialError(kExitPeer,
                            "--check: message " + std::to_string(iteration) + " is wrong at byte " +
                                std::to_string(*offset),
                            "start both sides with --check (ibv_rc_pingpong has none)");
    }
}
//! [pingpong_setup]

//! [ended-early]
// ibv_rc_pingpong's handshake cannot carry -n (handshake v3 compares it at connect time). A peer
// started with a smaller -n ends its session and destroys its QP: this side's next send is then
// never acknowledged (IBV_WC_RETRY_EXC_ERR). Name that, rather than blame a dead peer. Called in a
// catch block: anything else is rethrown as it is.
[[noreturn]] inline void rethrow_ended_early(const WorkCompletionError& e, const PingPongPlan& plan,
                                             long long received) {
    if (plan.rc_pingpong_compat && e.status() == IBV_WC_RETRY_EXC_ERR && received > 0) {
        throw TutorialError(kExitPeer,
                            std::string("the ") + (plan.client ? "server" : "client") +
                                " ended the session after " + std::to_string(received) +
                                " messages; both sides must use the same -n",
                            std::string("this ") + (plan.client ? "client" : "server") +
                                " uses -n " + std::to_string(plan.iters) +
                                "; ibv_rc_pingpong's handshake cannot carry -n to compare it");
    }
    throw;
}
//! [ended-early]

//! [pingpong_loop]
// step04's traffic, on the class: the client sends first; each side sends its next message as soon
// as the peer's has arrived, `iters` times each way. Only every signal_every-th send asks
// for a completion: the peer's answer already tells us the send arrived.
class PingPong {
  public:
    PingPong(RDMAEndpoint& endpoint, const PingPongPlan& plan)
        : endpoint_(endpoint),
          plan_(plan),
          signal_every_(std::max(1, plan.tx_depth / 2)),
          total_(plan.iters),
          refill_batch_(std::max(1, std::min(kRefillBatch, plan.rx_depth / 2))),
          posted_receives_(plan.rx_depth),
          message_(endpoint.buffer().first(plan.size)) {
        send_times_.reserve(static_cast<std::size_t>(plan.iters));
    }

    [[nodiscard]] PingPongResult run() {
        try {
            loop();
        } catch (const WorkCompletionError& e) { rethrow_ended_early(e, plan_, received_); }
        PingPongResult result;
        const Clock::time_point end = Clock::now();
        if (!send_times_.empty()) {
            result.usec =
                std::chrono::duration<double, std::micro>(end - send_times_.front()).count();
        }
        for (std::size_t i = 0; i + 1 < send_times_.size(); ++i) {
            result.round_trips.push_back(
                std::chrono::duration<double, std::micro>(send_times_[i + 1] - send_times_[i])
                    .count());
        }
        return result;
    }

    //! [pingpong_loop]

    // Client and server messages of the same iteration carry different patterns.
    [[nodiscard]] static std::uint64_t pattern_id(long long iteration, bool from_client) {
        return static_cast<std::uint64_t>(iteration) * 2 + (from_client ? 0 : 1);
    }

  private:
    //! [poll_batch]
    void loop() {
        if (plan_.client) { send_next(); }
        last_progress_ = Clock::now();
        // Like ibv_rc_pingpong, wait for our last send's completion too: destroying the QP earlier
        // could drop that message before it left.
        while (received_ < total_ || completed_sends_ < total_) { poll_batch(); }
    }

    void poll_batch() {
        const std::size_t n = endpoint_.try_poll(completions_);  // throws on a failed one
        if (n == 0) {
            if (++idle_polls_ % 4096 == 0) { check_idle(); }
            return;
        }
        idle_polls_ = 0;
        last_progress_ = Clock::now();
        // Send completions first. The CQ does not order a send's completion before the peer's
        // answer to it; handled in CQ order, a receive's reply could wait for queue room that a
        // send completion later in this very batch already freed.
        for (const bool receives : {false, true}) {
            for (std::size_t i = 0; i < n; ++i) {
                if ((completions_[i].wr_id == kReceiveWrId) == receives) {
                    handle(completions_[i]);
                }
            }
        }
    }

    //! [poll_batch]

    void handle(const ibv_wc& wc) {
        if (wc.wr_id != kReceiveWrId) {
            send_completed(wc.wr_id);
            return;
        }
        if (wc.byte_len != plan_.size) {
            throw TutorialError(kExitPeer,
                                "received a " + std::to_string(wc.byte_len) +
                                    "-byte message, but -s is " + std::to_string(plan_.size),
                                "both sides must use the same -s");
        }
        if (plan_.check) {
            check_pingpong_message(message_, received_, pattern_id(received_, !plan_.client));
        }
        ++received_;
        refill_receives();
        if (sent_ < total_) { send_next(); }
    }

    // Receives are re-posted in batches: one post_recv call for refill_batch_ of them.
    void refill_receives() {
        if (--posted_receives_ <= plan_.rx_depth - refill_batch_) {
            endpoint_.post_recv(kReceiveWrId, 0, plan_.size,
                                static_cast<std::size_t>(plan_.rx_depth - posted_receives_));
            posted_receives_ = plan_.rx_depth;
        }
    }

    // A signaled send completed: it and every unsignaled send before it are done.
    void send_completed(std::uint64_t wr_id) {
        completed_sends_ = static_cast<long long>(wr_id) + 1;
        in_flight_sends_ = sent_ - completed_sends_;  // sends still in flight
    }

    void send_next() {
        send_times_.push_back(Clock::now());
        if (plan_.check) { fill_pattern(message_, pattern_id(sent_, plan_.client)); }
        wait_for_send_queue_room();
        endpoint_.post_send(static_cast<std::uint64_t>(sent_), 0, plan_.size, wants_signal());
        ++sent_;
        ++in_flight_sends_;
    }

    // The send queue holds tx_depth requests; unsignaled ones are freed by a later signaled
    // completion, so wait for one before the queue can overflow.
    void wait_for_send_queue_room() {
        while (in_flight_sends_ >= plan_.tx_depth) {
            ibv_wc wc{};
            if (endpoint_.try_poll(std::span(&wc, 1)) == 1) {
                handle(wc);  // a send's: the peer sends its next message only after this one
            } else if (++idle_polls_ % 4096 == 0) {
                check_idle();
            }
        }
    }

    // Every signal_every-th send, and the last, asks for a completion.
    [[nodiscard]] bool wants_signal() const {
        return (sent_ + 1) % signal_every_ == 0 || sent_ + 1 == total_;
    }

    //! [probe]
    // Nothing for --timeout seconds. RC has no "peer gone" event: a side that only waits for a
    // receive would wait for ever. So we probe: one more send. If the peer's QP is gone it is not
    // acknowledged, and after the retries it fails with IBV_WC_RETRY_EXC_ERR (a
    // WorkCompletionError); an acknowledged probe means the peer's program is alive but stuck.
    void check_idle() {
        throw_if_stopped();
        if (Clock::now() - last_progress_ < plan_.timeout) { return; }
        const std::string waited =
            "nothing from the peer for " + std::to_string(plan_.timeout.count()) + " s (after " +
            std::to_string(received_) + " of " + std::to_string(total_) + " messages)";
        std::fprintf(stderr, "%s: %s; probing its QP\n", kProgram, waited.c_str());
        try {
            endpoint_.post_send(kProbeWrId, 0, 0);
            (void)endpoint_.poll_completion(kProbeWrId, std::chrono::seconds(5));
        } catch (const WorkCompletionError&) {
            throw;  // its status says what happened to the peer
        } catch (const TutorialError& e) {
            if (e.exit_code() != kExitTimeout) {
                throw;  // interrupted
            }
            throw TutorialError(kExitTimeout, waited, "is the peer still running?");
        } catch (const std::system_error&) {  // the send queue is full: no room for a probe
            throw TutorialError(kExitTimeout, waited, "is the peer still running?");
        }
        throw TutorialError(kExitTimeout, waited,
                            "its QP acknowledged a probe, so the peer's program is alive but stuck "
                            "(or stopped)");
    }
    //! [probe]

    RDMAEndpoint& endpoint_;
    const PingPongPlan& plan_;
    const long long signal_every_;
    const long long total_;
    // Receives are re-posted 16 at a time (fewer when -r is small): often enough that one refill is
    // a short pause, and never 250 at once, which shows in the latency's tail.
    static constexpr int kRefillBatch = 16;
    const int refill_batch_;
    long long sent_ = 0;
    long long received_ = 0;
    long long completed_sends_ = 0;
    long long in_flight_sends_ = 0;
    int posted_receives_;
    long long idle_polls_ = 0;
    Clock::time_point last_progress_;
    std::vector<Clock::time_point> send_times_;
    std::span<std::byte> message_;
    std::array<ibv_wc, 16> completions_{};
};

}  // namespace tutorial
