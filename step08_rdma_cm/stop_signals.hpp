// Step 08: step06's Ctrl-C handling (tcp.hpp's, without the sockets), and the client's alarm.
#pragma once

#include "errors.hpp"

#include <signal.h>

#include <chrono>
#include <csignal>
#include <string>

namespace tutorial {

using Clock = std::chrono::steady_clock;

// SIGINT/SIGTERM set this flag; every wait checks it, so ^C ends the program through main().
inline volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" inline void on_stop_signal(int signal_number) { g_stop_signal = signal_number; }

// SIGALRM: the client's --timeout over the CM calls that block (rdma_connect).
inline volatile std::sig_atomic_t g_alarm_rang = 0;
extern "C" inline void on_alarm(int /*signal_number*/) { g_alarm_rang = 1; }

inline void install_stop_handlers() {
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;  // no SA_RESTART: a blocked read or poll returns EINTR
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
    action.sa_handler = on_alarm;
    sigaction(SIGALRM, &action, nullptr);
}

inline void throw_if_stopped() {
    if (g_stop_signal != 0) {
        throw TutorialError(kExitInterrupted, std::string("interrupted by ") +
                                                  (g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM"));
    }
}

}  // namespace tutorial
