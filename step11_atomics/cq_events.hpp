// Step 06: the completion-event bookkeeping (get, re-arm, drain, ack), free of any device.
#pragma once

#include <cassert>
#include <cstdint>
#include <span>
#include <stdexcept>

namespace tutorial {

//! [tracker]
/// Counts the completion events of ONE completion queue and decides when to
/// acknowledge them and whether the CQ must be re-armed before it is drained.
/// It touches no device: the protocol below drives it, and unit tests drive it
/// directly.
class CqEventTracker {
  public:
    /// ack_batch: acknowledge at least every ack_batch events (1 = every event).
    explicit CqEventTracker(std::uint32_t ack_batch) : ack_batch_(ack_batch == 0 ? 1 : ack_batch) {}

    /// ibv_get_cq_event() returned an event for this CQ.
    void on_event() {
        ++received_;
        ++unacked_;
        needs_rearm_ = true;
    }
    /// ibv_req_notify_cq() succeeded.
    void on_rearm() { needs_rearm_ = false; }
    /// True while an event was taken but the CQ was not re-armed since: draining
    /// now could lose the wake-up for a completion that lands after the drain.
    [[nodiscard]] bool needs_rearm() const { return needs_rearm_; }

    /// A drain (poll until empty) after an event found `found` completions.
    void on_drain(std::uint64_t found) {
        assert(!needs_rearm_ && "re-arm the CQ before draining it");
        if (found == 0) {
            ++empty_drains_;  // legal: the CQE was reaped by an earlier drain
        }
        completions_ += found;
    }
    /// The safety net found `found` completions that no event announced (yet).
    void on_safety_net_poll(std::uint64_t found) {
        if (found > 0) {
            ++safety_net_finds_;
            completions_ += found;
        }
    }

    /// How many events to pass to ibv_ack_cq_events() now: 0 until ack_batch
    /// events are waiting. Call on_acked() after acknowledging them.
    [[nodiscard]] std::uint32_t acks_due() const { return unacked_ >= ack_batch_ ? unacked_ : 0; }
    /// Everything not yet acknowledged: what must be acked before ibv_destroy_cq().
    [[nodiscard]] std::uint32_t acks_outstanding() const { return unacked_; }
    void on_acked(std::uint32_t count) {
        if (count > unacked_) {
            throw std::logic_error("acknowledging more CQ events than were received");
        }
        unacked_ -= count;
        acked_ += count;
    }

    /// Marks everything outstanding as acknowledged and returns how many that
    /// was: the count for the final ibv_ack_cq_events before ibv_destroy_cq.
    [[nodiscard]] std::uint32_t take_all_acks() noexcept {
        const std::uint32_t left = unacked_;
        unacked_ = 0;
        acked_ += left;
        return left;
    }

    [[nodiscard]] std::uint64_t received() const { return received_; }
    [[nodiscard]] std::uint64_t acked() const { return acked_; }
    [[nodiscard]] std::uint64_t empty_drains() const { return empty_drains_; }
    [[nodiscard]] std::uint64_t completions() const { return completions_; }
    [[nodiscard]] std::uint64_t safety_net_finds() const { return safety_net_finds_; }
    /// The invariant that lets ibv_destroy_cq() return: every event acked.
    [[nodiscard]] bool balanced() const { return acked_ == received_ && unacked_ == 0; }

  private:
    std::uint32_t ack_batch_;
    std::uint32_t unacked_ = 0;
    bool needs_rearm_ = false;
    std::uint64_t received_ = 0;
    std::uint64_t acked_ = 0;
    std::uint64_t empty_drains_ = 0;
    std::uint64_t completions_ = 0;
    std::uint64_t safety_net_finds_ = 0;
};
//! [tracker]

/// Polls until the CQ is empty, handing each work completion to `on_completion`; returns how
/// many there were.
template <typename Source, typename W, typename OnCompletion>
std::uint64_t drain(Source& source, std::span<W> batch, OnCompletion& on_completion) {
    std::uint64_t found = 0;
    for (;;) {
        const int n = source.poll(batch);
        for (int i = 0; i < n; ++i) { on_completion(batch[static_cast<std::size_t>(i)]); }
        found += static_cast<std::uint64_t>(n);
        if (n < static_cast<int>(batch.size())) { return found; }
    }
}

//! [protocol]
/// The whole protocol for a readable completion channel whose fd is O_NONBLOCK
/// and that serves one CQ. `Source` is the thin layer over the verbs:
///   bool get_event()             ibv_get_cq_event(): true for an event, false on EAGAIN
///   void request_notify()        ibv_req_notify_cq(cq, 0)
///   int  poll(std::span<W>)      ibv_poll_cq(): how many completions it wrote
///   void ack(std::uint32_t n)    ibv_ack_cq_events(cq, n)
/// `on_completion(const W&)` handles each work completion (it may post more work). Returns how
/// many there were.
template <typename Source, typename W, typename OnCompletion>
std::uint64_t service_channel(Source& source, CqEventTracker& tracker, std::span<W> batch,
                              OnCompletion&& on_completion) {
    // 1. Take one event: an armed CQ raises one, then no more until step 2 re-arms it. (After a
    //    safety-net re-arm a second can wait: the fd stays readable, and the next pass takes it.)
    if (!source.get_event()) {
        return 0;  // a spurious wake-up: nothing to re-arm, nothing to ack
    }
    tracker.on_event();
    // 2. Re-arm BEFORE draining: a CQE that lands after the last poll then
    //    raises a new event instead of sleeping in the CQ unnoticed.
    source.request_notify();
    tracker.on_rearm();
    // 3. Drain until empty. Finding nothing is legal (an earlier drain took it).
    const std::uint64_t found = drain(source, batch, on_completion);
    tracker.on_drain(found);
    // 4. Acknowledge in batches: ibv_ack_cq_events takes a mutex.
    if (const std::uint32_t due = tracker.acks_due(); due > 0) {
        source.ack(due);
        tracker.on_acked(due);
    }
    return found;
}

/// Before ibv_destroy_cq(): acknowledge whatever is still outstanding, or the
/// destroy blocks forever waiting for it.
template <typename Source>
void ack_all_before_destroy(Source& source, CqEventTracker& tracker) noexcept {
    if (const std::uint32_t left = tracker.take_all_acks(); left > 0) {
        source.ack(left);  // must not throw: it runs in destructors
    }
    assert(tracker.balanced());
}
//! [protocol]

//! [safety_net_poll]
/// The safety net for a CQ that no event woke: the event loop's wait timed out, or the
/// connection was quiet for a whole safety period. Events should have woken us, so it should find
/// nothing; it re-arms, then drains, so that even after a lost wake-up the next completion raises
/// an event. Returns how many completions it handed to `on_completion`.
template <typename Source, typename W, typename OnCompletion>
std::uint64_t safety_net_poll(Source& source, CqEventTracker& tracker, std::span<W> batch,
                              OnCompletion&& on_completion) {
    source.request_notify();
    tracker.on_rearm();
    const std::uint64_t found = drain(source, batch, on_completion);
    tracker.on_safety_net_poll(found);
    return found;
}
//! [safety_net_poll]

}  // namespace tutorial
