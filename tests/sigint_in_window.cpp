// sigint_in_window.so: an LD_PRELOAD seam for tests/sigint_in_tcp_wait.sh. At the first poll()
// or ppoll() that waits for POLLIN, it writes "sigint_in_window: SIGINT before the wait" to
// stderr and raises SIGINT, then makes the real call: the signal lands after the program's
// stop-flag check and before its wait, the window a plain "check the flag, then poll()" loses
// it in. When the program exits, it writes "sigint_in_window: exit N ms after the SIGINT". It
// wraps libc's poll functions only, never libibverbs.
#include <dlfcn.h>
#include <poll.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace {

timespec raised_at{};

long long milliseconds_since(const timespec& then) {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - then.tv_sec) * 1000LL + (now.tv_nsec - then.tv_nsec) / 1'000'000;
}

void report_exit() {
    char line[80];
    const int n =
        std::snprintf(line, sizeof line, "sigint_in_window: exit %lld ms after the SIGINT\n",
                      milliseconds_since(raised_at));
    (void)!write(2, line, static_cast<std::size_t>(n));
}

void raise_sigint_once(const pollfd* fds, nfds_t count) {
    static bool raised = false;
    bool pollin = false;
    for (nfds_t i = 0; i < count; ++i) { pollin = pollin || (fds[i].events & POLLIN) != 0; }
    if (raised || !pollin) { return; }
    raised = true;
    static const char line[] = "sigint_in_window: SIGINT before the wait\n";
    (void)!write(2, line, sizeof line - 1);
    clock_gettime(CLOCK_MONOTONIC, &raised_at);
    std::atexit(report_exit);
    std::raise(SIGINT);  // blocked: pending until the wait unblocks it; else handled right here
}

}  // namespace

extern "C" {

int poll(pollfd* fds, nfds_t count, int timeout_ms) {
    using Poll = int (*)(pollfd*, nfds_t, int);
    static const auto real_poll = reinterpret_cast<Poll>(dlsym(RTLD_NEXT, "poll"));
    raise_sigint_once(fds, count);
    return real_poll(fds, count, timeout_ms);
}

int ppoll(pollfd* fds, nfds_t count, const timespec* timeout, const sigset_t* mask) {
    using Ppoll = int (*)(pollfd*, nfds_t, const timespec*, const sigset_t*);
    static const auto real_ppoll = reinterpret_cast<Ppoll>(dlsym(RTLD_NEXT, "ppoll"));
    raise_sigint_once(fds, count);
    return real_ppoll(fds, count, timeout, mask);
}

}  // extern "C"
