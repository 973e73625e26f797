// Step 07: the reactor's loop: wait (busy, event or spin), route every ready source, then resume.
#include "reactor.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <utility>

namespace tutorial {

namespace {

[[noreturn]] void throw_errno(const char* what) {
    throw std::system_error(errno, std::generic_category(), what);
}

}  // namespace

ReactorSettings server_reactor_settings(const Options& o) {
    ReactorSettings s;
    s.mode = o.spin_us > 0 ? WaitMode::spin : WaitMode::event;
    s.spin_us = o.spin_us;
    s.safety_ms = o.safety_ms;
    return s;
}

ReactorSettings client_reactor_settings(const Options& o) {
    ReactorSettings s;
    s.mode = o.mode;
    s.spin_us = o.spin_us;
    s.safety_ms = o.safety_ms;
    // step06's client spins on its CQ alone; here a signal or the watchdog waits up to 1 ms.
    s.epoll_check = std::chrono::milliseconds(1);
    return s;
}

// ====================================================================== set-up

Reactor::Reactor(const ReactorSettings& settings)
    : settings_(settings), ready_(settings.max_coroutines) {
    epoll_ = Socket(::epoll_create1(EPOLL_CLOEXEC));
    if (epoll_.get() < 0) {
        throw_errno("epoll_create1");
    }
    // One timerfd for every timer: armed for the earliest deadline (CLOCK_MONOTONIC is
    // steady_clock's clock).
    timer_fd_ = Socket(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (timer_fd_.get() < 0) {
        throw_errno("timerfd_create");
    }
    watch(timer_fd_.get(), EPOLLIN, timer_watch_);
    if (settings.handle_signals) {
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGTERM);
        // As step06: a shell starts background jobs with SIGINT ignored, and an ignored signal is
        // discarded, never queued: restore the default before blocking it.
        ::signal(SIGINT, SIG_DFL);
        ::signal(SIGTERM, SIG_DFL);
        if (::sigprocmask(SIG_BLOCK, &mask, nullptr) != 0) {
            throw_errno("sigprocmask");
        }
        signal_fd_ = Socket(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
        if (signal_fd_.get() < 0) {
            throw_errno("signalfd");
        }
        watch(signal_fd_.get(), EPOLLIN, signal_watch_);
    }
    next_sweep_ = Clock::now() + std::chrono::milliseconds(settings.safety_ms);
}

Reactor::~Reactor() = default;

void Reactor::watch(int fd, std::uint32_t events, Watch& watch) {
    epoll_event ev{};
    ev.events = events;  // level-triggered, as step06
    ev.data.ptr = &watch;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
        throw_errno("epoll_ctl(ADD)");
    }
}

void Reactor::add_channel(ChannelClient& client) {
    if (client.registered_) {
        return;
    }
    if (client.channel_fd() >= 0) {
        watch(client.channel_fd(), EPOLLIN, client.watch_);
    }
    client.prev_ = nullptr;
    client.next_ = channels_;
    if (channels_ != nullptr) {
        channels_->prev_ = &client;
    }
    channels_ = &client;
    client.last_activity_ = Clock::now();
    client.registered_ = true;
}

void Reactor::remove_channel(ChannelClient& client) noexcept {
    if (!client.registered_) {
        return;
    }
    if (client.channel_fd() >= 0) {
        ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, client.channel_fd(), nullptr);
    }
    (client.prev_ != nullptr ? client.prev_->next_ : channels_) = client.next_;
    if (client.next_ != nullptr) {
        client.next_->prev_ = client.prev_;
    }
    client.prev_ = client.next_ = nullptr;
    client.registered_ = false;
}

// ====================================================================== the loop

//! [reactor_loop]
void Reactor::run_round() {
    ++rounds_;
    std::array<epoll_event, 64> events{};
    bool timed_out = false;
    const int n = wait_for_work(events, timed_out);
    // Route: every ready source stores what happened and queues its waiting coroutine.
    for (int i = 0; i < n; ++i) {
        dispatch(events[static_cast<std::size_t>(i)]);
    }
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
            on_fd_ready(*static_cast<Waiter*>(watch.owner));
            break;
        case Watch::Kind::channel: {
            auto& client = *static_cast<ChannelClient*>(watch.owner);
            if (client.on_channel_readable(ready_) > 0) {
                client.last_activity_ = Clock::now();
            }
            break;
        }
        case Watch::Kind::timer: {
            std::uint64_t expirations = 0;  // read it, or the timerfd stays readable
            (void)!::read(timer_fd_.get(), &expirations, sizeof expirations);
            timer_armed_for_ = Clock::time_point::max();
            break;
        }
        case Watch::Kind::signal:
            on_signal();
            break;
    }
}
//! [reactor_loop]

int Reactor::wait_for_work(std::span<epoll_event> ready, bool& timed_out) {
    timed_out = false;
    const int capacity = static_cast<int>(ready.size());
    int n = 0;
    if (!ready_.empty()) {
        n = ::epoll_wait(epoll_.get(), ready.data(), capacity, 0);  // work queued: do not sleep
    } else if (settings_.mode == WaitMode::busy) {
        n = busy_for_work(ready);
    } else {
        bool sleep = true;
        if (settings_.mode == WaitMode::spin && channels_ != nullptr) {
            n = spin_for_work(ready, sleep);
        }
        if (sleep) {
            // Always a timeout: a lost completion event must not hang the loop.
            n = ::epoll_wait(epoll_.get(), ready.data(), capacity, settings_.safety_ms);
            timed_out = n == 0;
        }
    }
    if (n < 0) {
        if (errno == EINTR) {
            return 0;
        }
        throw_errno("epoll_wait");
    }
    return n;
}

//! [busy]
/// Busy mode never sleeps: it polls every CQ, and every 1024 polls (or epoll_check, across rounds)
/// asks epoll, without waiting, for a signal, a timer or a socket, as step06's busy client looks at
/// its stop flag. After --safety-ms with nothing found it returns anyway, so that run_until's
/// housekeeping runs.
int Reactor::busy_for_work(std::span<epoll_event> ready) {
    const auto give_up = Clock::now() + std::chrono::milliseconds(settings_.safety_ms);
    for (std::uint32_t spins = 1;; ++spins) {
        if (poll_all_channels() > 0) {
            return 0;
        }
        if ((spins & 1023) == 0 || channels_ == nullptr || Clock::now() >= next_epoll_check_) {
            next_epoll_check_ = Clock::now() + settings_.epoll_check;
            const int n =
                ::epoll_wait(epoll_.get(), ready.data(), static_cast<int>(ready.size()), 0);
            if (n != 0 || next_epoll_check_ >= give_up) {
                return n;
            }
        }
    }
}
//! [busy]

//! [spin]
/// step06's server spin: poll every CQ until none had work for spin_us, asking epoll (timeout 0)
/// every epoll_check (across rounds: not once per message). A ready channel alone does not end the
/// spin: its event was raised by a completion the spin takes anyway; the sleeping epoll_wait
/// returns it at once afterwards, and its service re-arms and drains (maybe empty). Work found ends
/// the round at once (to resume its coroutine); the next round spins with a fresh window. `sleep`:
/// the window passed.
int Reactor::spin_for_work(std::span<epoll_event> ready, bool& sleep) {
    sleep = false;
    const auto start = Clock::now();
    const auto quiet_until = start + std::chrono::microseconds(settings_.spin_us);
    for (;;) {
        if (poll_all_channels() > 0) {
            return 0;
        }
        const auto now = Clock::now();
        if (now >= next_epoll_check_) {
            next_epoll_check_ = now + settings_.epoll_check;
            const int n =
                ::epoll_wait(epoll_.get(), ready.data(), static_cast<int>(ready.size()), 0);
            const auto is_channel = [](const epoll_event& e) {
                return static_cast<const Watch*>(e.data.ptr)->kind == Watch::Kind::channel;
            };
            if (n < 0 || !std::all_of(ready.begin(), ready.begin() + std::max(n, 0), is_channel)) {
                return n;  // an error, or a socket, timer or signal to handle now
            }
        }
        if (now >= quiet_until) {
            sleep = true;
            return 0;
        }
    }
}
//! [spin]

std::uint64_t Reactor::poll_all_channels() {
    std::uint64_t found = 0;
    for (ChannelClient* c = channels_; c != nullptr; c = c->next_) {
        if (const std::uint64_t n = c->poll_once(ready_); n > 0) {
            found += n;
            c->last_activity_ = Clock::now();
        }
    }
    return found;
}

//! [safety_net]
/// step06's safety net: when epoll_wait timed out, or once per safety period for a channel
/// quiet that long, poll its CQ anyway (AsyncEndpoint::safety_net: a queued event first).
void Reactor::safety_net_sweep(bool timed_out, Clock::time_point now) {
    if (settings_.mode == WaitMode::busy || (!timed_out && now < next_sweep_)) {
        return;
    }
    const auto idle = std::chrono::milliseconds(settings_.safety_ms);
    for (ChannelClient* c = channels_; c != nullptr; c = c->next_) {
        if (c->channel_fd() >= 0 && (timed_out || now - c->last_activity_ >= idle)) {
            if (c->safety_net(ready_) > 0) {
                c->last_activity_ = now;
            }
        }
    }
    next_sweep_ = now + idle;
}
//! [safety_net]

void Reactor::on_signal() {
    signalfd_siginfo info{};
    while (::read(signal_fd_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        if (stop_signal_ == 0) {
            stop_signal_ = static_cast<int>(info.ssi_signo);
        }
    }
    if (stop_signal_ != 0 && stop_waiter_) {
        ready_.push(std::exchange(stop_waiter_, {}));
    }
}

void Reactor::throw_if_stopped() const {
    if (stop_signal_ != 0) {
        throw TutorialError(kExitInterrupted, std::string("interrupted by ") +
                                                  (stop_signal_ == SIGTERM ? "SIGTERM" : "SIGINT"));
    }
}

// ====================================================================== fd and timer waiters

// The list of waiters is sorted by deadline, those without one (time_point::max()) at its end:
// its head is the next timer.
void Reactor::link(Waiter& waiter) {
    if (waiter.fd_ >= 0) {
        watch(waiter.fd_, waiter.events_, waiter.watch_);  // first: it may throw
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
    arm_timer();
}

void Reactor::unlink(Waiter& waiter) noexcept {
    if (!waiter.linked_) {
        return;
    }
    if (waiter.fd_ >= 0) {
        ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, waiter.fd_, nullptr);
    }
    (waiter.prev_ != nullptr ? waiter.prev_->next_ : waiters_) = waiter.next_;
    (waiter.next_ != nullptr ? waiter.next_->prev_ : last_waiter_) = waiter.prev_;
    waiter.prev_ = waiter.next_ = nullptr;
    waiter.linked_ = false;
}

void Reactor::wake(Waiter& waiter, Waiter::Outcome outcome) {
    unlink(waiter);
    waiter.outcome_ = outcome;
    waiter.queued_ = true;
    ready_.push(waiter.handle_);
}

void Reactor::on_fd_ready(Waiter& waiter) {
    if (waiter.outcome_ == Waiter::Outcome::waiting) {
        wake(waiter, Waiter::Outcome::ready);
    }
}

void Reactor::expire_timers(Clock::time_point now) {
    while (waiters_ != nullptr && waiters_->deadline_ <= now) {
        wake(*waiters_, Waiter::Outcome::timed_out);
    }
    arm_timer();
}

// Arms the timerfd for the earliest deadline (absolute, so that it never drifts).
void Reactor::arm_timer() {
    const Clock::time_point next =
        waiters_ != nullptr ? waiters_->deadline_ : Clock::time_point::max();
    if (next == timer_armed_for_ || next == Clock::time_point::max()) {
        return;  // already armed for it, or no timer (a stale expiry is harmless)
    }
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(next.time_since_epoch());
    itimerspec spec{};
    spec.it_value.tv_sec =
        static_cast<time_t>(std::max<std::int64_t>(ns.count(), 1) / 1'000'000'000);
    spec.it_value.tv_nsec =
        static_cast<long>(std::max<std::int64_t>(ns.count(), 1) % 1'000'000'000);
    if (::timerfd_settime(timer_fd_.get(), TFD_TIMER_ABSTIME, &spec, nullptr) != 0) {
        throw_errno("timerfd_settime");
    }
    timer_armed_for_ = next;
}

void Reactor::cancel(int fd, const char* why) {
    for (Waiter* w = waiters_; w != nullptr;) {
        Waiter* next = w->next_;
        if (w->fd_ == fd) {
            w->why_ = why;
            wake(*w, Waiter::Outcome::cancelled);
        }
        w = next;
    }
}

void Reactor::cancel_waiters(const char* why) {
    while (waiters_ != nullptr) {
        waiters_->why_ = why;
        wake(*waiters_, Waiter::Outcome::cancelled);
    }
}

void Waiter::suspend(std::coroutine_handle<> handle) {
    handle_ = handle;
    outcome_ = Outcome::waiting;
    reactor_.link(*this);
}

Waiter::~Waiter() {
    reactor_.unlink(*this);
    if (queued_) {
        reactor_.ready_.forget(handle_);
    }
}

bool FdAwaiter::await_resume() {
    resumed();
    if (outcome() == Outcome::cancelled) {
        throw CancelledError(why());
    }
    return outcome() == Outcome::ready;
}

void SleepAwaiter::await_resume() {
    resumed();
    if (outcome() == Outcome::cancelled) {
        throw CancelledError(why());
    }
}

// ====================================================================== TCP, awaited

//! [accept]
Task<TcpPeer> Reactor::accept(const Socket& listener) {
    for (;;) {
        sockaddr_storage address{};
        socklen_t length = sizeof address;
        TcpPeer client{Socket(::accept4(listener.get(), reinterpret_cast<sockaddr*>(&address),
                                        &length, SOCK_NONBLOCK | SOCK_CLOEXEC)),
                       {}};
        if (client.socket.get() >= 0) {
            const int one = 1;
            ::setsockopt(client.socket.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            client.name = endpoint_text(reinterpret_cast<const sockaddr*>(&address), length);
            co_return std::move(client);
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED && errno != EINTR) {
            throw_errno("accept4");
        }
        co_await readable(listener.get());  // no client yet: wait for the next one
    }
}
//! [accept]

namespace {

// tcp.hpp's message for a connect that failed; ECONNREFUSED gets its hint.
[[noreturn]] void throw_connect_failed(const std::string& host, int port,
                                       std::chrono::seconds timeout, int error) {
    const std::string what = "cannot connect to " + host + " port " + std::to_string(port) + ": " +
                             std::strerror(error) + " (tried for " +
                             std::to_string(timeout.count()) + " s)";
    if (error == ECONNREFUSED) {
        throw TutorialError(kExitPeer, what,
                            "no server listens there: start the server first, or check -p");
    }
    throw TutorialError(error == ETIMEDOUT ? kExitTimeout : kExitPeer, what);
}

}  // namespace

//! [connect]
Task<TcpPeer> Reactor::connect(const std::string& host, int port, std::chrono::seconds timeout) {
    const AddressList addresses(host.c_str(), port, false);
    const Clock::time_point deadline = Clock::now() + timeout;
    int last_error = 0;
    for (;;) {
        for (const addrinfo* a = addresses.list; a != nullptr; a = a->ai_next) {
            TcpPeer server{
                Socket(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                                a->ai_protocol)),
                {}};
            const Socket& peer = server.socket;
            if (peer.get() < 0) {
                last_error = errno;
                continue;
            }
            int error = ::connect(peer.get(), a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
            if (error == EINPROGRESS || error == EINTR) {
                // Non-blocking connect: writable once it is done; SO_ERROR says how it went.
                const bool done = co_await writable(peer.get(), deadline);
                socklen_t length = sizeof error;
                if (!done || ::getsockopt(peer.get(), SOL_SOCKET, SO_ERROR, &error, &length) != 0) {
                    error = ETIMEDOUT;
                }
            }
            if (error == 0) {
                const int one = 1;
                ::setsockopt(peer.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                server.name = endpoint_text(a->ai_addr, a->ai_addrlen);
                co_return std::move(server);
            }
            last_error = error;
        }
        if (last_error != ECONNREFUSED || Clock::now() >= deadline) {
            throw_connect_failed(host, port, timeout, last_error);
        }
        // Nobody listens yet: the server may still be starting. Try again shortly.
        co_await sleep_until(std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
    }
}
//! [connect]

Task<void> Reactor::send_all(const Socket& peer, std::span<const char> bytes,
                             std::chrono::seconds timeout, const char* what) {
    const Clock::time_point deadline = Clock::now() + timeout;
    while (!bytes.empty()) {
        const ssize_t sent = ::send(peer.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (sent > 0) {
            bytes = bytes.subspan(static_cast<std::size_t>(sent));
        } else if (errno == EAGAIN || errno == EINTR) {
            if (!co_await writable(peer.get(), deadline)) {
                throw TutorialError(kExitTimeout, std::string("timed out sending ") + what);
            }
        } else {
            throw TutorialError(kExitPeer, std::string("cannot send ") + what + ": " +
                                               std::strerror(errno) + " (the peer went away)");
        }
    }
}

Task<std::size_t> Reactor::receive_all(const Socket& peer, std::span<char> bytes,
                                       std::chrono::seconds timeout, const char* what) {
    const Clock::time_point deadline = Clock::now() + timeout;
    std::size_t received = 0;
    while (received < bytes.size()) {
        const ssize_t got = ::recv(peer.get(), bytes.data() + received, bytes.size() - received, 0);
        if (got > 0) {
            received += static_cast<std::size_t>(got);
        } else if (got == 0) {
            break;  // the peer closed the connection
        } else if (errno == EAGAIN || errno == EINTR) {
            if (!co_await readable(peer.get(), deadline)) {
                throw TutorialError(kExitTimeout,
                                    std::string("timed out after ") +
                                        std::to_string(timeout.count()) + " s waiting for " + what +
                                        " (got " + std::to_string(received) + " of " +
                                        std::to_string(bytes.size()) + " bytes)",
                                    "the peer connected but does not speak the handshake: is it "
                                    "ibv_rc_pingpong-compatible?");
            }
        } else {
            throw TutorialError(kExitPeer,
                                std::string("cannot read ") + what + ": " + std::strerror(errno));
        }
    }
    co_return received;
}

}  // namespace tutorial
