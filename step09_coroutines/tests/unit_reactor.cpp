// Step 09 unit tests: the reactor over pipes, timers, signals and fake channels.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../async_endpoint.hpp"
#include "../reactor.hpp"
#include "../task.hpp"

namespace {

using namespace std::chrono_literals;
using tutorial::CancelledError;
using tutorial::Clock;
using tutorial::epoll_timeout_ms;
using tutorial::FdWatch;
using tutorial::Reactor;
using tutorial::ReadyQueue;
using tutorial::Task;

constexpr auto kSafety = 20ms;

struct Pipe {
    std::array<int, 2> fd{-1, -1};
    Pipe() {
        if (::pipe2(fd.data(), O_NONBLOCK | O_CLOEXEC) != 0) { throw std::runtime_error("pipe2"); }
    }
    ~Pipe() {
        ::close(fd[0]);
        ::close(fd[1]);
    }
    Pipe(const Pipe&) = delete;
    Pipe& operator=(const Pipe&) = delete;
    void put() const { (void)!::write(fd[1], "x", 1); }
};

// A pipe and the right to await its read end, in the order a program declares them: the owner
// of the fd first, its FdWatch after it.
struct WatchedPipe {
    explicit WatchedPipe(Reactor& reactor) : watch(reactor, pipe.fd[0]) {}
    Pipe pipe;
    FdWatch watch;
};

// One round of the reactor: wait, route, resume.
void one_round(Reactor& reactor) {
    int rounds = 0;
    reactor.run_until([&] { return rounds++ == 1; });
}

// Runs rounds until the task is done, at most `limit` rounds.
void run(Reactor& reactor, Task<void>& task, int limit = 1000) {
    reactor.spawn(task);
    int rounds = 0;
    reactor.run_until([&] { return task.done() || ++rounds > limit; });
    ASSERT_TRUE(task.done()) << "the task did not finish within " << limit << " rounds";
}

// ---------------------------------------------------------------- ReadyQueue

// Suspends until resumed, then logs its id and suspends again (the next resume_all() runs it).
struct Logger {
    struct promise_type {
        Logger get_return_object() {
            return {std::coroutine_handle<promise_type>::from_promise(*this)};
        }
        std::suspend_always initial_suspend() noexcept { return {}; }
        std::suspend_always final_suspend() noexcept { return {}; }
        void return_void() noexcept {}
        void unhandled_exception() { std::terminate(); }
    };
    std::coroutine_handle<promise_type> handle;
};

Logger log_id(int id, std::vector<int>& log) {
    for (;;) {
        log.push_back(id);
        co_await std::suspend_always{};
    }
}

TEST(ReadyQueue, IsFifoAndSkipsForgottenEntries) {
    ReadyQueue q(2);
    std::vector<int> log;
    const Logger l0 = log_id(0, log);
    const Logger l1 = log_id(1, log);
    q.push(l1.handle);
    q.push(l0.handle);
    q.resume_all();
    EXPECT_EQ(log, (std::vector<int>{1, 0}));
    EXPECT_TRUE(q.empty());
    q.push(l0.handle);
    q.push(l1.handle);
    q.forget(l0.handle);
    EXPECT_FALSE(q.empty());
    q.resume_all();  // skips the forgotten entry
    EXPECT_EQ(log, (std::vector<int>{1, 0, 1}));
    l0.handle.destroy();
    l1.handle.destroy();
}

// Issue 33: any number of coroutines may be ready in one round. A full queue grows and keeps
// its order, also when its entries wrap around the end of the ring.
TEST(ReadyQueue, GrowsWhenFullAndKeepsItsOrder) {
    ReadyQueue q(2);
    std::vector<int> log;
    const Logger l0 = log_id(0, log);
    const Logger l1 = log_id(1, log);
    q.push(l1.handle);
    q.resume_all();     // the ring's oldest entry is now its second
    q.push(l0.handle);  // wraps around
    q.push(l1.handle);
    q.push(l0.handle);  // full: grows
    constexpr int kMore = 9999;
    for (int i = 0; i < kMore; ++i) { q.push(i % 2 == 0 ? l1.handle : l0.handle); }
    q.resume_all();
    std::vector<int> expected{1, 0, 1, 0};
    for (int i = 0; i < kMore; ++i) { expected.push_back(i % 2 == 0 ? 1 : 0); }
    EXPECT_EQ(log, expected);
    EXPECT_TRUE(q.empty());
    l0.handle.destroy();
    l1.handle.destroy();
}

// ---------------------------------------------------------------- wr_id routing

TEST(WrId, EachKindIsToldApartInOnePlace) {
    using tutorial::classify_wr_id;
    using tutorial::kSendTag;
    using tutorial::WrKind;
    EXPECT_EQ(classify_wr_id(0), WrKind::receive);
    EXPECT_EQ(classify_wr_id(15), WrKind::receive);
    EXPECT_EQ(classify_wr_id(kSendTag | 0), WrKind::send);
    EXPECT_EQ(classify_wr_id(kSendTag | 123456789), WrKind::send);
    // cancel()'s marker has the send tag set, but is no numbered send: counted as one, it
    // would make completed_sends_ 2^63.
    EXPECT_EQ(classify_wr_id(tutorial::kDrainSendWrId), WrKind::drain_marker);
}

// ---------------------------------------------------------------- fd waiters

Task<void> wait_readable(Reactor& reactor, FdWatch& fd, Clock::time_point deadline, int& result) {
    try {
        result = co_await reactor.readable(fd, deadline) ? 1 : 0;
    } catch (const CancelledError&) { result = 2; }
}

TEST(Reactor, ReadableResumesWhenThePipeHasData) {
    Reactor reactor(kSafety);
    WatchedPipe p(reactor);
    int result = -1;
    Task<void> task = wait_readable(reactor, p.watch, Clock::time_point::max(), result);
    reactor.spawn(task);
    one_round(reactor);  // starts the task: it suspends on the empty pipe
    EXPECT_FALSE(task.done());
    p.pipe.put();
    one_round(reactor);
    EXPECT_TRUE(task.done());
    EXPECT_EQ(result, 1);
}

TEST(Reactor, ReadableReturnsFalseAtItsDeadline) {
    Reactor reactor(kSafety);
    WatchedPipe p(reactor);
    int result = -1;
    const auto start = Clock::now();
    Task<void> task = wait_readable(reactor, p.watch, start + 30ms, result);
    run(reactor, task);
    EXPECT_EQ(result, 0);
    EXPECT_GE(Clock::now() - start, 30ms);
    EXPECT_LT(Clock::now() - start, 2s);
}

Task<void> second_waiter(Reactor& reactor, FdWatch& fd, std::string& what) {
    try {
        (void)co_await reactor.readable(fd);
        what = "resumed";
    } catch (const std::logic_error& e) { what = e.what(); }
}

TEST(Reactor, ASecondWaiterOnOneFdIsAnError) {
    Reactor reactor(kSafety);
    WatchedPipe p(reactor);
    int first = -1;
    std::string second;
    Task<void> a = wait_readable(reactor, p.watch, Clock::time_point::max(), first);
    Task<void> b = second_waiter(reactor, p.watch, second);
    reactor.spawn(a);
    run(reactor, b, 3);
    EXPECT_EQ(second, "Reactor: a second coroutine awaits fd " + std::to_string(p.pipe.fd[0]) +
                          " while one already does");
    p.pipe.put();
    reactor.run_until([&] { return a.done(); });
    EXPECT_EQ(first, 1) << "the first waiter still resumes";
}

// B10: the fd's owner closes it while a coroutine waits, then the number is given to a new fd.
// The FdWatch, destroyed first, took the old fd out of the epoll set while it was open and ended
// the wait; the waiting frame, destroyed later, must not remove the new fd's entry by number.
TEST(Reactor, AnFdNumberReusedAfterACloseStaysWatched) {
    Reactor reactor(kSafety);
    auto first = std::make_unique<WatchedPipe>(reactor);
    const int number = first->pipe.fd[0];
    int first_result = -1, second_result = -1;
    Task<void> a = wait_readable(reactor, first->watch, Clock::now() + 2s, first_result);
    reactor.spawn(a);
    one_round(reactor);
    first.reset();  // the FdWatch, then the pipe: a's wait ends, cancelled
    WatchedPipe second(reactor);
    ASSERT_EQ(second.pipe.fd[0], number) << "the new pipe did not reuse the number";
    Task<void> b = wait_readable(reactor, second.watch, Clock::now() + 2s, second_result);
    reactor.spawn(b);
    one_round(reactor);
    a.reset();  // a's frame goes only now
    second.pipe.put();
    reactor.run_until([&] { return b.done(); });
    EXPECT_EQ(first_result, 2) << "the first wait ends when its FdWatch goes";
    EXPECT_EQ(second_result, 1) << "the new fd with the old number was never reported readable";
}

// ---------------------------------------------------------------- timers

Task<void> sleeper(Reactor& reactor, std::chrono::milliseconds d, int id, std::vector<int>& order) {
    co_await reactor.sleep_until(Clock::now() + d);
    order.push_back(id);
}

TEST(Reactor, SleepersWakeInDeadlineOrder) {
    Reactor reactor(kSafety);
    std::vector<int> order;
    std::vector<Task<void>> tasks;
    tasks.push_back(sleeper(reactor, 60ms, 3, order));
    tasks.push_back(sleeper(reactor, 20ms, 1, order));
    tasks.push_back(sleeper(reactor, 40ms, 2, order));
    tasks.push_back(sleeper(reactor, 0ms, 0, order));  // due at once: does not suspend
    const auto start = Clock::now();
    for (auto& t : tasks) { reactor.spawn(t); }
    reactor.run_until([&] { return order.size() == tasks.size(); });
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_GE(Clock::now() - start, 60ms);
}

// ---------------------------------------------------------------- cancellation

Task<void> cancellable(Reactor& reactor, FdWatch* fd, std::string& what) {
    try {
        if (fd != nullptr) {
            (void)co_await reactor.readable(*fd);
        } else {
            co_await reactor.sleep_until(Clock::now() + 1h);
        }
        what = "not cancelled";
    } catch (const CancelledError& e) { what = e.what(); }
}

// The end of an FdWatch ends its own waiter's wait only.
TEST(Reactor, TheEndOfAnFdWatchCancelsItsWaiterOnly) {
    Reactor reactor(kSafety);
    auto a = std::make_unique<WatchedPipe>(reactor);
    WatchedPipe b(reactor);
    std::string what_a, what_b;
    Task<void> ta = cancellable(reactor, &a->watch, what_a);
    Task<void> tb = cancellable(reactor, &b.watch, what_b);
    reactor.spawn(ta);
    reactor.spawn(tb);
    one_round(reactor);
    a.reset();
    one_round(reactor);
    EXPECT_TRUE(ta.done());
    EXPECT_EQ(what_a, "the wait was cancelled");
    EXPECT_FALSE(tb.done());
    b.pipe.put();
    one_round(reactor);
    EXPECT_EQ(what_b, "not cancelled");
}

TEST(Reactor, CancelWaitersResumesEveryFdAndTimerWaiter) {
    Reactor reactor(kSafety);
    WatchedPipe p(reactor);
    std::string what_fd, what_timer;
    Task<void> t1 = cancellable(reactor, &p.watch, what_fd);
    Task<void> t2 = cancellable(reactor, nullptr, what_timer);
    reactor.spawn(t1);
    reactor.spawn(t2);
    one_round(reactor);
    reactor.cancel_waiters();
    one_round(reactor);
    EXPECT_TRUE(t1.done() && t2.done());
    EXPECT_EQ(what_fd, "the wait was cancelled");
    EXPECT_EQ(what_timer, "the wait was cancelled");
}

TEST(Reactor, AFrameDestroyedWhileWaitingLeavesNothingBehind) {
    Reactor reactor(kSafety);
    WatchedPipe p(reactor);
    std::string what;
    {
        Task<void> task = cancellable(reactor, &p.watch, what);
        reactor.spawn(task);
        one_round(reactor);
        EXPECT_FALSE(task.done());
    }  // destroyed while it waits: its epoll entry and list entry must go with it
    p.pipe.put();
    one_round(reactor);  // ASan: no use of the freed frame
    reactor.cancel_waiters();
    one_round(reactor);
    EXPECT_EQ(what, "");
}

// Issue 33: more waiters than the ReadyQueue's first capacity (4096) woken in one round, as
// thousands of handshake deadlines that expire together, or cancel_waiters() at shutdown. Every
// one resumes, in the order it began to wait.
constexpr int kManyWaiters = 5000;

Task<void> wait_until(Reactor& reactor, Clock::time_point when, int id, std::vector<int>& order) {
    try {
        co_await reactor.sleep_until(when);
        order.push_back(id);
    } catch (const CancelledError&) { order.push_back(-1 - id); }
}

// Starts kManyWaiters wait_until() tasks, a thousand per round: all wait, none has resumed.
std::vector<Task<void>> start_many_waiters(Reactor& reactor, Clock::time_point when,
                                           std::vector<int>& order) {
    std::vector<Task<void>> tasks;
    for (int id = 0; id < kManyWaiters; ++id) {
        tasks.push_back(wait_until(reactor, when, id, order));
        reactor.spawn(tasks.back());
        if ((id + 1) % 1000 == 0) { one_round(reactor); }
    }
    return tasks;
}

TEST(Reactor, ThousandsOfTimersExpiringInOneRoundAllResume) {
    Reactor reactor(kSafety);
    std::vector<int> order;
    const auto when = Clock::now() + 3s;  // room to start them all, even under ASan on a busy host
    std::vector<Task<void>> tasks = start_many_waiters(reactor, when, order);
    ASSERT_LT(Clock::now(), when) << "the first waiters expired before the last began to wait";
    ASSERT_TRUE(order.empty());
    reactor.run_until([&] { return Clock::now() >= when + 1s || order.size() == tasks.size(); });
    std::vector<int> expected(kManyWaiters);
    for (int id = 0; id < kManyWaiters; ++id) { expected[static_cast<std::size_t>(id)] = id; }
    EXPECT_EQ(order, expected);
}

TEST(Reactor, CancelWaitersResumesThousandsOfWaiters) {
    Reactor reactor(kSafety);
    std::vector<int> order;
    std::vector<Task<void>> tasks = start_many_waiters(reactor, Clock::now() + 1h, order);
    ASSERT_TRUE(order.empty());
    reactor.cancel_waiters();
    one_round(reactor);
    std::vector<int> expected(kManyWaiters);
    for (int id = 0; id < kManyWaiters; ++id) { expected[static_cast<std::size_t>(id)] = -1 - id; }
    EXPECT_EQ(order, expected);
}

// ---------------------------------------------------------------- signals

extern "C" void note_signal(int signal_number) { tutorial::g_stop_signal = signal_number; }

bool same_mask(const sigset_t& a, const sigset_t& b) {
    for (int s = 1; s < NSIG; ++s) {
        if (sigismember(&a, s) != sigismember(&b, s)) { return false; }
    }
    return true;
}

// B5: the program owns SIGINT's disposition and its signal mask. A Reactor that ran, and is gone,
// leaves both as they were; it only lets SIGINT and SIGTERM in while it waits.
TEST(Reactor, LeavesTheSignalMaskAndSigintDispositionAsTheyWere) {
    struct sigaction handler {};
    handler.sa_handler = note_signal;
    sigemptyset(&handler.sa_mask);
    struct sigaction saved {};
    ASSERT_EQ(::sigaction(SIGINT, &handler, &saved), 0);
    sigset_t before;
    ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, nullptr, &before), 0);
    {
        Reactor reactor(kSafety);
        std::vector<int> order;
        Task<void> nap = sleeper(reactor, 1ms, 1, order);
        run(reactor, nap);
    }
    sigset_t after;
    ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, nullptr, &after), 0);
    struct sigaction now {};
    ASSERT_EQ(::sigaction(SIGINT, &saved, &now), 0);
    EXPECT_TRUE(same_mask(before, after))
        << "SIGINT blocked after the Reactor is gone: " << sigismember(&after, SIGINT);
    EXPECT_EQ(now.sa_handler, &note_signal) << "the Reactor changed SIGINT's disposition";
}

// A SIGINT that comes while a coroutine runs (signals are blocked then) is taken in the next
// wait, at once: the loop does not sleep out its safety period, nor a timer of an hour.
TEST(Reactor, ASigintDuringTheResumePhaseEndsTheNextWaitAtOnce) {
    struct sigaction handler {};
    handler.sa_handler = note_signal;
    sigemptyset(&handler.sa_mask);
    struct sigaction saved {};
    ASSERT_EQ(::sigaction(SIGINT, &handler, &saved), 0);
    tutorial::g_stop_signal = 0;
    Reactor reactor(std::chrono::milliseconds(10'000));
    std::vector<int> order;
    Task<void> nap = sleeper(reactor, 1h, 1, order);
    reactor.spawn(nap);
    const auto start = Clock::now();
    bool raised = false;
    reactor.run_until([&] {
        if (!raised) {
            raised = ::raise(SIGINT) == 0;  // blocked here: pending until epoll_pwait
        }
        return tutorial::g_stop_signal != 0;
    });
    EXPECT_LT(Clock::now() - start, 2s);
    EXPECT_EQ(tutorial::g_stop_signal, SIGINT);
    tutorial::g_stop_signal = 0;
    ASSERT_EQ(::sigaction(SIGINT, &saved, nullptr), 0);
}

// ---------------------------------------------------------------- connections

// A connection whose channel is a pipe: it records what the reactor calls.
class FakeConnection final : public tutorial::ChannelClient {
  public:
    FakeConnection() = default;
    FakeConnection(const FakeConnection&) = delete;
    FakeConnection& operator=(const FakeConnection&) = delete;
    ~FakeConnection() = default;
    [[nodiscard]] int channel_fd() const noexcept override { return pipe.fd[0]; }
    std::uint64_t on_channel_readable(ReadyQueue& ready) override {
        char byte = 0;
        const bool event = ::read(pipe.fd[0], &byte, 1) == 1;
        ++services;
        return event ? complete(ready) : 0;
    }
    std::uint64_t safety_net(ReadyQueue& ready) override {
        ++safety_nets;
        return complete_in_safety_net && waiter ? complete(ready) : 0;
    }
    std::uint64_t complete(ReadyQueue& ready) {
        if (waiter) { ready.push(std::exchange(waiter, {})); }
        return 1;
    }

    Pipe pipe;
    std::coroutine_handle<> waiter;
    bool complete_in_safety_net = false;
    int services = 0, safety_nets = 0;
};

struct AwaitCompletion {
    FakeConnection& c;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) noexcept { c.waiter = h; }
    void await_resume() const noexcept {}
};

Task<void> await_completion(FakeConnection& c) { co_await AwaitCompletion{c}; }

TEST(Reactor, AReadableChannelIsServicedAndItsWaiterResumed) {
    Reactor reactor(kSafety);
    FakeConnection c;
    reactor.add_channel(c);
    Task<void> task = await_completion(c);
    reactor.spawn(task);
    one_round(reactor);
    c.pipe.put();
    one_round(reactor);
    EXPECT_TRUE(task.done());
    EXPECT_EQ(c.services, 1);
    EXPECT_TRUE(reactor.remove_channel(c));
    EXPECT_FALSE(reactor.remove_channel(c)) << "a second removal does nothing";
    c.pipe.put();
    one_round(reactor);
    EXPECT_EQ(c.services, 1) << "a removed channel is not serviced";
}

TEST(Reactor, TheSafetyNetPollsAQuietChannel) {
    Reactor reactor(kSafety);
    FakeConnection c;
    c.complete_in_safety_net = true;
    reactor.add_channel(c);
    Task<void> task = await_completion(c);
    const auto start = Clock::now();
    run(reactor, task);
    reactor.remove_channel(c);
    EXPECT_GE(c.safety_nets, 1);
    EXPECT_GE(Clock::now() - start, 15ms);
}

// The fallback where epoll_pwait2 is missing: a timer may fire up to 1 ms late, never early.
TEST(EpollTimeout, RoundsUpToWholeMilliseconds) {
    EXPECT_EQ(epoll_timeout_ms(Clock::duration::zero()), 0);
    EXPECT_EQ(epoll_timeout_ms(std::chrono::nanoseconds(1)), 1);
    EXPECT_EQ(epoll_timeout_ms(std::chrono::microseconds(1500)), 2);
    EXPECT_EQ(epoll_timeout_ms(std::chrono::milliseconds(100)), 100);
    EXPECT_EQ(epoll_timeout_ms(std::chrono::hours(24 * 365)), std::numeric_limits<int>::max());
}

}  // namespace
