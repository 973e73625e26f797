// Step 07 unit tests: the reactor over pipes, timers, a signal, loopback TCP, fake channels.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
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
using tutorial::Reactor;
using tutorial::ReactorSettings;
using tutorial::ReadyQueue;
using tutorial::Task;

ReactorSettings quiet_settings(tutorial::WaitMode mode = tutorial::WaitMode::event) {
    ReactorSettings s;
    s.mode = mode;
    s.safety_ms = 20;
    s.handle_signals = false;
    return s;
}

struct Pipe {
    std::array<int, 2> fd{-1, -1};
    Pipe() {
        if (::pipe2(fd.data(), O_NONBLOCK | O_CLOEXEC) != 0) {
            throw std::runtime_error("pipe2");
        }
    }
    ~Pipe() {
        ::close(fd[0]);
        ::close(fd[1]);
    }
    Pipe(const Pipe&) = delete;
    Pipe& operator=(const Pipe&) = delete;
    void put() const { (void)!::write(fd[1], "x", 1); }
};

// Runs rounds until the task is done, at most `limit` rounds.
void run(Reactor& reactor, Task<void>& task, int limit = 1000) {
    reactor.spawn(task);
    int rounds = 0;
    reactor.run_until([&] { return task.done() || ++rounds > limit; });
    ASSERT_TRUE(task.done()) << "the task did not finish within " << limit << " rounds";
}

// ---------------------------------------------------------------- ReadyQueue

TEST(ReadyQueue, IsFifoWithAFixedCapacity) {
    ReadyQueue q(2);
    std::array<int, 3> frames{};  // any distinct addresses make distinct handles
    const auto h0 = std::coroutine_handle<>::from_address(&frames[0]);
    const auto h1 = std::coroutine_handle<>::from_address(&frames[1]);
    q.push(h0);
    q.push(h1);
    EXPECT_THROW(q.push(h0), std::length_error);
    EXPECT_EQ(q.pop(), h0);
    q.push(h0);  // wraps around
    EXPECT_EQ(q.pop(), h1);
    EXPECT_EQ(q.pop(), h0);
    EXPECT_FALSE(q.pop());
    q.push(h0);
    q.push(h1);
    q.forget(h0);
    EXPECT_EQ(q.size(), 2U);
    EXPECT_FALSE(q.pop());  // forgotten: a null handle that resume_all() skips
    EXPECT_EQ(q.pop(), h1);
}

// ---------------------------------------------------------------- wr_id routing

TEST(WrId, EachKindIsToldApartInOnePlace) {
    using tutorial::classify_wr_id;
    using tutorial::kSendTag;
    using tutorial::WrKind;
    int op_state = 0;  // a one-sided operation's state, as in an awaiting coroutine's frame
    const auto op = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&op_state));
    EXPECT_EQ(classify_wr_id(0, 16, op), WrKind::receive);
    EXPECT_EQ(classify_wr_id(15, 16, op), WrKind::receive);
    EXPECT_EQ(classify_wr_id(16, 16, op), WrKind::unknown);
    EXPECT_EQ(classify_wr_id(kSendTag | 0, 16, op), WrKind::send);
    EXPECT_EQ(classify_wr_id(kSendTag | 123456789, 16, op), WrKind::send);
    EXPECT_EQ(classify_wr_id(op, 16, op), WrKind::one_sided);
    EXPECT_EQ(classify_wr_id(op, 16, 0), WrKind::unknown) << "none in flight";
    // cancel()'s marker has the send tag set, but is no numbered send: counted as one, it
    // would make completed_sends_ 2^63.
    EXPECT_EQ(classify_wr_id(tutorial::kDrainSendWrId, 16, op), WrKind::drain_marker);
    EXPECT_EQ(op & kSendTag, 0U) << "a user-space pointer has its top bit clear";
}

// ---------------------------------------------------------------- fd waiters

Task<void> wait_readable(Reactor& reactor, int fd, Clock::time_point deadline, int& result) {
    result = co_await reactor.readable(fd, deadline) ? 1 : 0;
}

TEST(Reactor, ReadableResumesWhenThePipeHasData) {
    Reactor reactor(quiet_settings());
    Pipe pipe;
    int result = -1;
    Task<void> task = wait_readable(reactor, pipe.fd[0], Clock::time_point::max(), result);
    reactor.spawn(task);
    reactor.run_round();  // starts the task: it suspends on the empty pipe
    EXPECT_FALSE(task.done());
    pipe.put();
    reactor.run_round();
    EXPECT_TRUE(task.done());
    EXPECT_EQ(result, 1);
}

TEST(Reactor, ReadableReturnsFalseAtItsDeadline) {
    Reactor reactor(quiet_settings());
    Pipe pipe;
    int result = -1;
    const auto start = Clock::now();
    Task<void> task = wait_readable(reactor, pipe.fd[0], start + 30ms, result);
    run(reactor, task);
    EXPECT_EQ(result, 0);
    EXPECT_GE(Clock::now() - start, 30ms);
    EXPECT_LT(Clock::now() - start, 2s);
}

Task<void> wait_writable(Reactor& reactor, int fd, bool& result) {
    result = co_await reactor.writable(fd, Clock::now() + 1s);
}

TEST(Reactor, WritableResumesAtOnceOnAnEmptyPipe) {
    Reactor reactor(quiet_settings());
    Pipe pipe;
    bool result = false;
    Task<void> task = wait_writable(reactor, pipe.fd[1], result);
    run(reactor, task, 3);
    EXPECT_TRUE(result);
}

// ---------------------------------------------------------------- timers

Task<void> sleeper(Reactor& reactor, std::chrono::milliseconds d, int id, std::vector<int>& order) {
    co_await reactor.sleep_for(d);
    order.push_back(id);
}

TEST(Reactor, SleepersWakeInDeadlineOrder) {
    Reactor reactor(quiet_settings());
    std::vector<int> order;
    std::vector<Task<void>> tasks;
    tasks.push_back(sleeper(reactor, 60ms, 3, order));
    tasks.push_back(sleeper(reactor, 20ms, 1, order));
    tasks.push_back(sleeper(reactor, 40ms, 2, order));
    tasks.push_back(sleeper(reactor, 0ms, 0, order));  // due at once: does not suspend
    const auto start = Clock::now();
    for (auto& t : tasks) {
        reactor.spawn(t);
    }
    reactor.run_until([&] { return order.size() == tasks.size(); });
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_GE(Clock::now() - start, 60ms);
}

TEST(Reactor, BusyModeWakesSleepersWithoutSleeping) {
    Reactor reactor(quiet_settings(tutorial::WaitMode::busy));
    std::vector<int> order;
    Task<void> task = sleeper(reactor, 10ms, 1, order);
    const auto start = Clock::now();
    run(reactor, task, 1'000'000);
    EXPECT_GE(Clock::now() - start, 10ms);
}

// ---------------------------------------------------------------- cancellation

Task<void> cancellable(Reactor& reactor, int fd, std::string& what) {
    try {
        if (fd >= 0) {
            (void)co_await reactor.readable(fd);
        } else {
            co_await reactor.sleep_for(1h);
        }
        what = "not cancelled";
    } catch (const CancelledError& e) {
        what = e.what();
    }
}

TEST(Reactor, CancelResumesTheWaitersOfOneFd) {
    Reactor reactor(quiet_settings());
    Pipe a, b;
    std::string what_a, what_b;
    Task<void> ta = cancellable(reactor, a.fd[0], what_a);
    Task<void> tb = cancellable(reactor, b.fd[0], what_b);
    reactor.spawn(ta);
    reactor.spawn(tb);
    reactor.run_round();
    reactor.cancel(a.fd[0], "stop accepting");
    reactor.run_round();
    EXPECT_TRUE(ta.done());
    EXPECT_EQ(what_a, "stop accepting");
    EXPECT_FALSE(tb.done());
    b.put();
    reactor.run_round();
    EXPECT_EQ(what_b, "not cancelled");
}

TEST(Reactor, CancelWaitersResumesEveryFdAndTimerWaiter) {
    Reactor reactor(quiet_settings());
    Pipe pipe;
    std::string what_fd, what_timer;
    Task<void> t1 = cancellable(reactor, pipe.fd[0], what_fd);
    Task<void> t2 = cancellable(reactor, -1, what_timer);
    reactor.spawn(t1);
    reactor.spawn(t2);
    reactor.run_round();
    reactor.cancel_waiters();
    reactor.run_round();
    EXPECT_TRUE(t1.done() && t2.done());
    EXPECT_EQ(what_fd, "cancelled by shutdown");
    EXPECT_EQ(what_timer, "cancelled by shutdown");
}

TEST(Reactor, AFrameDestroyedWhileWaitingLeavesNothingBehind) {
    Reactor reactor(quiet_settings());
    Pipe pipe;
    std::string what;
    {
        Task<void> task = cancellable(reactor, pipe.fd[0], what);
        reactor.spawn(task);
        reactor.run_round();
        EXPECT_FALSE(task.done());
    }  // destroyed while it waits: its epoll entry and list entry must go with it
    pipe.put();
    reactor.run_round();  // ASan: no use of the freed frame
    reactor.cancel_waiters();
    reactor.run_round();
    EXPECT_EQ(what, "");
}

// ---------------------------------------------------------------- signals

Task<void> wait_for_stop(Reactor& reactor, int& signal) {
    signal = co_await reactor.stop_requested();
}

TEST(Reactor, StopRequestedReturnsTheSignal) {
    ReactorSettings settings = quiet_settings();
    settings.handle_signals = true;  // blocks SIGINT and SIGTERM in this process
    Reactor reactor(settings);
    int signal = 0;
    Task<void> task = wait_for_stop(reactor, signal);
    reactor.spawn(task);
    reactor.run_round();
    EXPECT_FALSE(task.done());
    EXPECT_NO_THROW(reactor.throw_if_stopped());
    ASSERT_EQ(::kill(::getpid(), SIGINT), 0);
    reactor.run_until([&] { return task.done(); });
    EXPECT_EQ(signal, SIGINT);
    EXPECT_EQ(reactor.stop_signal(), SIGINT);
    try {
        reactor.throw_if_stopped();
        FAIL() << "throw_if_stopped did not throw";
    } catch (const tutorial::TutorialError& e) {
        EXPECT_EQ(std::string(e.what()), "interrupted by SIGINT");
        EXPECT_EQ(e.exit_code(), tutorial::kExitInterrupted);
    }
}

TEST(Reactor, AFrameDestroyedWhileAwaitingTheStopLeavesNoHandle) {
    ReactorSettings settings = quiet_settings();
    settings.handle_signals = true;
    Reactor reactor(settings);
    int signal = 0;
    {
        Task<void> task = wait_for_stop(reactor, signal);
        reactor.spawn(task);
        reactor.run_round();
        EXPECT_FALSE(task.done());
    }
    ASSERT_EQ(::kill(::getpid(), SIGTERM), 0);
    reactor.run_until([&] { return reactor.stop_signal() != 0; });  // ASan: no resume of it
    EXPECT_EQ(reactor.stop_signal(), SIGTERM);
    EXPECT_EQ(signal, 0);
}

// ---------------------------------------------------------------- TCP

tutorial::Socket listener_on_loopback(int& port) {
    tutorial::Socket listener = tutorial::listen_on("127.0.0.1", 0);
    ::fcntl(listener.get(), F_SETFL, ::fcntl(listener.get(), F_GETFL) | O_NONBLOCK);
    sockaddr_in address{};
    socklen_t length = sizeof address;
    ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &length);
    port = ntohs(address.sin_port);
    return listener;
}

Task<void> server_side(Reactor& reactor, const tutorial::Socket& listener, std::string& got) {
    tutorial::TcpPeer client = co_await reactor.accept(listener);
    std::array<char, 5> bytes{};
    const std::size_t n =
        co_await reactor.receive_all(client.socket, bytes, std::chrono::seconds(2), "a greeting");
    got.assign(bytes.data(), n);
    co_await reactor.send_all(client.socket, std::span<const char>("done", 4), 2s, "a reply");
    client.socket.reset();  // the frame lives on until the Task goes: close now
}

Task<void> client_side(Reactor& reactor, int port, std::string& reply) {
    tutorial::TcpPeer server = co_await reactor.connect("127.0.0.1", port, std::chrono::seconds(2));
    co_await reactor.send_all(server.socket, std::span<const char>("hello", 5), 2s, "a greeting");
    std::array<char, 8> bytes{};
    const std::size_t n = co_await reactor.receive_all(server.socket, bytes, 2s, "a reply");
    reply.assign(bytes.data(), n);  // the server closed after 4 bytes
}

TEST(Reactor, AcceptConnectSendAndReceive) {
    Reactor reactor(quiet_settings());
    int port = 0;
    const tutorial::Socket listener = listener_on_loopback(port);
    std::string got, reply;
    Task<void> server = server_side(reactor, listener, got);
    Task<void> client = client_side(reactor, port, reply);
    reactor.spawn(server);
    reactor.spawn(client);
    int rounds = 0;
    reactor.run_until([&] { return (server.done() && client.done()) || ++rounds > 1000; });
    ASSERT_TRUE(server.done() && client.done());
    EXPECT_NO_THROW(server.result());
    EXPECT_NO_THROW(client.result());
    EXPECT_EQ(got, "hello");
    EXPECT_EQ(reply, "done");
}

Task<void> connect_only(Reactor& reactor, int port) {
    (void)co_await reactor.connect("127.0.0.1", port, std::chrono::seconds(1));
}

TEST(Reactor, ARefusedConnectIsRetriedThenNamedAsTcpHppNamesIt) {
    Reactor reactor(quiet_settings());
    int port = 0;
    { const tutorial::Socket closed = listener_on_loopback(port); }  // nobody listens there now
    Task<void> task = connect_only(reactor, port);
    const auto start = Clock::now();
    run(reactor, task, 10000);
    EXPECT_GE(Clock::now() - start, 900ms);
    try {
        task.result();
        FAIL() << "connect did not throw";
    } catch (const tutorial::TutorialError& e) {
        EXPECT_EQ(std::string(e.what()), "cannot connect to 127.0.0.1 port " +
                                             std::to_string(port) +
                                             ": Connection refused (tried for 1 s)");
        EXPECT_EQ(e.exit_code(), tutorial::kExitPeer);
        EXPECT_EQ(e.hint(), "no server listens there: start the server first, or check -p");
    }
}

// ---------------------------------------------------------------- connections

// A connection whose channel is a pipe: it records what the reactor calls.
class FakeConnection final : public tutorial::ChannelClient {
  public:
    FakeConnection() = default;
    FakeConnection(const FakeConnection&) = delete;
    FakeConnection& operator=(const FakeConnection&) = delete;
    ~FakeConnection() = default;
    [[nodiscard]] int channel_fd() const noexcept override {
        return with_channel ? pipe.fd[0] : -1;
    }
    std::uint64_t on_channel_readable(ReadyQueue& ready) override {
        char byte = 0;
        const bool event = ::read(pipe.fd[0], &byte, 1) == 1;
        ++services;
        return event ? complete(ready) : 0;
    }
    std::uint64_t poll_once(ReadyQueue& ready) override {
        ++polls;
        return polls >= complete_at_poll && waiter ? complete(ready) : 0;
    }
    std::uint64_t safety_net(ReadyQueue& ready) override {
        ++safety_nets;
        return complete_in_safety_net && waiter ? complete(ready) : 0;
    }
    std::uint64_t complete(ReadyQueue& ready) {
        if (waiter) {
            ready.push(std::exchange(waiter, {}));
        }
        return 1;
    }

    Pipe pipe;
    bool with_channel = true;
    std::coroutine_handle<> waiter;
    std::uint64_t complete_at_poll = ~std::uint64_t{0};
    bool complete_in_safety_net = false;
    int services = 0, safety_nets = 0;
    std::uint64_t polls = 0;
};

struct AwaitCompletion {
    FakeConnection& c;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) noexcept { c.waiter = h; }
    void await_resume() const noexcept {}
};

Task<void> await_completion(FakeConnection& c) {
    co_await AwaitCompletion{c};
}

TEST(Reactor, AReadableChannelIsServicedAndItsWaiterResumed) {
    Reactor reactor(quiet_settings());
    FakeConnection c;
    reactor.add_channel(c);
    Task<void> task = await_completion(c);
    reactor.spawn(task);
    reactor.run_round();
    c.pipe.put();
    reactor.run_round();
    EXPECT_TRUE(task.done());
    EXPECT_EQ(c.services, 1);
    EXPECT_EQ(c.polls, 0U) << "event mode does not poll";
    reactor.remove_channel(c);
    c.pipe.put();
    reactor.run_round();
    EXPECT_EQ(c.services, 1) << "a removed channel is not serviced";
}

TEST(Reactor, TheSafetyNetPollsAQuietChannel) {
    Reactor reactor(quiet_settings());  // safety_ms 20
    FakeConnection c;
    c.complete_in_safety_net = true;
    reactor.add_channel(c);
    Task<void> task = await_completion(c);
    const auto start = Clock::now();
    run(reactor, task);
    EXPECT_GE(c.safety_nets, 1);
    EXPECT_GE(Clock::now() - start, 15ms);
    reactor.remove_channel(c);
}

TEST(Reactor, BusyModePollsWithoutAChannel) {
    Reactor reactor(quiet_settings(tutorial::WaitMode::busy));
    FakeConnection c;
    c.with_channel = false;
    c.complete_at_poll = 5000;
    reactor.add_channel(c);
    Task<void> task = await_completion(c);
    run(reactor, task, 100);
    EXPECT_GE(c.polls, 5000U);
    EXPECT_EQ(c.safety_nets, 0);
    reactor.remove_channel(c);
}

TEST(Reactor, SpinModePollsThenSleeps) {
    ReactorSettings settings = quiet_settings(tutorial::WaitMode::spin);
    settings.spin_us = 200;
    Reactor reactor(settings);
    FakeConnection c;
    c.complete_at_poll = 50;
    reactor.add_channel(c);
    Task<void> task = await_completion(c);
    run(reactor, task, 100);
    EXPECT_GE(c.polls, 50U);
    // Nothing to do now: one round spins 200 us, then sleeps until the safety timeout.
    const auto start = Clock::now();
    reactor.run_round();
    EXPECT_GE(Clock::now() - start, 200us);
    reactor.remove_channel(c);
}

}  // namespace
