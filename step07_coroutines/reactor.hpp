// Step 07: the one-thread reactor: epoll, timerfd, signalfd; resume only after the drain.
#pragma once

#include <infiniband/verbs.h>
#include <sys/epoll.h>

#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "cq_events.hpp"
#include "errors.hpp"
#include "options.hpp"
#include "task.hpp"
#include "tcp.hpp"

namespace tutorial {

//! [ready_queue]
/// The coroutines that may run: a ring of handles with a capacity fixed at construction, so
/// that a push never allocates. A coroutine waits on one thing at a time, so the capacity
/// needed is the number of coroutines alive at once (Reactor's max_coroutines).
class ReadyQueue {
  public:
    explicit ReadyQueue(std::size_t capacity) : ring_(capacity == 0 ? 1 : capacity) {}

    /// \throws std::length_error when full: more coroutines than the capacity says.
    void push(std::coroutine_handle<> handle) {
        if (size_ == ring_.size()) {
            throw std::length_error("ReadyQueue: more ready coroutines than its capacity");
        }
        ring_[(head_ + size_) % ring_.size()] = handle;
        ++size_;
    }
    /// The oldest handle, or a null handle when empty.
    std::coroutine_handle<> pop() noexcept {
        if (size_ == 0) {
            return {};
        }
        const std::coroutine_handle<> handle = ring_[head_];
        head_ = (head_ + 1) % ring_.size();
        --size_;
        return handle;
    }
    /// Resumes every queued coroutine, oldest first, until the queue is empty (a resumed
    /// coroutine may queue others, e.g. by starting them). Skips forgotten entries.
    void resume_all() {
        while (size_ != 0) {
            if (const std::coroutine_handle<> handle = pop()) {
                handle.resume();
            }
        }
    }
    /// Blanks \p handle's entries: for a frame destroyed while queued (its awaiter's destructor).
    void forget(std::coroutine_handle<> handle) noexcept {
        for (std::size_t i = 0; i < size_; ++i) {
            if (ring_[(head_ + i) % ring_.size()] == handle) {
                ring_[(head_ + i) % ring_.size()] = {};
            }
        }
    }
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    [[nodiscard]] bool empty() const noexcept { return size_ == 0; }

  private:
    std::vector<std::coroutine_handle<>> ring_;
    std::size_t head_ = 0;
    std::size_t size_ = 0;
};
//! [ready_queue]

//! [drain_then_resume]
/// step06's channel protocol (cq_events.hpp's service_channel: every event until EAGAIN, re-arm,
/// drain, ack in batches), with each completion ROUTED, never resumed: `route(wc)` stores the
/// completion in its waiter's state and returns the waiting coroutine (or a null handle), which
/// goes on the ReadyQueue. Nothing runs inside the drain, so a coroutine that posts, or ends and
/// lets its QP be destroyed, never does so under a poll loop that still uses that CQ.
template <typename Source, typename Route>
ChannelPass service_and_route(Source& source, CqEventTracker& tracker, std::span<ibv_wc> batch,
                              Route&& route, ReadyQueue& ready) {
    return service_channel(source, tracker, batch, [&](const ibv_wc& wc) {
        if (const std::coroutine_handle<> waiter = route(wc)) {
            ready.push(waiter);
        }
    });
}

/// The rule on one channel: drain and route first, THEN resume. The reactor splits it over a
/// whole round: it routes the completions of every ready channel, then resumes them all.
template <typename Source, typename Route>
ChannelPass service_then_resume(Source& source, CqEventTracker& tracker, std::span<ibv_wc> batch,
                                Route&& route, ReadyQueue& ready) {
    const ChannelPass pass = service_and_route(source, tracker, batch, route, ready);
    ready.resume_all();
    return pass;
}
//! [drain_then_resume]

/// A wait that shutdown ended: a waiter on an fd or a timer resumed by Reactor::cancel() or
/// cancel_waiters(). Exit code kExitInterrupted.
class CancelledError : public TutorialError {
  public:
    explicit CancelledError(const std::string& what) : TutorialError(kExitInterrupted, what) {}
};

/// What an epoll entry's data.ptr points at: which kind of source, and its owner.
struct Watch {
    enum class Kind : std::uint8_t { fd, channel, timer, signal };
    Kind kind;
    void* owner;  // fd: the Waiter; channel: the ChannelClient; timer, signal: the Reactor
};

/// How the reactor waits when nothing is ready (step06's modes).
///   busy:  never sleeps: polls every CQ, and asks epoll (timeout 0) every 1024 polls or
///          epoll_check for signals, timers and sockets (step06's client default; endpoints need
///          no channel)
///   event: epoll_wait with --safety-ms as its timeout; CQs wake it through their channels
///   spin:  polls every CQ until none had work for spin_us (asking epoll every epoll_check),
///          then sleeps as event mode does (step06's server --spin-us; CQs stay armed meanwhile)
struct ReactorSettings {
    WaitMode mode = WaitMode::event;
    std::uint32_t spin_us = 0;
    /// Busy and spin: how often epoll is asked, counted across rounds. The server's 20 us is
    /// step06's server's; a client has only its signals and its watchdog there.
    std::chrono::microseconds epoll_check{20};
    int safety_ms = 100;                ///< the safety net's period and epoll_wait's timeout
    std::size_t max_coroutines = 4096;  ///< the ReadyQueue's capacity
    bool handle_signals = true;         ///< SIGINT/SIGTERM through a signalfd (blocks them)
};
/// The server's: event mode, or spin with --spin-us; --safety-ms. (--ack-batch goes to each
/// endpoint's EndpointConfig, whose CqEventTracker acks.)
[[nodiscard]] ReactorSettings server_reactor_settings(const Options& o);
/// The client's: busy (default), -e event, or --spin-us spin; --safety-ms.
[[nodiscard]] ReactorSettings client_reactor_settings(const Options& o);

class Reactor;

/// A connection's completion queue as the reactor sees it; AsyncEndpoint implements it. The
/// reactor calls these in its routing phase only: each routes completions to their waiters
/// (ReadyQueue pushes) and resumes nothing.
class ChannelClient {
  public:
    /// The completion channel's fd (O_NONBLOCK), or -1 without a channel (busy mode).
    [[nodiscard]] virtual int channel_fd() const noexcept = 0;
    /// The channel is readable: step06's protocol through service_and_route(). Returns the
    /// completions drained.
    virtual std::uint64_t on_channel_readable(ReadyQueue& ready) = 0;
    /// Busy and spin modes: one ibv_poll_cq pass, routed (counted as spin completions).
    virtual std::uint64_t poll_once(ReadyQueue& ready) = 0;
    /// Quiet for a safety period: any queued event first, then cq_events.hpp's safety_net_poll()
    /// (counted in the endpoint's CqEventTracker, as step06). Returns the completions it found
    /// without an event.
    virtual std::uint64_t safety_net(ReadyQueue& ready) = 0;

  protected:
    ChannelClient() = default;
    ~ChannelClient() = default;
    ChannelClient(const ChannelClient&) = delete;
    ChannelClient& operator=(const ChannelClient&) = delete;

  private:
    friend class Reactor;
    Watch watch_{Watch::Kind::channel, this};
    ChannelClient* prev_ = nullptr;  // the reactor's list of channels: intrusive, no allocation
    ChannelClient* next_ = nullptr;
    Clock::time_point last_activity_{};
    bool registered_ = false;
};

/// What an fd or timer awaiter keeps in the awaiting coroutine's frame (no allocation): the
/// reactor links it into its list of waiters, sorted by deadline, and points an epoll entry at
/// its Watch while it waits for an fd.
class Waiter {
  public:
    enum class Outcome : std::uint8_t { waiting, ready, timed_out, cancelled };
    Waiter(const Waiter&) = delete;
    Waiter& operator=(const Waiter&) = delete;

  protected:
    Waiter(Reactor& reactor, int fd, std::uint32_t events, Clock::time_point deadline) noexcept
        : reactor_(reactor), fd_(fd), events_(events), deadline_(deadline) {}
    ~Waiter();  // a frame destroyed while it waits: unlinked, its epoll entry and queue entry gone
    void suspend(std::coroutine_handle<> handle);  // links it (and watches fd_)
    void resumed() noexcept { queued_ = false; }
    [[nodiscard]] Outcome outcome() const noexcept { return outcome_; }
    [[nodiscard]] Clock::time_point deadline() const noexcept { return deadline_; }
    [[nodiscard]] const char* why() const noexcept { return why_; }

  private:
    friend class Reactor;
    Reactor& reactor_;
    int fd_;                      // -1: a pure timer
    std::uint32_t events_;        // EPOLLIN or EPOLLOUT
    Clock::time_point deadline_;  // Clock::time_point::max(): none
    Watch watch_{Watch::Kind::fd, this};
    std::coroutine_handle<> handle_;
    Outcome outcome_ = Outcome::waiting;
    bool linked_ = false;   // in the reactor's list (and, with an fd, in the epoll set)
    bool queued_ = false;   // on the ReadyQueue, not yet resumed
    const char* why_ = "";  // cancelled: the reason given to cancel()
    Waiter* prev_ = nullptr;
    Waiter* next_ = nullptr;
};

/// `co_await reactor.readable(fd, deadline)` / `writable(...)`: true when the fd is ready,
/// false when the deadline passed first. \throws CancelledError after cancel()/cancel_waiters().
class FdAwaiter : private Waiter {
  public:
    FdAwaiter(Reactor& reactor, int fd, std::uint32_t events, Clock::time_point deadline) noexcept
        : Waiter(reactor, fd, events, deadline) {}
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> handle) { suspend(handle); }
    bool await_resume();
};

/// `co_await reactor.sleep_for(d)` / `sleep_until(t)`. \throws CancelledError after
/// cancel_waiters().
class SleepAwaiter : private Waiter {
  public:
    SleepAwaiter(Reactor& reactor, Clock::time_point when) noexcept
        : Waiter(reactor, -1, 0, when) {}
    bool await_ready() const noexcept { return Clock::now() >= deadline(); }
    void await_suspend(std::coroutine_handle<> handle) { suspend(handle); }
    void await_resume();
};

/// A TCP peer that accept() or connect() gave: the non-blocking socket and "host:port".
struct TcpPeer {
    Socket socket;
    std::string name;
};

//! [reactor]
/// The one-thread event loop. Each round (run_round):
///   1. wait for work (busy / event / spin, see ReactorSettings);
///   2. route: a ready fd marks its awaiter ready; a readable channel is serviced by step06's
///      protocol and each completion routed to its waiter; expired timers; a signal records the
///      stop; the safety net polls channels quiet for a safety period. All of it only pushes
///      waiting coroutines on the ReadyQueue;
///   3. THEN resume them all (ReadyQueue::resume_all), after every drain of the round.
class Reactor {
  public:
    explicit Reactor(const ReactorSettings& settings);
    /// Destroy every coroutine frame that waits on this reactor first: their awaiters unlink
    /// themselves from it.
    ~Reactor();
    Reactor(const Reactor&) = delete;
    Reactor& operator=(const Reactor&) = delete;

    /// Runs rounds until `done()` is true. done() is called before each round and after each
    /// resume phase: the place for housekeeping (reaping ended connections, watchdogs).
    template <typename Done>
    void run_until(Done&& done) {
        while (!done()) {
            run_round();
        }
    }
    /// One round: wait, route, resume.
    void run_round();

    /// Queues a suspended coroutine (e.g. a top-level Task's handle) to run in the next resume
    /// phase. The caller keeps owning the frame.
    void start(std::coroutine_handle<> handle) { ready_.push(handle); }
    /// start(task.handle()); the caller keeps the Task (its frame) until task.done().
    void spawn(Task<void>& task) { start(task.handle()); }
    [[nodiscard]] ReadyQueue& ready() noexcept { return ready_; }

    /// Watches a connection's completion channel (if it has one) and polls its CQ in busy and
    /// spin modes. The client must stay alive until remove_channel().
    void add_channel(ChannelClient& client);
    /// EPOLL_CTL_DEL of its channel; no call reaches the client after this.
    void remove_channel(ChannelClient& client) noexcept;

    /// Awaiters for the TCP handshake. \p deadline: Clock::time_point::max() for none.
    [[nodiscard]] FdAwaiter readable(int fd,
                                     Clock::time_point deadline = Clock::time_point::max()) {
        return FdAwaiter(*this, fd, EPOLLIN, deadline);
    }
    [[nodiscard]] FdAwaiter writable(int fd,
                                     Clock::time_point deadline = Clock::time_point::max()) {
        return FdAwaiter(*this, fd, EPOLLOUT, deadline);
    }
    [[nodiscard]] SleepAwaiter sleep_until(Clock::time_point when) {
        return SleepAwaiter(*this, when);
    }
    [[nodiscard]] SleepAwaiter sleep_for(Clock::duration duration) {
        return SleepAwaiter(*this, Clock::now() + duration);
    }

    /// Accepts the next client of a non-blocking \p listener (waiting until one comes), with
    /// TCP_NODELAY. \throws std::system_error ("accept4"); CancelledError after cancel(fd).
    Task<TcpPeer> accept(const Socket& listener);
    /// tcp.hpp's connect_to, without blocking: a refused connection is retried every 100 ms
    /// until \p timeout. \throws the same TutorialErrors, with the same messages: kExitPeer
    /// ("cannot connect to HOST port P: ... (tried for N s)"), kExitTimeout, kExitUsage (resolve).
    Task<TcpPeer> connect(const std::string& host, int port, std::chrono::seconds timeout);
    /// tcp.hpp's send_all and receive_all, awaiting the socket instead of poll(); same errors.
    Task<void> send_all(const Socket& peer, std::span<const char> bytes,
                        std::chrono::seconds timeout, const char* what);
    Task<std::size_t> receive_all(const Socket& peer, std::span<char> bytes,
                                  std::chrono::seconds timeout, const char* what);

    /// Resumes every waiter on \p fd with CancelledError \p why (e.g. the listener: stop
    /// accepting).
    void cancel(int fd, const char* why = "cancelled by shutdown");
    /// Resumes every fd and timer waiter with CancelledError (shutdown, step 4).
    void cancel_waiters(const char* why = "cancelled by shutdown");

    /// `int signal = co_await reactor.stop_requested();`: suspends until SIGINT or SIGTERM
    /// arrives (at once if one already did). One awaiting coroutine at a time.
    struct StopAwaiter {
        Reactor& reactor;
        std::coroutine_handle<> waiting{};
        bool resumed = false;
        bool await_ready() const noexcept { return reactor.stop_signal_ != 0; }
        void await_suspend(std::coroutine_handle<> handle) noexcept {
            waiting = handle;
            reactor.stop_waiter_ = handle;
        }
        int await_resume() noexcept {
            resumed = true;
            return reactor.stop_signal_;
        }
        ~StopAwaiter() {  // a frame destroyed while it waits leaves no handle behind
            if (waiting && reactor.stop_waiter_ == waiting) {
                reactor.stop_waiter_ = {};
            } else if (waiting && !resumed) {
                reactor.ready_.forget(waiting);
            }
        }
    };
    [[nodiscard]] StopAwaiter stop_requested() noexcept { return StopAwaiter{*this}; }
    /// SIGINT or SIGTERM once one arrived, else 0.
    [[nodiscard]] int stop_signal() const noexcept { return stop_signal_; }
    /// tcp.hpp's message: \throws TutorialError kExitInterrupted "interrupted by SIGINT".
    void throw_if_stopped() const;

    [[nodiscard]] const ReactorSettings& settings() const noexcept { return settings_; }
    /// How many rounds ran (for tests).
    [[nodiscard]] std::uint64_t rounds() const noexcept { return rounds_; }

  private:
    friend class Waiter;
    int wait_for_work(std::span<epoll_event> ready, bool& timed_out);
    int busy_for_work(std::span<epoll_event> ready);
    int spin_for_work(std::span<epoll_event> ready, bool& sleep);
    std::uint64_t poll_all_channels();
    void dispatch(const epoll_event& event);
    void on_fd_ready(Waiter& waiter);
    void on_signal();
    void expire_timers(Clock::time_point now);
    void safety_net_sweep(bool timed_out, Clock::time_point now);
    void link(Waiter& waiter);
    void unlink(Waiter& waiter) noexcept;
    void wake(Waiter& waiter, Waiter::Outcome outcome);
    void arm_timer();
    void watch(int fd, std::uint32_t events, Watch& watch);

    ReactorSettings settings_;
    ReadyQueue ready_;
    Socket epoll_;
    Socket timer_fd_;
    Socket signal_fd_;
    Watch timer_watch_{Watch::Kind::timer, this};
    Watch signal_watch_{Watch::Kind::signal, this};
    Waiter* waiters_ = nullptr;  // sorted by deadline; those without one at the end
    Waiter* last_waiter_ = nullptr;
    Clock::time_point timer_armed_for_ = Clock::time_point::max();
    ChannelClient* channels_ = nullptr;
    std::coroutine_handle<> stop_waiter_;
    int stop_signal_ = 0;
    Clock::time_point next_sweep_{};
    // Busy and spin: when to ask epoll next. Kept across rounds, so that a round per message
    // does not cost an epoll_wait per message.
    Clock::time_point next_epoll_check_{};
    std::uint64_t rounds_ = 0;
};
//! [reactor]

}  // namespace tutorial
