// Test build only (the flood's program and the unit test): tells a late completion event from a
// lost wake-up. wakeup_classifier.patch adds it to a copy of a step's cq_events.hpp.
#pragma once

#include <cstdint>
#include <cstdio>
#include <utility>

namespace tutorial {

/// One CQ's safety-net finds, classified. A find does NOT re-arm the CQ: the CQE that was found
/// disarmed it, so the next event on the channel can only be the one that CQE owes, and its
/// arrival tells a late event (the CQE was visible before the kernel queued its event) from a
/// lost one. Only when the previous find's event has not come by the next safety-net poll, a
/// whole safety period later, is that wake-up counted as lost and the CQ re-armed first: a lost
/// wake-up then costs two safety periods instead of one, the price of telling the two apart.
/// The destructor prints one line, "cq wake-ups: late events N, lost wake-ups N", for the flood.
class WakeupClassifier {
  public:
    WakeupClassifier() = default;
    // Movable, as the endpoint that holds it: only the object moved to prints.
    WakeupClassifier(WakeupClassifier&& other) noexcept { *this = std::move(other); }
    WakeupClassifier& operator=(WakeupClassifier&& other) noexcept {
        late_events_ = other.late_events_;
        lost_wakeups_ = other.lost_wakeups_;
        suspect_ = other.suspect_;
        other.moved_from_ = true;
        return *this;
    }
    ~WakeupClassifier() {
        if (!moved_from_) {
            std::printf("cq wake-ups: late events %llu, lost wake-ups %llu\n",
                        static_cast<unsigned long long>(late_events()),
                        static_cast<unsigned long long>(lost_wakeups()));
        }
    }

    /// ibv_get_cq_event() returned an event: the owed one, if a find is waiting for it.
    void on_event() noexcept {
        if (suspect_) {
            suspect_ = false;
            ++late_events_;
        }
    }
    /// The safety net is about to poll: true when it must re-arm first, because its previous
    /// find's event never came (a lost wake-up; the CQE behind it disarmed the CQ).
    [[nodiscard]] bool rearm_before_safety_net() noexcept {
        if (!suspect_) { return false; }
        suspect_ = false;
        ++lost_wakeups_;
        return true;
    }
    /// The safety net found completions. Unless it had just re-armed, the first of them disarmed
    /// an armed CQ, so exactly one event is owed.
    void on_safety_net_find(bool rearmed) noexcept { suspect_ = !rearmed; }

    [[nodiscard]] std::uint64_t late_events() const noexcept { return late_events_; }
    /// A find whose event is still owed counts too: an upper bound at the end of a run.
    [[nodiscard]] std::uint64_t lost_wakeups() const noexcept {
        return lost_wakeups_ + (suspect_ ? 1 : 0);
    }

  private:
    std::uint64_t late_events_ = 0;
    std::uint64_t lost_wakeups_ = 0;
    bool suspect_ = false;  // a safety-net find whose event is still owed
    bool moved_from_ = false;
};

}  // namespace tutorial
