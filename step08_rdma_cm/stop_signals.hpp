// Step 08: step06's Ctrl-C handling and its ppoll wait (tcp.hpp's, without the sockets).
#pragma once

#include "errors.hpp"

#include <poll.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <ctime>
#include <string>
#include <system_error>

namespace tutorial {

using Clock = std::chrono::steady_clock;

// SIGINT/SIGTERM set this flag; every wait checks it, so ^C ends the program through main().
inline volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" inline void on_stop_signal(int signal_number) { g_stop_signal = signal_number; }

// True when the signal is ignored (SIG_IGN). At start-up only a parent can have set that, and it
// did so on purpose: nohup, or a shell running a background job without job control, ignores
// SIGINT so that a ^C in the terminal spares this process. The program keeps it ignored.
[[nodiscard]] inline bool ignored_by_parent(int signal_number) {
    struct sigaction current {};
    return sigaction(signal_number, nullptr, &current) == 0 && current.sa_handler == SIG_IGN;
}

inline void install_stop_handlers() {
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;  // no SA_RESTART: a blocked read or poll returns EINTR
    for (const int signal_number : {SIGINT, SIGTERM}) {
        if (!ignored_by_parent(signal_number)) sigaction(signal_number, &action, nullptr);
    }
}

inline void throw_if_stopped() {
    if (g_stop_signal != 0) {
        throw TutorialError(kExitInterrupted, std::string("interrupted by ") +
                                                  (g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM"));
    }
}

// Blocks SIGINT and SIGTERM for its lifetime, and gives the mask they had before.
class StopSignalsBlocked {
  public:
    StopSignalsBlocked() {
        sigset_t stop_signals;
        sigemptyset(&stop_signals);
        sigaddset(&stop_signals, SIGINT);
        sigaddset(&stop_signals, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &stop_signals, &before_);
    }
    StopSignalsBlocked(const StopSignalsBlocked&) = delete;
    StopSignalsBlocked& operator=(const StopSignalsBlocked&) = delete;
    ~StopSignalsBlocked() { pthread_sigmask(SIG_SETMASK, &before_, nullptr); }
    [[nodiscard]] const sigset_t& before() const noexcept { return before_; }

  private:
    sigset_t before_{};
};

// poll() on one fd, ended by SIGINT or SIGTERM however close to the call they land: the signals
// stay blocked from the flag check until ppoll() unblocks them atomically, so a signal that came
// in between is delivered inside ppoll(), which then returns EINTR at once. (With a plain check
// then poll(), it would wait out the whole timeout.) Returns ppoll's result; throws
// TutorialError(kExitInterrupted) once a stop signal has arrived.
inline int poll_unless_stopped(pollfd& entry, std::chrono::nanoseconds timeout) {
    const StopSignalsBlocked blocked;
    throw_if_stopped();
    timeout = std::max(timeout, std::chrono::nanoseconds(0));
    const timespec wait{static_cast<time_t>(timeout.count() / 1'000'000'000),
                        static_cast<long>(timeout.count() % 1'000'000'000)};
    const int ready = ::ppoll(&entry, 1, &wait, &blocked.before());
    if (ready < 0 && errno != EINTR) {
        throw std::system_error(errno, std::generic_category(), "ppoll");
    }
    throw_if_stopped();
    return ready;
}

// Waits until fd is readable (POLLIN) or writable (POLLOUT). False when the deadline passed.
[[nodiscard]] inline bool wait_for(int fd, short events, Clock::time_point deadline) {
    for (;;) {
        pollfd entry{fd, events, 0};
        const int ready = poll_unless_stopped(entry, deadline - Clock::now());
        if (ready > 0) { return true; }
        if (ready == 0) { return false; }
    }
}

}  // namespace tutorial
