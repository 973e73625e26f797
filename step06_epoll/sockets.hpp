// The server's sockets: a descriptor owner, a non-blocking listener, and writes with a deadline.
#pragma once

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <utility>

#include "options.hpp"
#include "rdma_endpoint.hpp"

namespace tutorial {

using Clock = std::chrono::steady_clock;

/// Printable form of what a peer sent, for log lines.
inline std::string printable(std::span<const char> bytes) {
    std::string out;
    for (char c : bytes.first(std::min<std::size_t>(bytes.size(), 60))) {
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            out += c;
        } else {
            char esc[8];
            std::snprintf(esc, sizeof esc, "\\x%02x", static_cast<unsigned char>(c));
            out += esc;
        }
    }
    return bytes.size() > 60 ? out + "..." : out;
}

/// The owner of a socket, epoll or signalfd descriptor.
class FileDescriptor {
  public:
    FileDescriptor() = default;
    explicit FileDescriptor(int fd) : fd_(fd) {}
    ~FileDescriptor() { reset(); }
    FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
    FileDescriptor& operator=(FileDescriptor&& other) noexcept {
        if (this != &other) {
            reset(std::exchange(other.fd_, -1));
        }
        return *this;
    }
    FileDescriptor(const FileDescriptor&) = delete;
    FileDescriptor& operator=(const FileDescriptor&) = delete;
    [[nodiscard]] int get() const { return fd_; }
    [[nodiscard]] explicit operator bool() const { return fd_ >= 0; }
    void reset(int fd = -1) {
        if (fd_ >= 0) {
            ::close(fd_);
        }
        fd_ = fd;
    }

  private:
    int fd_ = -1;
};

inline std::string peer_name(const sockaddr_storage& addr) {
    char host[NI_MAXHOST] = "?", port[NI_MAXSERV] = "?";
    ::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), sizeof addr, host, sizeof host, port,
                  sizeof port, NI_NUMERICHOST | NI_NUMERICSERV);
    return std::string(host) + ":" + port;
}

inline FileDescriptor listen_on(const Options& o) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(o.tcp_port);
    if (const int rc = ::getaddrinfo(o.bind_address.empty() ? nullptr : o.bind_address.c_str(),
                                     port.c_str(), &hints, &found);
        rc != 0) {
        throw TutorialError(kExitUsage,
                            "cannot resolve --bind " + o.bind_address + ": " + ::gai_strerror(rc));
    }
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, ::freeaddrinfo);
    int last_errno = 0;
    for (addrinfo* a = found; a; a = a->ai_next) {
        FileDescriptor fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        if (!fd) {
            last_errno = errno;
            continue;
        }
        const int one = 1;
        ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd.get(), 64) == 0) {
            return fd;
        }
        last_errno = errno;
    }
    throw TutorialError(kExitPeer,
                        "cannot listen on TCP port " + port + ": " + std::strerror(last_errno));
}

/// Waits until fd is ready for `events`, up to deadline; false on timeout.
inline bool wait_fd(int fd, short events, Clock::time_point deadline) {
    for (;;) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) {
            return false;
        }
        pollfd p{fd, events, 0};
        const int rc = ::poll(&p, 1, static_cast<int>(left.count()));
        if (rc > 0) {
            return true;
        }
        if (rc < 0 && errno != EINTR) {
            throw std::system_error(errno, std::generic_category(), "poll");
        }
    }
}

inline void write_all(int fd, std::span<const char> bytes, Clock::time_point deadline) {
    std::size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
        if (n >= 0) {
            done += static_cast<std::size_t>(n);
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (!wait_fd(fd, POLLOUT, deadline)) {
                throw TutorialError(kExitTimeout, "timed out writing to the peer");
            }
        } else if (errno == EPIPE || errno == ECONNRESET) {
            throw TutorialError(kExitPeer, "peer closed the connection during the handshake");
        } else if (errno != EINTR) {
            throw std::system_error(errno, std::generic_category(), "send");
        }
    }
}

}  // namespace tutorial
