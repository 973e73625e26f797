// Step 09: the one-thread reactor: one epoll set; it resumes coroutines only after the drain.
#pragma once

#include <infiniband/verbs.h>
#include <sys/epoll.h>

#include <algorithm>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include "cq_events.hpp"
#include "errors.hpp"
#include "task.hpp"
#include "tcp.hpp"

namespace tutorial {

/// The coroutines that may run: a ring of handles. When it is full, push doubles it, so it never
/// refuses a coroutine however many are ready in one round; it allocates only when a round has
/// more ready than any before, never per message.
class ReadyQueue {
  public:
    explicit ReadyQueue(std::size_t initial_capacity)
        : ring_(std::max<std::size_t>(initial_capacity, 1)) {}

    /// \throws std::bad_alloc only, when the ring must grow and cannot.
    void push(std::coroutine_handle<> handle) {
        if (size_ == ring_.size()) { grow(); }
        ring_[(head_ + size_) % ring_.size()] = handle;
        ++size_;
    }
    /// Resumes every queued coroutine, oldest first, until the queue is empty (a resumed
    /// coroutine may queue others, e.g. by starting them). Skips forgotten entries.
    void resume_all() {
        while (size_ != 0) {
            const std::coroutine_handle<> handle = ring_[head_];
            head_ = (head_ + 1) % ring_.size();
            --size_;
            if (handle) { handle.resume(); }
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
    [[nodiscard]] bool empty() const noexcept { return size_ == 0; }

  private:
    // Twice the size, the entries copied oldest first from index 0.
    void grow() {
        std::vector<std::coroutine_handle<>> bigger(2 * ring_.size());
        for (std::size_t i = 0; i < size_; ++i) { bigger[i] = ring_[(head_ + i) % ring_.size()]; }
        ring_ = std::move(bigger);
        head_ = 0;
    }

    std::vector<std::coroutine_handle<>> ring_;
    std::size_t head_ = 0;
    std::size_t size_ = 0;
};

//! [drain_then_resume]
/// step06's channel protocol (cq_events.hpp's service_channel: the event, re-arm,
/// drain, ack in batches), with each completion ROUTED, never resumed: `route(wc)` stores the
/// completion in its waiter's state and returns the waiting coroutine (or a null handle), which
/// goes on the ReadyQueue. Nothing runs inside the drain, so a coroutine that posts, or ends and
/// lets its QP be destroyed, never does so under a poll loop that still uses that CQ. The
/// reactor resumes the queue once every channel of its round is drained.
template <typename Source, typename Route>
std::uint64_t service_and_route(Source& source, CqEventTracker& tracker, std::span<ibv_wc> batch,
                                Route&& route, ReadyQueue& ready) {
    return service_channel(source, tracker, batch, [&](const ibv_wc& wc) {
        if (const std::coroutine_handle<> waiter = route(wc)) { ready.push(waiter); }
    });
}
//! [drain_then_resume]

/// A wait that cancel_waiters() or the end of its FdWatch ended. Exit kExitInterrupted.
class CancelledError : public TutorialError {
  public:
    CancelledError() : TutorialError(kExitInterrupted, "the wait was cancelled") {}
};

/// What an epoll entry's data.ptr points at: which kind of source, and its owner.
struct Watch {
    enum class Kind : std::uint8_t { fd, channel };
    Kind kind;
    void* owner;  // fd: the FdWatch; channel: the ChannelClient
};

class Reactor;
class Waiter;

/// The right to await an fd: while a coroutine waits on it, the fd is in the reactor's epoll set.
/// Declare it AFTER the fd's owner (a Socket), so that C++ destroys it first: its destructor
/// ends any wait (CancelledError) and takes the fd out of the set while the fd is still open. A
/// removal by fd number after the close could hit another fd that was given the same number.
class FdWatch {
  public:
    FdWatch(Reactor& reactor, int fd) noexcept : reactor_(reactor), fd_(fd) {}
    ~FdWatch();
    FdWatch(const FdWatch&) = delete;
    FdWatch& operator=(const FdWatch&) = delete;

  private:
    friend class Reactor;
    friend class Waiter;
    Reactor& reactor_;
    int fd_;
    Watch watch_{Watch::Kind::fd, this};
    Waiter* waiter_ = nullptr;  // one coroutine at a time
};

/// A connection's completion queue as the reactor sees it (AsyncEndpoint). The reactor calls
/// these in its routing phase only: they route completions (ReadyQueue pushes), resume nothing.
class ChannelClient {
  public:
    [[nodiscard]] virtual int channel_fd() const noexcept = 0;
    /// The channel is readable: step06's protocol through service_and_route(); the completions.
    virtual std::uint64_t on_channel_readable(ReadyQueue& ready) = 0;
    /// Quiet for a safety period: any queued event first, then cq_events.hpp's safety_net_poll().
    /// Returns the completions it found without an event.
    virtual std::uint64_t safety_net(ReadyQueue& ready) = 0;

  protected:
    ~ChannelClient() = default;

  private:
    friend class Reactor;
    Watch watch_{Watch::Kind::channel, this};
    bool watched_ = false;           // in the reactor's epoll set and list (add_channel())
    ChannelClient* prev_ = nullptr;  // the reactor's list of channels: intrusive, no allocation
    ChannelClient* next_ = nullptr;
    Clock::time_point last_activity_{};
};

/// What an fd or timer awaiter keeps in the awaiting coroutine's frame (no allocation): the
/// reactor links it into its list of waiters, sorted by deadline, and watches its fd meanwhile.
class Waiter {
  public:
    enum class Outcome : std::uint8_t { waiting, ready, timed_out, cancelled };
    Waiter(const Waiter&) = delete;
    Waiter& operator=(const Waiter&) = delete;

  protected:
    Waiter(Reactor& reactor, FdWatch* fd, Clock::time_point deadline) noexcept
        : reactor_(reactor), fd_(fd), deadline_(deadline) {}
    ~Waiter();  // a frame destroyed while it waits: unlinked, its epoll entry and queue entry gone
    void suspend(std::coroutine_handle<> handle);  // links it (and watches the fd)
    /// After the resume: \throws CancelledError when cancelled; std::logic_error when it did not
    /// suspend because another coroutine waits on its fd.
    Outcome resumed();
    [[nodiscard]] bool fd_busy() const noexcept;
    [[nodiscard]] Clock::time_point deadline() const noexcept { return deadline_; }

  private:
    friend class Reactor;
    friend class FdWatch;
    Reactor& reactor_;
    FdWatch* fd_;                 // null: a pure timer (or its FdWatch is gone)
    Clock::time_point deadline_;  // Clock::time_point::max(): none
    std::coroutine_handle<> handle_;
    Outcome outcome_ = Outcome::waiting;
    bool linked_ = false;  // in the reactor's list (and, with an fd, in the epoll set)
    bool queued_ = false;  // on the ReadyQueue, not yet resumed
    Waiter* prev_ = nullptr;
    Waiter* next_ = nullptr;
};

/// `co_await reactor.readable(watch, deadline)`: true when the fd is ready, false when the
/// deadline passed first. \throws CancelledError after cancel_waiters() or the end of its
/// FdWatch; std::logic_error when another coroutine already awaits the same FdWatch.
class FdAwaiter : private Waiter {
  public:
    FdAwaiter(Reactor& reactor, FdWatch& fd, Clock::time_point deadline) noexcept
        : Waiter(reactor, &fd, deadline) {}
    /// True only when another coroutine waits on the fd: await_resume() then throws.
    bool await_ready() const noexcept { return fd_busy(); }
    void await_suspend(std::coroutine_handle<> handle) { suspend(handle); }
    bool await_resume() { return resumed() == Outcome::ready; }
};

/// `co_await reactor.sleep_until(t)`. \throws CancelledError after cancel_waiters().
class SleepAwaiter : private Waiter {
  public:
    SleepAwaiter(Reactor& reactor, Clock::time_point when) noexcept
        : Waiter(reactor, nullptr, when) {}
    bool await_ready() const noexcept { return Clock::now() >= deadline(); }
    void await_suspend(std::coroutine_handle<> handle) { suspend(handle); }
    void await_resume() { (void)resumed(); }
};

/// epoll_pwait's timeout, where epoll_pwait2 is missing: whole milliseconds, rounded up so that
/// no timer fires early (a zero stays zero: do not sleep), at most INT_MAX.
[[nodiscard]] inline int epoll_timeout_ms(Clock::duration timeout) {
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(timeout).count();
    return static_cast<int>(std::clamp<decltype(ms)>(ms, 0, std::numeric_limits<int>::max()));
}

/// The one-thread event loop. Each round (run_round) waits in epoll_pwait2, routes every ready
/// source (pushes on the ReadyQueue), THEN resumes the queue. SIGINT and SIGTERM (tcp.hpp's
/// handlers set g_stop_signal) are blocked while it runs and let in only inside epoll_pwait2, so
/// one that comes at any other moment ends the next wait at once.
class Reactor {
  public:
    /// The ReadyQueue's first capacity; it grows when more coroutines are ready in one round.
    static constexpr std::size_t kReadyCapacity = 4096;
    /// \p safety_period: epoll_pwait2's timeout and the safety net's period (--safety-ms).
    explicit Reactor(std::chrono::milliseconds safety_period);

    /// Runs rounds until `done()` is true. done() is called before each round, after its resume
    /// phase: the place for housekeeping (reaping ended connections) and for g_stop_signal.
    template <typename Done>
    void run_until(Done&& done) {
        const StopSignalsBlocked blocked;  // restored when run_until returns
        while (!done()) { run_round(blocked.before()); }
    }

    /// Queues a top-level task's coroutine to run in the next resume phase; the caller keeps the
    /// Task (its frame) until task.done().
    void spawn(Task<void>& task) { ready_.push(task.handle()); }
    [[nodiscard]] ReadyQueue& ready() noexcept { return ready_; }

    /// The awaiter for a readable socket. \p deadline: Clock::time_point::max() for none.
    [[nodiscard]] FdAwaiter readable(FdWatch& fd,
                                     Clock::time_point deadline = Clock::time_point::max()) {
        return FdAwaiter(*this, fd, deadline);
    }
    [[nodiscard]] SleepAwaiter sleep_until(Clock::time_point when) {
        return SleepAwaiter(*this, when);
    }

    /// Resumes every fd and timer waiter with CancelledError (shutdown, step 4).
    void cancel_waiters();

    /// \p client's channel joins the epoll set and the safety net's list. As an FdWatch's, it
    /// must leave (remove_channel()) while its fd is still open.
    void add_channel(ChannelClient& client);
    /// EPOLL_CTL_DEL, and out of the list: no call reaches \p client after this. False when it
    /// was not in.
    bool remove_channel(ChannelClient& client) noexcept;

  private:
    friend class Waiter;
    friend class FdWatch;
    void run_round(const sigset_t& wait_mask);
    void dispatch(const epoll_event& event);
    void expire_timers(Clock::time_point now);
    void safety_net_sweep(bool timed_out, Clock::time_point now);
    void link(Waiter& waiter);
    void unlink(Waiter& waiter) noexcept;
    void wake(Waiter& waiter, Waiter::Outcome outcome);
    [[nodiscard]] Clock::duration to_next_timer() const;
    void watch(int fd, Watch& watch);

    std::chrono::milliseconds safety_period_;
    ReadyQueue ready_;
    Socket epoll_;
    Waiter* waiters_ = nullptr;  // sorted by deadline; those without one at the end
    Waiter* last_waiter_ = nullptr;
    ChannelClient* channels_ = nullptr;
    Clock::time_point next_sweep_{};
};

}  // namespace tutorial
