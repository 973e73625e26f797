// Step 09 unit test: resume only after the drain, against a fake CQ a coroutine destroys.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <array>
#include <coroutine>
#include <cstdint>
#include <deque>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../cq_events.hpp"
#include "../reactor.hpp"
#include "../task.hpp"

namespace {

using tutorial::CqEventTracker;
using tutorial::ReadyQueue;
using tutorial::Task;

// One completion channel + CQ, as service_channel() sees it. "Destroying" it (what a session does
// to its QP and CQ when its coroutine ends) sets a flag; any call after that is a use after free
// in a real program, and is recorded here.
struct FakeCq {
    int queued_events = 1;
    std::deque<ibv_wc> cq;
    bool destroyed = false;
    std::vector<std::string> log;  // every call, and every routing and resumption, in order
    std::vector<std::string> after_destroy;

    void use(const std::string& what) {
        log.push_back(what);
        if (destroyed) { after_destroy.push_back(what); }
    }
    bool get_event() {
        use("get_event");
        return queued_events-- > 0;
    }
    void request_notify() { use("arm"); }
    int poll(std::span<ibv_wc> out) {
        use("poll");
        int n = 0;
        while (!cq.empty() && n < static_cast<int>(out.size())) {
            out[static_cast<std::size_t>(n++)] = cq.front();
            cq.pop_front();
        }
        return n;
    }
    void ack(std::uint32_t) { use("ack"); }
};

ibv_wc completion(std::uint64_t wr_id) {
    ibv_wc wc{};
    wc.wr_id = wr_id;
    wc.status = IBV_WC_SUCCESS;
    return wc;
}

// Waits for completion `id`: what each co_await of the AsyncEndpoint does, reduced to its core.
struct WaitFor {
    std::coroutine_handle<>& slot;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) noexcept { slot = h; }
    void await_resume() const noexcept {}
};

// Coroutine 0 is the connection that ends on its completion: it destroys the CQ. Coroutine 1
// waits for a completion that sits in the same CQ, drained in the same pass.
Task<void> ends_and_destroys(FakeCq& fake, std::coroutine_handle<>& slot) {
    co_await WaitFor{slot};
    fake.log.emplace_back("resume 0");  // a resumption is logged, not a use of the CQ
    fake.destroyed = true;
}

Task<void> keeps_going(FakeCq& fake, std::coroutine_handle<>& slot) {
    co_await WaitFor{slot};
    fake.log.emplace_back("resume 1");
}

// The route: the endpoint's state for each wr_id, touched only while the CQ is alive.
struct Fixture {
    FakeCq fake;
    std::array<std::coroutine_handle<>, 2> waiting{};
    CqEventTracker tracker{1};
    ReadyQueue ready{8};
    Task<void> first = ends_and_destroys(fake, waiting[0]);
    Task<void> second = keeps_going(fake, waiting[1]);

    Fixture() {
        first.handle().resume();  // both now wait for their completion
        second.handle().resume();
        fake.cq = {completion(0), completion(1), completion(1)};  // a third that wakes nobody
    }
    std::coroutine_handle<> route(const ibv_wc& wc) {
        fake.use("route " + std::to_string(wc.wr_id));
        return std::exchange(waiting[wc.wr_id], {});
    }
    // One channel's part of a reactor round: drain and route, THEN resume.
    template <std::size_t N>
    std::uint64_t service_then_resume(std::array<ibv_wc, N>& batch) {
        const std::uint64_t completions = tutorial::service_and_route(
            fake, tracker, std::span<ibv_wc>(batch), [&](const ibv_wc& wc) { return route(wc); },
            ready);
        ready.resume_all();
        return completions;
    }
};

// With a batch of one completion, the drain polls again after each: the test sees any poll that
// comes after a resumption inside the drain.
TEST(DrainOrder, NothingTouchesTheCqAfterAResumedCoroutineDestroyedIt) {
    Fixture f;
    std::array<ibv_wc, 1> batch{};
    const std::uint64_t completions = f.service_then_resume(batch);
    EXPECT_TRUE(f.fake.after_destroy.empty())
        << "the CQ was used after the coroutine that destroyed it was resumed: "
        << ::testing::PrintToString(f.fake.after_destroy)
        << "; full order: " << ::testing::PrintToString(f.fake.log);
    EXPECT_EQ(completions, 3U);
    EXPECT_TRUE(f.first.done());
    EXPECT_TRUE(f.second.done());
}

TEST(DrainOrder, EveryCompletionIsRoutedBeforeAnyCoroutineResumes) {
    Fixture f;
    std::array<ibv_wc, 2> batch{};
    (void)f.service_then_resume(batch);
    const std::vector<std::string> expected{"get_event", "arm",     "poll", "route 0",  "route 1",
                                            "poll",      "route 1", "ack",  "resume 0", "resume 1"};
    EXPECT_EQ(f.fake.log, expected);
}

// The same rule through the reactor: a connection's channel (a pipe stands in for its fd) is
// serviced in the routing phase, and the reactor resumes only after that phase.
class FakeConnection final : public tutorial::ChannelClient {
  public:
    explicit FakeConnection(Fixture& f) : f_(f) {
        if (::pipe(pipe_.data()) != 0) { throw std::runtime_error("pipe"); }
        (void)!::write(pipe_[1], "x", 1);  // the channel is readable: an event is queued
    }
    ~FakeConnection() {
        ::close(pipe_[0]);
        ::close(pipe_[1]);
    }
    FakeConnection(const FakeConnection&) = delete;
    FakeConnection& operator=(const FakeConnection&) = delete;
    [[nodiscard]] int channel_fd() const noexcept override { return pipe_[0]; }
    std::uint64_t on_channel_readable(ReadyQueue& ready) override {
        char byte = 0;
        (void)!::read(pipe_[0], &byte, 1);
        std::array<ibv_wc, 1> batch{};
        return tutorial::service_and_route(
            f_.fake, f_.tracker, std::span<ibv_wc>(batch),
            [&](const ibv_wc& wc) { return f_.route(wc); }, ready);
    }
    std::uint64_t safety_net(ReadyQueue&) override { return 0; }

  private:
    Fixture& f_;
    std::array<int, 2> pipe_{};
};

TEST(DrainOrder, TheReactorResumesAfterTheRoutingPhase) {
    Fixture f;
    tutorial::Reactor reactor(std::chrono::milliseconds(100));
    FakeConnection connection(f);
    reactor.add_channel(connection);
    reactor.run_until([&] { return f.first.done() && f.second.done(); });
    reactor.remove_channel(connection);
    EXPECT_TRUE(f.fake.after_destroy.empty())
        << "the CQ was used after the coroutine that destroyed it was resumed: "
        << ::testing::PrintToString(f.fake.after_destroy)
        << "; full order: " << ::testing::PrintToString(f.fake.log);
}

}  // namespace
