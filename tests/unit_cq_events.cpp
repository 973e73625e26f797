// Unit tests of cq_events.hpp, which step06 and step09 carry byte-identical: the event
// bookkeeping against a fake event source (no device, no verbs faked). tests/CMakeLists.txt builds
// this file twice per step, against that step's copy: as the program is (stepNN_unit_cq_events),
// and against the copy that wakeup_classifier.patch gives the late/lost classifier the flood's
// build uses (stepNN_unit_wakeups, with -DTUTORIAL_CLASSIFY_WAKEUPS for this file's own tests).
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <string>
#include <vector>

#include "cq_events.hpp"

namespace {

using tutorial::CqEventTracker;

struct FakeCompletion {
    int id = 0;
};

// Plays the part of one completion channel + CQ, and records the order of calls.
struct FakeChannel {
    int queued_events = 0;
    std::deque<FakeCompletion> cq;
    std::vector<std::string> calls;
    std::uint64_t acked = 0;
    bool armed = false;
    // Completions that "arrive" right after the re-arm, as on a busy link.
    std::vector<FakeCompletion> arrive_after_rearm;

    bool get_event() {
        if (queued_events == 0) {
            calls.push_back("EAGAIN");
            return false;
        }
        --queued_events;
        calls.push_back("get");
        return true;
    }
    void request_notify() {
        calls.push_back("arm");
        armed = true;
        for (const auto& c : arrive_after_rearm) {
            cq.push_back(c);
            if (armed) {  // a CQE on an armed CQ raises one event and disarms it
                ++queued_events;
                armed = false;
            }
        }
        arrive_after_rearm.clear();
    }
    int poll(std::span<FakeCompletion> out) {
        int n = 0;
        while (!cq.empty() && n < static_cast<int>(out.size())) {
            out[static_cast<std::size_t>(n++)] = cq.front();
            cq.pop_front();
        }
        calls.push_back("poll" + std::to_string(n));
        return n;
    }
    void ack(std::uint32_t n) {
        calls.push_back("ack" + std::to_string(n));
        acked += n;
    }
};

std::vector<int> run_pass(FakeChannel& ch, CqEventTracker& t, std::size_t batch_size = 4) {
    std::vector<FakeCompletion> batch(batch_size);
    std::vector<int> seen;
    tutorial::service_channel(ch, t, std::span<FakeCompletion>(batch),
                              [&](const FakeCompletion& c) { seen.push_back(c.id); });
    return seen;
}

TEST(CqEventTracker, StartsBalancedAndCountsEvents) {
    CqEventTracker t(8);
    EXPECT_TRUE(t.balanced());
    t.on_event();
    t.on_event();
    EXPECT_EQ(t.received(), 2u);
    EXPECT_FALSE(t.balanced());
    EXPECT_TRUE(t.needs_rearm());
    EXPECT_EQ(t.acks_due(), 0u) << "2 events are below the batch of 8";
    EXPECT_EQ(t.acks_outstanding(), 2u);
}

TEST(CqEventTracker, AcksAreDueAtTheBatchSize) {
    CqEventTracker t(3);
    t.on_event();
    t.on_event();
    EXPECT_EQ(t.acks_due(), 0u);
    t.on_event();
    EXPECT_EQ(t.acks_due(), 3u);
    t.on_acked(3);
    EXPECT_EQ(t.acks_due(), 0u);
    EXPECT_TRUE(t.balanced());
    EXPECT_EQ(t.acked(), 3u);
}

TEST(CqEventTracker, BatchOfZeroMeansAckEveryEvent) {
    CqEventTracker t(0);
    t.on_event();
    EXPECT_EQ(t.acks_due(), 1u);
}

TEST(CqEventTracker, AckingMoreThanReceivedIsAnError) {
    CqEventTracker t(1);
    t.on_event();
    EXPECT_THROW(t.on_acked(2), std::logic_error);
    t.on_acked(1);
    EXPECT_THROW(t.on_acked(1), std::logic_error);
}

TEST(CqEventTracker, RearmClearsTheFlagAndEmptyDrainsAreCounted) {
    CqEventTracker t(1);
    t.on_event();
    t.on_rearm();
    EXPECT_FALSE(t.needs_rearm());
    t.on_drain(0);
    t.on_drain(5);
    EXPECT_EQ(t.empty_drains(), 1u);
    EXPECT_EQ(t.completions(), 5u);
}

TEST(CqEventTracker, SafetyNetCountsOnlyPollsThatFoundWork) {
    CqEventTracker t(1);
    t.on_safety_net_poll(0);
    EXPECT_EQ(t.safety_net_finds(), 0u);
    t.on_safety_net_poll(2);
    EXPECT_EQ(t.safety_net_finds(), 1u);
    EXPECT_EQ(t.completions(), 2u);
}

#ifndef NDEBUG
TEST(CqEventTrackerDeathTest, DrainingBeforeRearmAsserts) {
    CqEventTracker t(1);
    t.on_event();
    EXPECT_DEATH(t.on_drain(1), "re-arm the CQ before draining it");
}
#endif

TEST(ServiceChannel, GetsOneEventThenArmsThenDrainsThenAcks) {
    FakeChannel ch;
    ch.queued_events = 1;
    ch.cq = {{1}, {2}};
    CqEventTracker t(1);
    const auto seen = run_pass(ch, t);
    EXPECT_EQ(seen, (std::vector<int>{1, 2}));
    EXPECT_EQ(ch.calls, (std::vector<std::string>{"get", "arm", "poll2", "ack1"}));
    EXPECT_TRUE(t.balanced());
}

TEST(ServiceChannel, ASecondQueuedEventIsTakenByTheNextPass) {
    // Two events wait only after a re-arm without a read (the safety net's). A pass takes one;
    // the fd stays readable, and the next pass takes the other and drains an empty CQ.
    FakeChannel ch;
    ch.queued_events = 2;
    ch.cq = {{1}};
    CqEventTracker t(16);
    EXPECT_EQ(run_pass(ch, t), (std::vector<int>{1}));
    EXPECT_EQ(ch.queued_events, 1);
    EXPECT_TRUE(run_pass(ch, t).empty());
    EXPECT_EQ(ch.queued_events, 0);
    EXPECT_EQ(ch.calls, (std::vector<std::string>{"get", "arm", "poll1", "get", "arm", "poll0"}));
    EXPECT_EQ(t.empty_drains(), 1u);
    EXPECT_EQ(t.received(), 2u);
}

TEST(ServiceChannel, DrainsEveryCompletionNotOnePerEvent) {
    FakeChannel ch;
    ch.queued_events = 1;
    for (int i = 0; i < 10; ++i) { ch.cq.push_back({i}); }
    CqEventTracker t(16);
    const auto seen = run_pass(ch, t, 4);
    EXPECT_EQ(seen.size(), 10u);
    EXPECT_TRUE(ch.cq.empty());
    EXPECT_EQ(ch.calls, (std::vector<std::string>{"get", "arm", "poll4", "poll4", "poll2"}));
    EXPECT_EQ(t.acks_outstanding(), 1u) << "below the batch: not acked yet";
}

TEST(ServiceChannel, EmptyCqAfterAnEventIsTolerated) {
    FakeChannel ch;
    ch.queued_events = 1;
    CqEventTracker t(1);
    const auto seen = run_pass(ch, t);
    EXPECT_TRUE(seen.empty());
    EXPECT_EQ(t.empty_drains(), 1u);
    EXPECT_EQ(ch.calls, (std::vector<std::string>{"get", "arm", "poll0", "ack1"}));
}

TEST(ServiceChannel, SpuriousWakeupDoesNotArmOrPoll) {
    FakeChannel ch;
    CqEventTracker t(1);
    run_pass(ch, t);
    EXPECT_EQ(ch.calls, (std::vector<std::string>{"EAGAIN"}));
    EXPECT_FALSE(ch.armed);
}

TEST(ServiceChannel, CompletionArrivingAfterRearmIsDrainedAndStillRaisesAnEvent) {
    // The race the ordering exists for: the CQE lands between the re-arm and the
    // drain. The drain takes it now AND an event is queued; the next pass finds
    // an empty CQ, which is legal, and acks that event too.
    FakeChannel ch;
    ch.queued_events = 1;
    ch.arrive_after_rearm = {{7}};
    CqEventTracker t(1);
    EXPECT_EQ(run_pass(ch, t), (std::vector<int>{7}));
    EXPECT_EQ(ch.queued_events, 1);
    EXPECT_TRUE(run_pass(ch, t).empty());
    EXPECT_EQ(t.empty_drains(), 1u);
    EXPECT_EQ(t.received(), 2u);
    EXPECT_TRUE(t.balanced());
}

TEST(ServiceChannel, NoWakeupIsLostOverManyRandomPasses) {
    // Completions arrive at random points; every one is seen exactly once and
    // every event is acked by the end (batch 5, plus the final ack before destroy).
    FakeChannel ch;
    CqEventTracker t(5);
    std::uint32_t seed = 12345;
    auto next = [&] { return seed = seed * 1103515245u + 12345u, (seed >> 16) & 0x7fff; };
    int produced = 0;
    std::vector<int> seen;
    ch.armed = true;  // armed before the first post
    for (int round = 0; round < 2000; ++round) {
        const int arrive = static_cast<int>(next() % 4);
        for (int i = 0; i < arrive; ++i) {
            ch.cq.push_back({produced++});
            if (ch.armed) {
                ++ch.queued_events;
                ch.armed = false;
            }
        }
        if (next() % 3 == 0) { ch.arrive_after_rearm.push_back({produced++}); }
        auto got = run_pass(ch, t, 3);
        seen.insert(seen.end(), got.begin(), got.end());
    }
    // Late arrivals land now; only event-driven passes may reap them.
    for (const auto& c : ch.arrive_after_rearm) {
        ch.cq.push_back(c);
        if (ch.armed) {
            ++ch.queued_events;
            ch.armed = false;
        }
    }
    ch.arrive_after_rearm.clear();
    while (ch.queued_events > 0) {
        auto got = run_pass(ch, t, 3);
        seen.insert(seen.end(), got.begin(), got.end());
    }
    ASSERT_EQ(static_cast<int>(seen.size()), produced);
    std::sort(seen.begin(), seen.end());  // late arrivals are numbered early: compare as a set
    for (int i = 0; i < produced; ++i) { ASSERT_EQ(seen[static_cast<std::size_t>(i)], i); }
    tutorial::ack_all_before_destroy(ch, t);
    EXPECT_TRUE(t.balanced());
    EXPECT_EQ(ch.acked, t.received());
}

TEST(ServiceChannel, AckAllBeforeDestroyAcksTheRemainder) {
    FakeChannel ch;
    ch.queued_events = 3;
    CqEventTracker t(16);
    for (int pass = 0; pass < 3; ++pass) { run_pass(ch, t); }
    EXPECT_EQ(ch.acked, 0u);
    tutorial::ack_all_before_destroy(ch, t);
    EXPECT_EQ(ch.acked, 3u);
    EXPECT_TRUE(t.balanced());
    tutorial::ack_all_before_destroy(ch, t);  // nothing left: no second ack
    EXPECT_EQ(ch.calls.back(), "ack3");
}

TEST(SafetyNetPoll, DrainsMoreThanOneBatch) {
    FakeChannel ch;
    for (int i = 0; i < 9; ++i) { ch.cq.push_back({i}); }
    CqEventTracker t(1);
    std::vector<FakeCompletion> batch(4);
    int n = 0;
    auto count = [&](const FakeCompletion&) { ++n; };
    EXPECT_EQ(tutorial::safety_net_poll(ch, t, std::span<FakeCompletion>(batch), count), 9u);
    EXPECT_EQ(n, 9);
    EXPECT_EQ(t.safety_net_finds(), 1u) << "one find, however many completions";
}

#ifndef TUTORIAL_CLASSIFY_WAKEUPS
TEST(SafetyNetPoll, ReArmsThenDrains) {
    FakeChannel ch;
    ch.cq = {{1}};  // a CQE whose event never came: the CQ stays disarmed unless re-armed
    CqEventTracker t(1);
    std::vector<FakeCompletion> batch(4);
    auto ignore = [](const FakeCompletion&) {};
    EXPECT_EQ(tutorial::safety_net_poll(ch, t, std::span<FakeCompletion>(batch), ignore), 1u);
    EXPECT_EQ(ch.calls, (std::vector<std::string>{"arm", "poll1"}));
    EXPECT_TRUE(ch.armed) << "the next CQE raises an event";
    EXPECT_EQ(t.safety_net_finds(), 1u);
}
#else
// The classifier (wakeup_classifier.hpp): a find does not re-arm, and whether its event follows
// tells a late event from a lost wake-up.
TEST(CqEventTracker, TheEventAfterAFindIsItsLateEvent) {
    CqEventTracker t(1);
    t.on_safety_net_poll(1);  // the sweep took the CQE before its event was queued
    t.wakeups.on_safety_net_find(false);
    t.on_event();  // the event arrives after all, whatever its drain finds
    t.on_rearm();
    t.on_drain(1);
    EXPECT_EQ(t.wakeups.late_events(), 1u);
    EXPECT_EQ(t.wakeups.lost_wakeups(), 0u);
    EXPECT_FALSE(t.wakeups.rearm_before_safety_net()) << "nothing is owed any more: no re-arm";
    t.on_event();  // a later event is not blamed on the old find
    EXPECT_EQ(t.wakeups.late_events(), 1u);
}

TEST(CqEventTracker, AFindWhoseEventNeverComesIsLostAndTheNextPassReArms) {
    CqEventTracker t(1);
    t.on_safety_net_poll(1);
    t.wakeups.on_safety_net_find(false);
    EXPECT_EQ(t.wakeups.lost_wakeups(), 1u) << "still owed: counted, as an upper bound";
    EXPECT_TRUE(t.wakeups.rearm_before_safety_net())
        << "a whole safety period without the event: re-arm";
    EXPECT_EQ(t.wakeups.lost_wakeups(), 1u);
    t.on_rearm();
    t.on_safety_net_poll(1);  // it arrived while the CQ was disarmed
    t.wakeups.on_safety_net_find(/*rearmed=*/true);
    EXPECT_FALSE(t.wakeups.rearm_before_safety_net()) << "after a re-arm, nothing is owed";
    t.on_event();
    EXPECT_EQ(t.wakeups.late_events(), 0u);
    EXPECT_EQ(t.wakeups.lost_wakeups(), 1u);
    EXPECT_EQ(t.safety_net_finds(), 2u);
}

TEST(SafetyNetPoll, AFindDoesNotReArmAndItsEventCountsAsLate) {
    FakeChannel ch;
    ch.cq = {{1}};  // the CQE disarmed the CQ; its event is still on its way
    CqEventTracker t(1);
    std::vector<FakeCompletion> batch(4);
    std::vector<int> seen;
    auto keep = [&](const FakeCompletion& c) { seen.push_back(c.id); };
    EXPECT_EQ(tutorial::safety_net_poll(ch, t, std::span<FakeCompletion>(batch), keep), 1u);
    EXPECT_EQ(ch.calls, (std::vector<std::string>{"poll1"})) << "no arm: the event is owed";
    ch.queued_events = 1;  // it arrives
    EXPECT_TRUE(run_pass(ch, t).empty());
    EXPECT_EQ(t.wakeups.late_events(), 1u);
    EXPECT_EQ(t.wakeups.lost_wakeups(), 0u);
    EXPECT_EQ(seen, (std::vector<int>{1}));
}

TEST(SafetyNetPoll, WhenTheEventNeverComesTheNextPassArmsBeforePolling) {
    FakeChannel ch;
    ch.cq = {{1}};
    CqEventTracker t(1);
    std::vector<FakeCompletion> batch(4);
    auto ignore = [](const FakeCompletion&) {};
    (void)tutorial::safety_net_poll(ch, t, std::span<FakeCompletion>(batch), ignore);
    ch.cq.push_back({2});  // the CQ is disarmed: no event for this one either
    ch.calls.clear();
    EXPECT_EQ(tutorial::safety_net_poll(ch, t, std::span<FakeCompletion>(batch), ignore), 1u);
    EXPECT_EQ(ch.calls, (std::vector<std::string>{"arm", "poll1"}));
    EXPECT_EQ(t.wakeups.lost_wakeups(), 1u);
    EXPECT_EQ(t.wakeups.late_events(), 0u);
    EXPECT_TRUE(ch.armed) << "armed again: the next CQE raises an event";
}

TEST(SafetyNetPoll, CountsExactlyTheEventsTheDriverDropped) {
    // A driver that drops some events and delivers others one round late. Each
    // round, the loop services the channel when an event is queued (epoll says
    // readable) and runs the safety net otherwise (epoll_wait timed out). Every
    // completion is seen once, lost equals dropped, and every event is acked.
    FakeChannel ch;
    CqEventTracker t(4);
    std::uint32_t seed = 777;
    auto next = [&] { return seed = seed * 1103515245u + 12345u, (seed >> 16) & 0x7fff; };
    ch.armed = true;
    int produced = 0;
    std::uint64_t dropped = 0, delayed = 0;
    bool in_flight = false;
    auto arrive = [&] {
        ch.cq.push_back({produced++});
        if (ch.armed) {
            ch.armed = false;
            const auto r = next() % 10;
            if (r == 0) {
                ++dropped;
            } else if (r < 4) {
                in_flight = true;
                ++delayed;
            } else {
                ++ch.queued_events;
            }
        }
    };
    std::vector<FakeCompletion> batch(3);
    std::vector<int> seen;
    auto keep = [&](const FakeCompletion& c) { seen.push_back(c.id); };
    auto round = [&](int arrivals) {
        if (in_flight) {  // last round's late event is delivered now
            ++ch.queued_events;
            in_flight = false;
        }
        for (int i = 0; i < arrivals; ++i) { arrive(); }
        if (ch.queued_events > 0) {
            tutorial::service_channel(ch, t, std::span<FakeCompletion>(batch), keep);
        } else {
            (void)tutorial::safety_net_poll(ch, t, std::span<FakeCompletion>(batch), keep);
        }
    };
    for (int r = 0; r < 3000; ++r) { round(static_cast<int>(next() % 3)); }
    for (int r = 0; r < 4; ++r) { round(0); }
    ASSERT_EQ(static_cast<int>(seen.size()), produced);
    std::sort(seen.begin(), seen.end());
    for (int i = 0; i < produced; ++i) { ASSERT_EQ(seen[static_cast<std::size_t>(i)], i); }
    EXPECT_GT(dropped, 10u);
    EXPECT_EQ(t.wakeups.lost_wakeups(), dropped);
    EXPECT_GT(t.wakeups.late_events(), 0u);
    EXPECT_LE(t.wakeups.late_events(), delayed);
    tutorial::ack_all_before_destroy(ch, t);
    EXPECT_EQ(ch.acked, t.received());
}

#endif

}  // namespace
