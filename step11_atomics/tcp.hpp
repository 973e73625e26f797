// TCP for the handshake: sockets with deadlines, Ctrl-C, listen, accept, connect, send and receive.
#pragma once

#include "errors.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <utility>

namespace tutorial {

//! [socket]
// A TCP socket that closes itself: the handshake's only state besides the QP.
class Socket {
  public:
    Socket() = default;
    explicit Socket(int fd) : fd_(fd) {}
    Socket(Socket&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
    Socket& operator=(Socket&& other) noexcept {
        if (this != &other) {
            reset();
            fd_ = std::exchange(other.fd_, -1);
        }
        return *this;
    }
    Socket(const Socket&) = delete;
    Socket& operator=(const Socket&) = delete;
    ~Socket() { reset(); }
    [[nodiscard]] int get() const noexcept { return fd_; }
    void reset() noexcept {
        if (fd_ >= 0) {
            ::close(fd_);
            fd_ = -1;
        }
    }

  private:
    int fd_ = -1;
};

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
    action.sa_flags = 0;  // no SA_RESTART: a blocked poll() returns EINTR and we look at the flag
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

// poll_unless_stopped() (below), for a caller that holds the stop signals blocked already and
// passes the mask to wait with (its StopSignalsBlocked's before()): step06's event client, which
// waits once per message, so saves the two pthread_sigmask() calls of every wait.
inline int poll_unblocking(pollfd& entry, std::chrono::nanoseconds timeout,
                           const sigset_t& wait_mask) {
    throw_if_stopped();
    timeout = std::max(timeout, std::chrono::nanoseconds(0));
    const timespec wait{static_cast<time_t>(timeout.count() / 1'000'000'000),
                        static_cast<long>(timeout.count() % 1'000'000'000)};
    const int ready = ::ppoll(&entry, 1, &wait, &wait_mask);
    if (ready < 0 && errno != EINTR) {
        throw std::system_error(errno, std::generic_category(), "ppoll");
    }
    throw_if_stopped();
    return ready;
}

// poll() on one fd, ended by SIGINT or SIGTERM however close to the call they land: the signals
// stay blocked from the flag check until ppoll() unblocks them atomically, so a signal that came
// in between is delivered inside ppoll(), which then returns EINTR at once. (With a plain check
// then poll(), it would wait out the whole timeout.) Returns ppoll's result; throws
// TutorialError(kExitInterrupted) once a stop signal has arrived.
inline int poll_unless_stopped(pollfd& entry, std::chrono::nanoseconds timeout) {
    const StopSignalsBlocked blocked;
    return poll_unblocking(entry, timeout, blocked.before());
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

[[nodiscard]] inline std::string endpoint_text(const sockaddr* address, socklen_t length) {
    char host[NI_MAXHOST] = "?";
    char service[NI_MAXSERV] = "?";
    getnameinfo(address, length, host, sizeof host, service, sizeof service,
                NI_NUMERICHOST | NI_NUMERICSERV);
    return std::string(std::strchr(host, ':') != nullptr ? "[" : "") + host +
           (std::strchr(host, ':') != nullptr ? "]" : "") + ":" + service;
}

// The socket's own address, as a RoCE v2 GID holds it: an IPv4 address as ::ffff:a.b.c.d, an IPv6
// address as it is. Nothing for another family, or when getsockname fails. From step 03 on, the
// GID is chosen by it: it is the address the peer already reaches us on.
[[nodiscard]] inline std::optional<std::array<std::uint8_t, 16>> local_address_bytes(
    const Socket& socket) {
    sockaddr_storage address{};
    socklen_t length = sizeof address;
    if (getsockname(socket.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
        return std::nullopt;
    }
    std::array<std::uint8_t, 16> bytes{};
    if (address.ss_family == AF_INET) {
        bytes[10] = 0xff;
        bytes[11] = 0xff;
        std::memcpy(&bytes[12], &reinterpret_cast<const sockaddr_in*>(&address)->sin_addr, 4);
        return bytes;
    }
    if (address.ss_family == AF_INET6) {
        std::memcpy(bytes.data(), &reinterpret_cast<const sockaddr_in6*>(&address)->sin6_addr, 16);
        return bytes;
    }
    return std::nullopt;
}

struct AddressList {
    addrinfo* list = nullptr;
    AddressList(const char* host, int port, bool passive) {
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = passive ? AI_PASSIVE : 0;
        const std::string service = std::to_string(port);
        if (const int rc = getaddrinfo(host, service.c_str(), &hints, &list); rc != 0) {
            throw TutorialError(kExitUsage, std::string("cannot resolve '") +
                                                (host != nullptr ? host : "*") +
                                                "': " + gai_strerror(rc));
        }
    }
    AddressList(const AddressList&) = delete;
    AddressList& operator=(const AddressList&) = delete;
    ~AddressList() { freeaddrinfo(list); }
};

// The server's listening socket on --bind ADDR (default: every address) and -p PORT.
[[nodiscard]] inline Socket listen_on(const std::string& bind_address, int port) {
    const AddressList addresses(bind_address.empty() ? nullptr : bind_address.c_str(), port, true);
    int last_error = 0;
    for (const addrinfo* a = addresses.list; a != nullptr; a = a->ai_next) {
        Socket listener(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
        if (listener.get() < 0) {
            last_error = errno;
            continue;
        }
        const int on = 1;
        setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
        if (::bind(listener.get(), a->ai_addr, a->ai_addrlen) == 0 &&
            ::listen(listener.get(), 1) == 0) {
            return listener;
        }
        last_error = errno;
    }
    const std::string where =
        (bind_address.empty() ? "port " : bind_address + " port ") + std::to_string(port);
    if (last_error == EADDRINUSE) {
        throw TutorialError(kExitPeer,
                            "cannot listen on " + where + ": " + std::strerror(last_error),
                            "another program (another server, or ibv_rc_pingpong) listens there: "
                            "stop it or choose another port with -p");
    }
    throw TutorialError(kExitPeer, "cannot listen on " + where + ": " + std::strerror(last_error));
}

// Connects to HOST:PORT, retrying a refused connection (no server yet) until the timeout.
[[nodiscard]] inline Socket connect_to(const std::string& host, int port,
                                       std::chrono::seconds timeout, std::string& peer_name) {
    const AddressList addresses(host.c_str(), port, false);
    const Clock::time_point deadline = Clock::now() + timeout;
    int last_error = 0;
    for (;;) {
        for (const addrinfo* a = addresses.list; a != nullptr; a = a->ai_next) {
            Socket peer(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                                 a->ai_protocol));
            if (peer.get() < 0) {
                last_error = errno;
                continue;
            }
            int error = 0;
            if (::connect(peer.get(), a->ai_addr, a->ai_addrlen) != 0) {
                error = errno;
                if (error == EINPROGRESS || error == EINTR) {
                    socklen_t length = sizeof error;
                    error =
                        wait_for(peer.get(), POLLOUT, deadline) &&
                                getsockopt(peer.get(), SOL_SOCKET, SO_ERROR, &error, &length) == 0
                            ? error
                            : ETIMEDOUT;
                }
            }
            if (error == 0) {
                peer_name = endpoint_text(a->ai_addr, a->ai_addrlen);
                return peer;
            }
            last_error = error;
        }
        if (last_error != ECONNREFUSED || Clock::now() >= deadline) { break; }
        // Nobody listens yet: the server may still be starting. Try again shortly.
        (void)wait_for(-1, 0, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
    }
    const std::string what = "cannot connect to " + host + " port " + std::to_string(port) + ": " +
                             std::strerror(last_error) + " (tried for " +
                             std::to_string(timeout.count()) + " s)";
    if (last_error == ECONNREFUSED) {
        throw TutorialError(kExitPeer, what,
                            "no server listens there: start the server first, or check -p");
    }
    throw TutorialError(last_error == ETIMEDOUT ? kExitTimeout : kExitPeer, what);
}

// Sends every byte, whatever the kernel takes per call (partial writes, EINTR, EAGAIN).
inline void send_all(const Socket& peer, std::span<const char> bytes, std::chrono::seconds timeout,
                     const char* what) {
    const Clock::time_point deadline = Clock::now() + timeout;
    while (!bytes.empty()) {
        const ssize_t sent = ::send(peer.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (sent > 0) {
            bytes = bytes.subspan(static_cast<std::size_t>(sent));
        } else if (errno == EAGAIN || errno == EINTR) {
            if (!wait_for(peer.get(), POLLOUT, deadline)) {
                throw TutorialError(kExitTimeout, std::string("timed out sending ") + what);
            }
        } else {
            throw TutorialError(kExitPeer, std::string("cannot send ") + what + ": " +
                                               std::strerror(errno) + " (the peer went away)");
        }
    }
}

// Reads up to bytes.size() bytes, looping over short reads; stops early only at end of stream.
// Returns how many bytes arrived. A silent peer is a timeout error.
[[nodiscard]] inline std::size_t receive_all(const Socket& peer, std::span<char> bytes,
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
            if (!wait_for(peer.get(), POLLIN, deadline)) {
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
    return received;
}
//! [socket]

}  // namespace tutorial
