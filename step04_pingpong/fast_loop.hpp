// The optimised ping-pong loop: the plain loop's traffic, with four optimisations, each named.
#pragma once

#include "errors.hpp"
#include "pingpong.hpp"
#include "resources.hpp"
#include "tcp.hpp"
#include "wc_status.hpp"

#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <system_error>
#include <vector>

namespace tutorial {

//! [pingpong_loop]
// The traffic of ibv_rc_pingpong: the client sends first; each side sends its next message as
// soon as the peer's has arrived, `warmup + iters` times each way. Only every signal_every-th
// send asks for a completion: the peer's answer already tells us the send arrived.
class PingPong {
  public:
    PingPong(const Resources& resources, const PingPongPlan& plan)
        : resources_(resources),
          plan_(plan),
          signal_every_(std::max(1, plan.tx_depth / 2)),
          total_(plan.warmup + plan.iters),
          end_(total_),
          refill_batch_(std::max(1, std::min(kRefillBatch, plan.rx_depth / 2))),
          posted_receives_(plan.rx_depth) {
        send_times_.reserve(static_cast<std::size_t>(plan.iters));
    }

    [[nodiscard]] PingPongResult run() {
        if (plan_.client) { send_next(); }
        last_progress_ = Clock::now();
        // Like ibv_rc_pingpong, wait for our last send's completion too: destroying the QP
        // earlier could drop that message before it left.
        while (received_ < end_ || completed_sends_ < end_) { poll_batch(); }
        if (end_ < total_) { throw peer_ended_early(plan_.client, end_, total_); }
        return result_from(send_times_);
    }
    //! [pingpong_loop]

  private:
    //! [batched_polling]
    // Batched polling: one ibv_poll_cq takes up to 16 completions, so a busy CQ costs one call
    // (one lock, one read of the queue's producer index) per batch instead of per completion.
    void poll_batch() {
        const int n = ibv_poll_cq(resources_.cq.get(), static_cast<int>(completions_.size()),
                                  completions_.data());
        if (n < 0) { throw std::system_error(EIO, std::generic_category(), "ibv_poll_cq"); }
        if (n == 0) {
            if (++idle_polls_ % 4096 == 0) { check_idle(); }
            return;
        }
        idle_polls_ = 0;
        last_progress_ = Clock::now();
        // Send completions first. The CQ does not order a send's completion before the
        // peer's answer to it; handled in CQ order, a receive's reply could wait for
        // queue room that a send completion later in this very batch already freed.
        for (const bool receives : {false, true}) {
            for (int i = 0; i < n; ++i) {
                const ibv_wc& wc = completions_[static_cast<std::size_t>(i)];
                if ((wc.wr_id == kReceiveWrId) == receives) { handle(wc); }
            }
        }
    }
    //! [batched_polling]

    //! [handle]
    void handle(const ibv_wc& wc) {
        if (wc.status != IBV_WC_SUCCESS) { throw_wc_error(wc, wc.wr_id == kReceiveWrId); }
        if (wc.wr_id != kReceiveWrId) {
            send_completed(wc.wr_id);
            return;
        }
        check_received(resources_, plan_, wc, received_);
        ++received_;
        refill_receives();
        if (is_last_message(wc) && received_ < total_) {
            end_ = received_;  // the peer has sent its last message
            if (sent_ >= end_) {
                throw peer_ended_early(plan_.client, end_, total_);  // we owe it no answer
            }
        }
        if (sent_ < end_) { send_next(); }
    }
    //! [handle]

    //! [batched_refill]
    // Batched receive refills: receives are re-posted 16 at a time (fewer when -r is small) as
    // one chained list in one ibv_post_recv: one call and one doorbell per 16 messages.
    // ibv_rc_pingpong waits until one receive is left, then re-posts rx_depth - 1 (499 by
    // default), one ibv_post_recv each: so long a refill shows in the latency's tail.
    static constexpr int kRefillBatch = 16;

    void refill_receives() {
        if (--posted_receives_ <= plan_.rx_depth - refill_batch_) {
            post_receives(resources_, plan_.size, plan_.rx_depth - posted_receives_);
            posted_receives_ = plan_.rx_depth;
        }
    }
    //! [batched_refill]

    //! [selective_signaling]
    // Selective signaling: only every tx_depth/2-th send (and the last) asks for a completion.
    // The peer's answer already proves a send arrived; the one signaled completion frees the
    // send-queue slots of the unsignaled sends before it, and the CQ has half the entries to
    // poll. A failed send still completes, with its error, signaled or not.
    [[nodiscard]] bool wants_signal() const {
        return (sent_ + 1) % signal_every_ == 0 || sent_ + 1 == end_;
    }

    // A signaled send completed: it and every unsignaled send before it are done.
    void send_completed(std::uint64_t wr_id) {
        completed_sends_ = static_cast<long long>(wr_id) + 1;
        in_flight_sends_ = sent_ - completed_sends_;  // sends still in flight
    }

    // The send queue holds tx_depth requests; unsignaled ones are freed by a later signaled
    // completion, so wait for one before the queue can overflow.
    void wait_for_send_queue_room() {
        while (in_flight_sends_ >= plan_.tx_depth) {
            ibv_wc wc{};
            const int n = ibv_poll_cq(resources_.cq.get(), 1, &wc);
            if (n < 0) { throw std::system_error(EIO, std::generic_category(), "ibv_poll_cq"); }
            if (n == 1) {
                handle(wc);  // a send's: the peer sends its next message only after this one
            } else if (++idle_polls_ % 4096 == 0) {
                check_idle();
            }
        }
    }
    //! [selective_signaling]

    //! [inline_send]
    // Inline sends: when the message fits the QP's max_inline_data, ibv_post_send copies it
    // into the work request itself. The NIC then need not read our buffer by DMA (one round
    // trip over PCIe fewer per message), and the lkey is not checked.
    [[nodiscard]] unsigned inline_flag() const { return plan_.inline_send ? IBV_SEND_INLINE : 0; }
    //! [inline_send]

    //! [send_next]
    void send_next() {
        if (sent_ >= plan_.warmup) { send_times_.push_back(Clock::now()); }
        if (plan_.check) {
            fill_pattern(std::span(resources_.buffer.get(), plan_.size),
                         pattern_id(sent_, plan_.client));
        }
        wait_for_send_queue_room();
        ibv_sge sge{};
        sge.addr = reinterpret_cast<std::uintptr_t>(resources_.buffer.get());
        sge.length = static_cast<std::uint32_t>(plan_.size);
        sge.lkey = resources_.mr->lkey;
        ibv_send_wr wr{};
        wr.wr_id = static_cast<std::uint64_t>(sent_);
        wr.sg_list = &sge;
        wr.num_sge = 1;
        mark_if_last(wr, sent_, total_);
        wr.send_flags = (wants_signal() ? IBV_SEND_SIGNALED : 0) | inline_flag();
        ibv_send_wr* bad = nullptr;
        if (const int rc = ibv_post_send(resources_.qp.get(), &wr, &bad); rc != 0) {
            throw std::system_error(rc, std::generic_category(), "ibv_post_send");
        }
        ++sent_;
        ++in_flight_sends_;
    }
    //! [send_next]

    //! [check_idle]
    // Nothing for --timeout seconds. RC has no "peer gone" event: a side that only waits for a
    // receive would wait for ever. So we probe: one more send. If the peer's QP is gone it is not
    // acknowledged, and after the retries it fails with IBV_WC_RETRY_EXC_ERR.
    void check_idle() {
        throw_if_stopped();
        if (Clock::now() - last_progress_ < plan_.timeout) { return; }
        const std::string waited =
            "nothing from the peer for " + std::to_string(plan_.timeout.count()) + " s (after " +
            std::to_string(received_) + " of " + std::to_string(total_) + " messages)";
        std::fprintf(stderr, "%s: %s; probing its QP\n", kProgram, waited.c_str());
        ibv_sge sge{};
        sge.addr = reinterpret_cast<std::uintptr_t>(resources_.buffer.get());
        sge.length = 0;
        sge.lkey = resources_.mr->lkey;
        ibv_send_wr wr{};
        wr.wr_id = kProbeWrId;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        ibv_send_wr* bad = nullptr;
        if (ibv_post_send(resources_.qp.get(), &wr, &bad) == 0) {
            const Clock::time_point deadline = Clock::now() + std::chrono::seconds(5);
            while (Clock::now() < deadline) {
                throw_if_stopped();  // Ctrl-C still ends the wait at once
                ibv_wc wc{};
                if (ibv_poll_cq(resources_.cq.get(), 1, &wc) == 1) {
                    if (wc.status != IBV_WC_SUCCESS) {
                        throw_wc_error(wc, wc.wr_id == kReceiveWrId);
                    }
                    if (wc.wr_id == kProbeWrId) {
                        throw TutorialError(kExitTimeout, waited,
                                            "its QP acknowledged a probe, so the peer's program "
                                            "is alive but stuck (or stopped)");
                    }
                }
            }
        }
        throw TutorialError(kExitTimeout, waited, "is the peer still running?");
    }
    //! [check_idle]

    const Resources& resources_;
    const PingPongPlan& plan_;
    const long long signal_every_;
    const long long total_;
    long long end_;  // total_, or fewer when the peer's last message came first
    const int refill_batch_;
    long long sent_ = 0;
    long long received_ = 0;
    long long completed_sends_ = 0;
    long long in_flight_sends_ = 0;
    int posted_receives_;
    long long idle_polls_ = 0;
    Clock::time_point last_progress_;
    std::array<ibv_wc, 16> completions_{};
    std::vector<Clock::time_point> send_times_;
};

}  // namespace tutorial
