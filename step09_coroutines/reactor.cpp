// Step 09: the reactor's loop: wait in epoll_pwait2, route every ready source, then resume.
#include "reactor.hpp"

#include <signal.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <string>
#include <system_error>

namespace tutorial {

Reactor::Reactor(std::chrono::milliseconds safety_period)
    : safety_period_(safety_period), ready_(kReadyCapacity) {
    epoll_ = Socket(::epoll_create1(EPOLL_CLOEXEC));
    if (epoll_.get() < 0) {
        throw std::system_error(errno, std::generic_category(), "epoll_create1");
    }
    next_sweep_ = Clock::now() + safety_period_;
}

void Reactor::watch(int fd, Watch& watch) {
    epoll_event ev{};
    ev.events = EPOLLIN;  // level-triggered, as step06
    ev.data.ptr = &watch;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
        throw std::system_error(errno, std::generic_category(), "epoll_ctl(ADD)");
    }
}

void Reactor::add_channel(ChannelClient& client) {
    watch(client.channel_fd(), client.watch_);
    client.watched_ = true;
    client.next_ = channels_;
    if (channels_ != nullptr) { channels_->prev_ = &client; }
    channels_ = &client;
    client.last_activity_ = Clock::now();
}

bool Reactor::remove_channel(ChannelClient& c) noexcept {
    if (!c.watched_) { return false; }
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.channel_fd(), nullptr);
    (c.prev_ != nullptr ? c.prev_->next_ : channels_) = c.next_;
    if (c.next_ != nullptr) { c.next_->prev_ = c.prev_; }
    c.prev_ = c.next_ = nullptr;
    c.watched_ = false;
    return true;
}

// ====================================================================== the loop

namespace {

// epoll_pwait2 (Linux 5.11, glibc 2.35): epoll_pwait with a timeout in nanoseconds, so timers
// keep theirs. Built without it, or run on an older kernel (ENOSYS) or under a system-call
// filter that does not know it (EPERM): epoll_pwait, to the
// millisecond, rounded up. Returns -1 when a signal interrupted the wait (EINTR).
int wait_for_events(int epoll_fd, std::span<epoll_event> events, Clock::duration timeout,
                    const sigset_t& mask) {
    const int max_events = static_cast<int>(events.size());
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
    static std::atomic<bool> kernel_has_it{true};  // until ENOSYS (or a filter's EPERM) says not
    if (kernel_has_it) {
        const auto seconds = std::chrono::floor<std::chrono::seconds>(timeout);
        const timespec wait{static_cast<time_t>(seconds.count()),
                            static_cast<long>(std::chrono::nanoseconds(timeout - seconds).count())};
        const int n = ::epoll_pwait2(epoll_fd, events.data(), max_events, &wait, &mask);
        if (n >= 0 || errno == EINTR) return n;
        if (errno != ENOSYS && errno != EPERM)
            throw std::system_error(errno, std::generic_category(), "epoll_pwait2");
        kernel_has_it = false;
    }
#endif
    const int n =
        ::epoll_pwait(epoll_fd, events.data(), max_events, epoll_timeout_ms(timeout), &mask);
    if (n < 0 && errno != EINTR)
        throw std::system_error(errno, std::generic_category(), "epoll_pwait");
    return n;
}

}  // namespace

//! [reactor_loop]
void Reactor::run_round(const sigset_t& wait_mask) {
    std::array<epoll_event, 64> events{};
    // Work queued: do not sleep. Otherwise until the next timer, at most a safety period: a lost
    // completion event must not hang the loop. SIGINT/SIGTERM get in only here (wait_mask
    // unblocks them).
    const Clock::duration timeout = ready_.empty()
                                        ? std::min<Clock::duration>(safety_period_, to_next_timer())
                                        : Clock::duration::zero();
    const int n = wait_for_events(epoll_.get(), events, timeout, wait_mask);  // -1: EINTR
    const bool timed_out =
        n == 0 && timeout == safety_period_;  // a timer's end is no safety period
    // Route: every ready source stores what happened and queues its waiting coroutine.
    for (int i = 0; i < n; ++i) { dispatch(events[static_cast<std::size_t>(i)]); }
    const auto now = Clock::now();
    expire_timers(now);
    safety_net_sweep(timed_out, now);
    // THEN resume: every CQ of this round is drained, no poll loop is on the stack.
    ready_.resume_all();
}

void Reactor::dispatch(const epoll_event& event) {
    Watch& watch = *static_cast<Watch*>(event.data.ptr);
    switch (watch.kind) {
        case Watch::Kind::fd:
            if (Waiter* w = static_cast<FdWatch*>(watch.owner)->waiter_) {
                wake(*w, Waiter::Outcome::ready);
            }
            break;
        case Watch::Kind::channel: {
            auto& client = *static_cast<ChannelClient*>(watch.owner);
            if (client.on_channel_readable(ready_) > 0) { client.last_activity_ = Clock::now(); }
            break;
        }
    }
}
//! [reactor_loop]

/// step06's safety net: when epoll_pwait2 timed out, or once per safety period for a channel
/// quiet that long, poll its CQ anyway (AsyncEndpoint::safety_net: a queued event first).
void Reactor::safety_net_sweep(bool timed_out, Clock::time_point now) {
    if (!timed_out && now < next_sweep_) { return; }
    for (ChannelClient* c = channels_; c != nullptr; c = c->next_) {
        if (timed_out || now - c->last_activity_ >= safety_period_) {
            if (c->safety_net(ready_) > 0) { c->last_activity_ = now; }
        }
    }
    next_sweep_ = now + safety_period_;
}

// ====================================================================== fd and timer waiters

// The list of waiters is sorted by deadline, those without one (time_point::max()) at its end:
// its head is the next timer.
void Reactor::link(Waiter& waiter) {
    if (waiter.fd_ != nullptr) {
        watch(waiter.fd_->fd_, waiter.fd_->watch_);  // first: it may throw
        waiter.fd_->waiter_ = &waiter;
    }
    Waiter* after = nullptr;  // insert after the last waiter due no later than this one
    if (waiter.deadline_ == Clock::time_point::max()) {
        after = last_waiter_;
    } else {
        for (Waiter* w = waiters_; w != nullptr && w->deadline_ <= waiter.deadline_; w = w->next_) {
            after = w;
        }
    }
    waiter.prev_ = after;
    waiter.next_ = after != nullptr ? after->next_ : waiters_;
    (after != nullptr ? after->next_ : waiters_) = &waiter;
    (waiter.next_ != nullptr ? waiter.next_->prev_ : last_waiter_) = &waiter;
    waiter.linked_ = true;
}

// The fd leaves the epoll set while its FdWatch, and so the fd, still exists.
void Reactor::unlink(Waiter& waiter) noexcept {
    if (!waiter.linked_) { return; }
    if (waiter.fd_ != nullptr && waiter.fd_->waiter_ == &waiter) {
        ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, waiter.fd_->fd_, nullptr);
        waiter.fd_->waiter_ = nullptr;
    }
    (waiter.prev_ != nullptr ? waiter.prev_->next_ : waiters_) = waiter.next_;
    (waiter.next_ != nullptr ? waiter.next_->prev_ : last_waiter_) = waiter.prev_;
    waiter.prev_ = waiter.next_ = nullptr;
    waiter.linked_ = false;
}

void Reactor::wake(Waiter& waiter, Waiter::Outcome outcome) {
    ready_.push(waiter.handle_);  // first: if the queue cannot grow, the waiter stays as it was
    unlink(waiter);
    waiter.outcome_ = outcome;
    waiter.queued_ = true;
}

void Reactor::expire_timers(Clock::time_point now) {
    while (waiters_ != nullptr && waiters_->deadline_ <= now) {
        wake(*waiters_, Waiter::Outcome::timed_out);
    }
}

// Until the earliest deadline (the list's head), 0 when it has passed; the maximum without one.
Clock::duration Reactor::to_next_timer() const {
    return waiters_ != nullptr ? std::max(waiters_->deadline_ - Clock::now(), Clock::duration{0})
                               : Clock::duration::max();
}

void Reactor::cancel_waiters() {
    while (waiters_ != nullptr) { wake(*waiters_, Waiter::Outcome::cancelled); }
}

FdWatch::~FdWatch() {
    Waiter* w = waiter_;
    if (w == nullptr) { return; }
    try {
        reactor_.wake(*w, Waiter::Outcome::cancelled);
    } catch (const std::exception& e) {  // the ReadyQueue could not grow: say so, never throw
        std::fprintf(stderr, "FdWatch: %s\n", e.what());
    }
    w->fd_ = nullptr;  // its frame, destroyed later, touches neither this nor the fd
}

void Waiter::suspend(std::coroutine_handle<> handle) {
    handle_ = handle;
    reactor_.link(*this);
}

bool Waiter::fd_busy() const noexcept { return fd_ != nullptr && fd_->waiter_ != nullptr; }

Waiter::Outcome Waiter::resumed() {
    queued_ = false;
    if (!handle_ && fd_busy()) {  // await_ready() said so: it never suspended
        throw std::logic_error("Reactor: a second coroutine awaits fd " + std::to_string(fd_->fd_) +
                               " while one already does");
    }
    if (outcome_ == Outcome::cancelled) { throw CancelledError(); }
    return outcome_;
}

Waiter::~Waiter() {
    reactor_.unlink(*this);
    if (queued_) { reactor_.ready_.forget(handle_); }
}

}  // namespace tutorial
