// Step 06: step05's RDMAEndpoint, extended with a completion channel (O_NONBLOCK fd) and its
// events.
#include "rdma_endpoint.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <random>
#include <system_error>
#include <utility>

namespace tutorial {

namespace {

using Clock = std::chrono::steady_clock;

std::string hex32(std::uint64_t value, int width) {
    char text[24];
    std::snprintf(text, sizeof text, "0x%0*llx", width, static_cast<unsigned long long>(value));
    return text;
}

// Printable form of bytes received from a peer, for error messages.
std::string printable(std::span<const char> bytes, std::size_t limit = 64) {
    std::string out;
    for (std::size_t i = 0; i < bytes.size() && i < limit; ++i) {
        const auto c = static_cast<unsigned char>(bytes[i]);
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            out += static_cast<char>(c);
        } else {
            char esc[8];
            std::snprintf(esc, sizeof esc, "\\x%02x", c);
            out += esc;
        }
    }
    if (bytes.size() > limit)
        out += "...";
    return out;
}

[[noreturn]] void protocol_error(const std::string& message, std::string hint = {}) {
    throw TutorialError(kExitPeer, message, std::move(hint));
}

// ------------------------------------------------------------------ big-endian fields

void put_be(std::byte* at, std::uint64_t value, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) {
        at[i] = static_cast<std::byte>(value & 0xff);
        value >>= 8;
    }
}

std::uint64_t get_be(const std::byte* at, int bytes) {
    std::uint64_t value = 0;
    for (int i = 0; i < bytes; ++i)
        value = (value << 8) | std::to_integer<std::uint64_t>(at[i]);
    return value;
}

// ------------------------------------------------------------------ TCP with deadlines

// An owned socket descriptor.
class Socket {
  public:
    explicit Socket(int fd = -1) noexcept : fd_(fd) {}
    Socket(Socket&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
    Socket& operator=(Socket&& other) noexcept {
        std::swap(fd_, other.fd_);
        return *this;
    }
    ~Socket() {
        if (fd_ >= 0)
            ::close(fd_);
    }
    [[nodiscard]] int get() const noexcept { return fd_; }

  private:
    int fd_;
};

int remaining_ms(Clock::time_point deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return left.count() < 0 ? 0 : static_cast<int>(std::min<long long>(left.count(), 1 << 30));
}

std::string seconds_text(std::chrono::milliseconds timeout) {
    char text[32];
    std::snprintf(text, sizeof text, "%g s", static_cast<double>(timeout.count()) / 1000.0);
    return text;
}

// The stop flag of the endpoint whose socket is being waited on (one thread at a time).
thread_local const volatile std::sig_atomic_t* t_stop_flag = nullptr;

void check_stop(const volatile std::sig_atomic_t* flag) {
    if (flag != nullptr && *flag != 0)
        throw TutorialError(kExitInterrupted, "interrupted");
}

// Waits until fd is ready for events; false on timeout. Wakes up every 100 ms for the stop flag.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
    for (;;) {
        check_stop(t_stop_flag);
        pollfd p{fd, events, 0};
        const int rc = ::poll(&p, 1, std::min(remaining_ms(deadline), 100));
        if (rc > 0)
            return true;
        if (rc == 0 && Clock::now() >= deadline)
            return false;
        if (rc < 0 && errno != EINTR)
            throw std::system_error(errno, std::generic_category(), "poll");
    }
}

void read_exact(int fd, std::span<char> out, Clock::time_point deadline,
                std::chrono::milliseconds timeout, const char* what) {
    std::size_t got = 0;
    while (got < out.size()) {
        if (!wait_ready(fd, POLLIN, deadline)) {
            throw TutorialError(kExitTimeout, "the peer sent " + std::to_string(got) + " of " +
                                                  std::to_string(out.size()) + " bytes of " + what +
                                                  ", then nothing for " + seconds_text(timeout));
        }
        const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
        if (n > 0) {
            got += static_cast<std::size_t>(n);
        } else if (n == 0) {
            protocol_error("the peer closed the connection after " + std::to_string(got) + " of " +
                           std::to_string(out.size()) + " bytes of " + what +
                           (got ? " (received \"" + printable(out.first(got)) + "\")" : ""));
        } else if (errno != EINTR && errno != EAGAIN) {
            if (errno == ECONNRESET)
                protocol_error(std::string("the peer reset the connection during ") + what);
            throw std::system_error(errno, std::generic_category(), "read");
        }
    }
}

void write_all(int fd, std::span<const char> data, Clock::time_point deadline,
               std::chrono::milliseconds timeout, const char* what) {
    std::size_t sent = 0;
    while (sent < data.size()) {
        if (!wait_ready(fd, POLLOUT, deadline)) {
            throw TutorialError(kExitTimeout, std::string("sending ") + what + " timed out after " +
                                                  seconds_text(timeout));
        }
        const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
        if (n >= 0) {
            sent += static_cast<std::size_t>(n);
        } else if (errno == EPIPE || errno == ECONNRESET) {
            protocol_error(std::string("the peer closed the connection before ") + what +
                           " was sent");
        } else if (errno != EINTR && errno != EAGAIN) {
            throw std::system_error(errno, std::generic_category(), "send");
        }
    }
}

struct AddrInfoDeleter {
    void operator()(addrinfo* list) const noexcept { ::freeaddrinfo(list); }
};
using AddrInfo = std::unique_ptr<addrinfo, AddrInfoDeleter>;

AddrInfo resolve(const std::string& host, std::uint16_t port, bool passive) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    addrinfo* list = nullptr;
    const std::string service = std::to_string(port);
    const int rc =
        ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &list);
    if (rc != 0) {
        protocol_error("cannot resolve '" + host + "': " + ::gai_strerror(rc));
    }
    return AddrInfo(list);
}

// Connects, retrying a refused connection until the deadline (the server may still be starting).
Socket connect_tcp(const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    const std::string where = host + ":" + std::to_string(port);
    int last_error = 0;
    for (;;) {
        AddrInfo list = resolve(host, port, false);
        for (addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
            Socket sock(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                                 ai->ai_protocol));
            if (sock.get() < 0)
                throw std::system_error(errno, std::generic_category(), "socket");
            int rc = ::connect(sock.get(), ai->ai_addr, ai->ai_addrlen);
            if (rc != 0 && errno != EINPROGRESS) {
                last_error = errno;
                continue;
            }
            if (rc != 0) {
                if (!wait_ready(sock.get(), POLLOUT, deadline)) {
                    throw TutorialError(
                        kExitTimeout,
                        "connecting to " + where + " timed out after " + seconds_text(timeout),
                        "is the server running, and reachable on that address?");
                }
                socklen_t len = sizeof last_error;
                ::getsockopt(sock.get(), SOL_SOCKET, SO_ERROR, &last_error, &len);
                if (last_error != 0)
                    continue;
            }
            const int one = 1;
            ::setsockopt(sock.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            return sock;
        }
        if (last_error != ECONNREFUSED ||
            Clock::now() + std::chrono::milliseconds(100) >= deadline) {
            break;
        }
        check_stop(t_stop_flag);
        ::usleep(100 * 1000);
    }
    throw TutorialError(
        kExitPeer,
        "cannot connect to " + where + ": " + std::strerror(last_error) +
            (last_error == ECONNREFUSED ? " (for " + seconds_text(timeout) + ")" : ""),
        "start the server first (the same program without a host), and check -p");
}

Socket accept_tcp(const std::string& bind_address, std::uint16_t port,
                  std::chrono::milliseconds timeout) {
    AddrInfo list = resolve(bind_address, port, true);
    // Prefer IPv6 (dual stack) when binding to any address, so that 127.0.0.1 and ::1 both work.
    addrinfo* chosen = list.get();
    for (addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET6 && bind_address.empty())
            chosen = ai;
    }
    Socket listener(
        ::socket(chosen->ai_family, chosen->ai_socktype | SOCK_CLOEXEC, chosen->ai_protocol));
    if (listener.get() < 0)
        throw std::system_error(errno, std::generic_category(), "socket");
    const int one = 1, zero = 0;
    ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (chosen->ai_family == AF_INET6) {
        ::setsockopt(listener.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    }
    if (::bind(listener.get(), chosen->ai_addr, chosen->ai_addrlen) != 0) {
        const int err = errno;
        if (err == EADDRINUSE) {
            throw TutorialError(
                kExitPeer,
                "cannot listen on port " + std::to_string(port) + ": " + std::strerror(err),
                "another server is using it: stop it or choose another port with -p");
        }
        throw std::system_error(err, std::generic_category(), "bind");
    }
    if (::listen(listener.get(), 1) != 0)
        throw std::system_error(errno, std::generic_category(), "listen");
    const auto deadline = Clock::now() + timeout;
    if (!wait_ready(listener.get(), POLLIN, deadline)) {
        throw TutorialError(kExitTimeout,
                            "no client connected to port " + std::to_string(port) + " within " +
                                seconds_text(timeout),
                            "start the client within the timeout, or raise --timeout");
    }
    Socket conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (conn.get() < 0)
        throw std::system_error(errno, std::generic_category(), "accept");
    ::setsockopt(conn.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return conn;
}

bool is_zero(const ibv_gid& gid) {
    return std::all_of(std::begin(gid.raw), std::end(gid.raw),
                       [](std::uint8_t b) { return b == 0; });
}

bool is_ipv4_mapped(const ibv_gid& gid) {
    for (int i = 0; i < 10; ++i) {
        if (gid.raw[i] != 0)
            return false;
    }
    return gid.raw[10] == 0xff && gid.raw[11] == 0xff;
}

int hex_value(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

bool is_send_side(const ibv_wc& wc) {
    return (wc.opcode & IBV_WC_RECV) == 0;
}

}  // namespace

// ====================================================================== errors

const char* WorkCompletionError::status_name(ibv_wc_status status) noexcept {
    switch (status) {
#define TUTORIAL_WC_NAME(name) \
    case name:                 \
        return #name;
        TUTORIAL_WC_NAME(IBV_WC_SUCCESS)
        TUTORIAL_WC_NAME(IBV_WC_LOC_LEN_ERR)
        TUTORIAL_WC_NAME(IBV_WC_LOC_QP_OP_ERR)
        TUTORIAL_WC_NAME(IBV_WC_LOC_EEC_OP_ERR)
        TUTORIAL_WC_NAME(IBV_WC_LOC_PROT_ERR)
        TUTORIAL_WC_NAME(IBV_WC_WR_FLUSH_ERR)
        TUTORIAL_WC_NAME(IBV_WC_MW_BIND_ERR)
        TUTORIAL_WC_NAME(IBV_WC_BAD_RESP_ERR)
        TUTORIAL_WC_NAME(IBV_WC_LOC_ACCESS_ERR)
        TUTORIAL_WC_NAME(IBV_WC_REM_INV_REQ_ERR)
        TUTORIAL_WC_NAME(IBV_WC_REM_ACCESS_ERR)
        TUTORIAL_WC_NAME(IBV_WC_REM_OP_ERR)
        TUTORIAL_WC_NAME(IBV_WC_RETRY_EXC_ERR)
        TUTORIAL_WC_NAME(IBV_WC_RNR_RETRY_EXC_ERR)
        TUTORIAL_WC_NAME(IBV_WC_LOC_RDD_VIOL_ERR)
        TUTORIAL_WC_NAME(IBV_WC_REM_INV_RD_REQ_ERR)
        TUTORIAL_WC_NAME(IBV_WC_REM_ABORT_ERR)
        TUTORIAL_WC_NAME(IBV_WC_INV_EECN_ERR)
        TUTORIAL_WC_NAME(IBV_WC_INV_EEC_STATE_ERR)
        TUTORIAL_WC_NAME(IBV_WC_FATAL_ERR)
        TUTORIAL_WC_NAME(IBV_WC_RESP_TIMEOUT_ERR)
        TUTORIAL_WC_NAME(IBV_WC_GENERAL_ERR)
        TUTORIAL_WC_NAME(IBV_WC_TM_ERR)
        TUTORIAL_WC_NAME(IBV_WC_TM_RNDV_INCOMPLETE)
#undef TUTORIAL_WC_NAME
    }
    return "IBV_WC_(unknown)";
}

const char* WorkCompletionError::likely_cause(ibv_wc_status status) noexcept {
    switch (status) {
        case IBV_WC_LOC_LEN_ERR:
            return "a message was longer than the receive buffer posted for it (do both sides use "
                   "the same -s?)";
        case IBV_WC_LOC_PROT_ERR:
            return "a local address or lkey lies outside the registered memory region";
        case IBV_WC_LOC_QP_OP_ERR:
            return "the work request is invalid for this QP (too many SGEs, inline data too long)";
        case IBV_WC_WR_FLUSH_ERR:
            return "the QP had already failed (after an error here, or after the peer sent it an "
                   "invalid request) and this request was flushed: look at the first error on "
                   "either side";
        case IBV_WC_REM_ACCESS_ERR:
            return "the remote range or rkey is outside what the peer registered, or its memory "
                   "region lacks REMOTE_WRITE/REMOTE_READ";
        case IBV_WC_REM_INV_REQ_ERR:
            return "the peer's QP does not allow this operation (no REMOTE_WRITE/REMOTE_READ in "
                   "its access flags), or the message is longer than its receive buffer";
        case IBV_WC_REM_OP_ERR:
            return "the peer could not complete the operation, e.g. its receive buffer was too "
                   "short";
        case IBV_WC_RETRY_EXC_ERR:
            return "the peer stopped answering: it died or was killed, its QP is not in RTR, or "
                   "the address (GID, LID, QPN) is wrong";
        case IBV_WC_RNR_RETRY_EXC_ERR:
            return "the peer had no receive posted (receiver not ready) for too long";
        case IBV_WC_REM_INV_RD_REQ_ERR:
            return "the peer's QP allows fewer outstanding RDMA READs than were sent";
        case IBV_WC_FATAL_ERR:
            return "the device reported a fatal error";
        default:
            return "see ibv_poll_cq(3) for this status";
    }
}

WorkCompletionError::WorkCompletionError(const ibv_wc& wc)
    : TutorialError(kExitRdma,
                    std::string("work completion failed: ") + status_name(wc.status) + " (" +
                        ibv_wc_status_str(wc.status) + ") for wr_id " + std::to_string(wc.wr_id) +
                        ", vendor_err " + hex32(wc.vendor_err, 1),
                    likely_cause(wc.status)),
      wc_(wc) {}

// ====================================================================== GIDs

std::optional<int> choose_gid_index(std::span<const GidEntry> table) noexcept {
    std::optional<int> v2_mapped, v2, other;
    for (const GidEntry& entry : table) {
        if (is_zero(entry.gid))
            continue;
        if (entry.type == IBV_GID_TYPE_ROCE_V2) {
            if (is_ipv4_mapped(entry.gid) && !v2_mapped)
                v2_mapped = entry.index;
            if (!v2)
                v2 = entry.index;
        } else if (!other) {
            other = entry.index;
        }
    }
    if (v2_mapped)
        return v2_mapped;
    if (v2)
        return v2;
    return other;
}

std::string gid_to_string(const ibv_gid& gid) {
    char text[INET6_ADDRSTRLEN];
    if (::inet_ntop(AF_INET6, gid.raw, text, sizeof text) == nullptr)
        return "?";
    return text;
}

bool PeerInfo::operator==(const PeerInfo& other) const noexcept {
    return lid == other.lid && qpn == other.qpn && psn == other.psn &&
           std::memcmp(gid.raw, other.gid.raw, sizeof gid.raw) == 0 && mtu == other.mtu &&
           addr == other.addr && rkey == other.rkey && length == other.length &&
           message_size == other.message_size && iterations == other.iterations;
}

// ====================================================================== handshake v3

HandshakeV3Message encode_handshake_v3(const PeerInfo& info) noexcept {
    HandshakeV3Message m{};
    put_be(&m[0], kHandshakeMagic, 4);
    put_be(&m[4], kHandshakeVersion, 2);
    put_be(&m[6], info.lid, 2);
    put_be(&m[8], info.qpn, 4);
    put_be(&m[12], info.psn, 4);
    std::memcpy(&m[16], info.gid.raw, 16);
    m[32] = static_cast<std::byte>(info.mtu);
    put_be(&m[36], info.message_size, 4);
    put_be(&m[40], info.addr, 8);
    put_be(&m[48], info.rkey, 4);
    put_be(&m[52], info.iterations, 4);
    put_be(&m[56], info.length, 8);
    return m;
}

PeerInfo decode_handshake_v3(std::span<const std::byte> bytes) {
    const auto as_chars = [&] {
        return std::span<const char>(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    };
    if (bytes.size() != kHandshakeV3Size) {
        protocol_error("handshake v3: expected " + std::to_string(kHandshakeV3Size) +
                       " bytes, got " + std::to_string(bytes.size()));
    }
    const auto magic = static_cast<std::uint32_t>(get_be(&bytes[0], 4));
    if (magic != kHandshakeMagic) {
        protocol_error("handshake v3: bad magic " + hex32(magic, 8) +
                           " (expected 0x52444d41 \"RDMA\"); received \"" +
                           printable(as_chars().first(4)) + "\"",
                       "the peer does not speak handshake v3; with ibv_rc_pingpong or step04, use "
                       "--rc-pingpong-compat");
    }
    const auto version = static_cast<std::uint16_t>(get_be(&bytes[4], 2));
    if (version != kHandshakeVersion) {
        protocol_error("handshake v3: the peer speaks version " + std::to_string(version) +
                           ", this program speaks version " + std::to_string(kHandshakeVersion),
                       "both sides must be built from the same version of the tutorial");
    }
    PeerInfo info;
    info.lid = static_cast<std::uint16_t>(get_be(&bytes[6], 2));
    info.qpn = static_cast<std::uint32_t>(get_be(&bytes[8], 4));
    info.psn = static_cast<std::uint32_t>(get_be(&bytes[12], 4));
    std::memcpy(info.gid.raw, &bytes[16], 16);
    const auto mtu = std::to_integer<unsigned>(bytes[32]);
    info.addr = get_be(&bytes[40], 8);
    info.rkey = static_cast<std::uint32_t>(get_be(&bytes[48], 4));
    info.length = get_be(&bytes[56], 8);
    info.message_size = static_cast<std::uint32_t>(get_be(&bytes[36], 4));
    info.iterations = static_cast<std::uint32_t>(get_be(&bytes[52], 4));
    for (std::size_t offset : {33, 34, 35}) {
        if (bytes[offset] != std::byte{0}) {
            protocol_error("handshake v3: reserved byte " + std::to_string(offset) + " is " +
                           hex32(std::to_integer<unsigned>(bytes[offset]), 2) + ", not 0");
        }
    }
    if (info.qpn < 2 || info.qpn > 0xffffff) {
        protocol_error("handshake v3: QPN " + hex32(info.qpn, 6) +
                       " is out of range (2..0xffffff)");
    }
    if (info.psn > 0xffffff) {
        protocol_error("handshake v3: PSN " + hex32(info.psn, 6) + " is over 24 bits");
    }
    if (mtu < IBV_MTU_256 || mtu > IBV_MTU_4096) {
        protocol_error("handshake v3: MTU code " + std::to_string(mtu) +
                       " is not an ibv_mtu (1..5 = 256..4096 bytes)");
    }
    info.mtu = static_cast<ibv_mtu>(mtu);
    if (info.length == 0)
        protocol_error("handshake v3: the peer advertises an empty buffer");
    if (info.addr + info.length < info.addr && info.addr + info.length != 0) {
        protocol_error("handshake v3: the buffer at " + hex32(info.addr, 16) + " of " +
                       std::to_string(info.length) + " bytes wraps around the address space");
    }
    return info;
}

//! [run-mismatch]
std::string describe_run_mismatch(const PeerInfo& mine, const PeerInfo& theirs, bool server) {
    std::string their_values, my_values, options;
    const auto compare = [&](const char* option, std::uint32_t my_value,
                             std::uint32_t their_value) {
        if (my_value == 0 || their_value == 0 || my_value == their_value)
            return;
        const std::string sep = options.empty() ? "" : " ";
        their_values += sep + option + " " + std::to_string(their_value);
        my_values += sep + option + " " + std::to_string(my_value);
        options += (options.empty() ? "" : " and ") + std::string(option);
    };
    compare("-s", mine.message_size, theirs.message_size);
    compare("-n", mine.iterations, theirs.iterations);
    if (options.empty())
        return {};
    return std::string("the ") + (server ? "client" : "server") + " uses " + their_values +
           ", this " + (server ? "server " : "client ") + my_values +
           ": both sides must use the same " + options;
}
//! [run-mismatch]

// ====================================================================== rc_pingpong format

//! [rc-pingpong-format]
std::array<char, kRcPingpongMessageSize> format_rc_pingpong(const PeerInfo& info) {
    std::array<char, kRcPingpongMessageSize> message{};
    int at = std::snprintf(message.data(), message.size(), "%04x:%06x:%06x:", info.lid,
                           info.qpn & 0xffffff, info.psn & 0xffffff);
    // rc_pingpong's gid_to_wire_gid: four big-endian 32-bit words, i.e. the raw bytes in order.
    for (std::uint8_t byte : info.gid.raw) {
        at += std::snprintf(message.data() + at, message.size() - at, "%02x", byte);
    }
    return message;  // the 52nd byte stays NUL, as rc_pingpong sends sizeof msg
}
//! [rc-pingpong-format]

PeerInfo parse_rc_pingpong(std::span<const char> message) {
    const auto bad = [&](const std::string& what) {
        protocol_error(
            "rc_pingpong handshake: " + what + "; received \"" + printable(message) + "\"",
            "is the peer ibv_rc_pingpong or a step04/step05 in --rc-pingpong-compat "
            "mode, with the same -p?");
    };
    if (message.size() != kRcPingpongMessageSize) {
        bad("expected " + std::to_string(kRcPingpongMessageSize) + " bytes, got " +
            std::to_string(message.size()));
    }
    if (message[51] != '\0')
        bad("byte 51 should be the terminating NUL");
    const auto field = [&](std::size_t from, std::size_t digits, const char* name) {
        std::uint64_t value = 0;
        for (std::size_t i = from; i < from + digits; ++i) {
            const int v = hex_value(message[i]);
            if (v < 0)
                bad(std::string("the ") + name + " has a non-hex character at byte " +
                    std::to_string(i));
            value = (value << 4) | static_cast<unsigned>(v);
        }
        return value;
    };
    for (std::size_t colon : {4, 11, 18}) {
        if (message[colon] != ':')
            bad("expected ':' at byte " + std::to_string(colon));
    }
    PeerInfo info;
    info.lid = static_cast<std::uint16_t>(field(0, 4, "LID"));
    info.qpn = static_cast<std::uint32_t>(field(5, 6, "QPN"));
    info.psn = static_cast<std::uint32_t>(field(12, 6, "PSN"));
    for (std::size_t i = 0; i < 16; ++i) {
        info.gid.raw[i] = static_cast<std::uint8_t>(field(19 + 2 * i, 2, "GID"));
    }
    if (info.qpn < 2)
        bad("QPN " + std::to_string(info.qpn) + " is reserved");
    return info;
}

// ====================================================================== the endpoint

namespace {

std::vector<std::string> sysfs_device_names() {
    std::vector<std::string> names;
    if (DIR* dir = ::opendir("/sys/class/infiniband")) {
        while (dirent* entry = ::readdir(dir)) {
            if (entry->d_name[0] != '.')
                names.emplace_back(entry->d_name);
        }
        ::closedir(dir);
    }
    std::sort(names.begin(), names.end());
    return names;
}

std::string join(const std::vector<std::string>& names) {
    std::string out;
    for (const auto& name : names)
        out += (out.empty() ? "" : ", ") + name;
    return out;
}

[[noreturn]] void over_limit(const std::string& what, std::uint64_t value,
                             const std::string& device, const char* limit, std::uint64_t max) {
    throw TutorialError(kExitUsage,
                        what + " " + std::to_string(value) + " is over " + device + "'s limit " +
                            limit + " = " + std::to_string(max),
                        "ibv_devinfo -v shows the device's limits");
}

int mtu_bytes(ibv_mtu mtu) {
    return 128 << static_cast<int>(mtu);
}

}  // namespace

//! [constructor]
RDMAEndpoint::RDMAEndpoint(const EndpointConfig& config)
    : config_(config), events_(config.ack_batch) {
    if (config.buffer_size == 0 || config.tx_depth == 0 || config.rx_depth == 0) {
        throw TutorialError(kExitUsage, "buffer size, tx depth and rx depth must be at least 1");
    }
    int count = 0;
    DeviceList devices(ibv_get_device_list(&count));
    // ENOSYS: the kernel has no RDMA support loaded at all, which is "no device" too.
    if (!devices && errno != ENOSYS)
        throw std::system_error(errno, std::generic_category(), "ibv_get_device_list");
    if (count == 0) {
        const auto listed = sysfs_device_names();
        if (!listed.empty()) {
            throw TutorialError(
                kExitNoProvider,
                "/sys/class/infiniband lists " + join(listed) + " but libibverbs found no device",
                "install the userspace provider: sudo apt-get install ibverbs-providers");
        }
        throw TutorialError(kExitNoDevice, "no RDMA device found",
                            "get one of: a real RDMA NIC; Soft-RoCE on this host (sudo modprobe "
                            "rdma_rxe && sudo rdma link add rxe0 type rxe netdev eth0); or the lab "
                            "(lab/softroce run -- ./step05_endpoint)");
    }
    ibv_device* device = nullptr;
    std::vector<std::string> found;
    for (int i = 0; i < count; ++i) {
        found.emplace_back(ibv_get_device_name(devices.get()[i]));
        if (device == nullptr &&
            (config.device_name.empty() || found.back() == config.device_name)) {
            device = devices.get()[i];
        }
    }
    if (device == nullptr) {
        throw TutorialError(kExitNoSuchDevice, "no RDMA device named '" + config.device_name +
                                                   "' (found: " + join(found) + ")");
    }
    device_name_ = ibv_get_device_name(device);

    context_.reset(ibv_open_device(device));
    if (!context_)
        throw std::system_error(errno, std::generic_category(), "ibv_open_device");
    ibv_device_attr device_attr{};
    if (int rc = ibv_query_device(context_.get(), &device_attr); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_query_device");
    }
    if (config.port < 1 || config.port > device_attr.phys_port_cnt) {
        throw TutorialError(kExitNoSuchDevice, device_name_ + " has no port " +
                                                   std::to_string(config.port) + " (ports: 1.." +
                                                   std::to_string(device_attr.phys_port_cnt) + ")");
    }
    ibv_port_attr port_attr{};
    if (int rc = ibv_query_port(context_.get(), config.port, &port_attr); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_query_port");
    }
    const auto max_wr = static_cast<std::uint64_t>(device_attr.max_qp_wr);
    if (config.tx_depth > max_wr)
        over_limit("tx depth", config.tx_depth, device_name_, "max_qp_wr", max_wr);
    if (config.rx_depth > max_wr)
        over_limit("rx depth", config.rx_depth, device_name_, "max_qp_wr", max_wr);
    const std::uint64_t cq_size =
        config.cq_depth != 0 ? config.cq_depth : std::uint64_t{config.tx_depth} + config.rx_depth;
    if (cq_size > static_cast<std::uint64_t>(device_attr.max_cqe)) {
        over_limit(config.cq_depth != 0 ? "cq depth" : "tx depth + rx depth", cq_size, device_name_,
                   "max_cqe", static_cast<std::uint64_t>(device_attr.max_cqe));
    }
    if (config.buffer_size > device_attr.max_mr_size) {
        over_limit("buffer size", config.buffer_size, device_name_, "max_mr_size",
                   device_attr.max_mr_size);
    }
    if (config.mtu != 0 && config.mtu > port_attr.max_mtu) {
        over_limit("MTU", static_cast<std::uint64_t>(mtu_bytes(config.mtu)),
                   device_name_ + " port " + std::to_string(config.port), "max_mtu",
                   static_cast<std::uint64_t>(mtu_bytes(port_attr.max_mtu)));
    }
    mtu_ = config.mtu != 0 ? config.mtu : port_attr.active_mtu;
    lid_ = port_attr.lid;
    ethernet_ = port_attr.link_layer == IBV_LINK_LAYER_ETHERNET;
    max_rd_atomic_ = static_cast<std::uint8_t>(std::clamp(device_attr.max_qp_init_rd_atom, 1, 16));
    max_dest_rd_atomic_ = static_cast<std::uint8_t>(std::clamp(device_attr.max_qp_rd_atom, 1, 16));

    if (config.gid_index >= 0) {
        if (config.gid_index >= port_attr.gid_tbl_len) {
            over_limit("GID index", static_cast<std::uint64_t>(config.gid_index),
                       device_name_ + " port " + std::to_string(config.port), "gid_tbl_len - 1",
                       static_cast<std::uint64_t>(port_attr.gid_tbl_len - 1));
        }
        if (int rc = ibv_query_gid(context_.get(), config.port, config.gid_index, &gid_); rc != 0) {
            throw std::system_error(errno ? errno : EINVAL, std::generic_category(),
                                    "ibv_query_gid");
        }
        if (is_zero(gid_)) {
            throw TutorialError(kExitUsage,
                                "GID index " + std::to_string(config.gid_index) + " of " +
                                    device_name_ + " port " + std::to_string(config.port) +
                                    " is empty",
                                "ibv_devinfo -v lists the GID table (or leave -g out: auto)");
        }
        gid_index_ = config.gid_index;
    } else {
        std::vector<ibv_gid_entry> raw(
            static_cast<std::size_t>(std::max(port_attr.gid_tbl_len, 1)));
        const ssize_t n = ibv_query_gid_table(context_.get(), raw.data(), raw.size(), 0);
        if (n < 0)
            throw std::system_error(static_cast<int>(-n), std::generic_category(),
                                    "ibv_query_gid_table");
        std::vector<GidEntry> table;
        for (ssize_t i = 0; i < n; ++i) {
            if (raw[i].port_num != config.port)
                continue;
            table.push_back({static_cast<int>(raw[i].gid_index), raw[i].gid,
                             static_cast<ibv_gid_type>(raw[i].gid_type)});
        }
        if (const auto chosen = choose_gid_index(table)) {
            gid_index_ = *chosen;
            for (const auto& entry : table) {
                if (entry.index == gid_index_)
                    gid_ = entry.gid;
            }
        } else if (ethernet_) {
            throw TutorialError(kExitNoSuchDevice,
                                device_name_ + " port " + std::to_string(config.port) +
                                    " has no usable GID (RoCE needs one)",
                                "give the port an IP address, or pick one with -g");
        }
    }

    //! [channel]
    if (config.completion_channel) {
        channel_.reset(ibv_create_comp_channel(context_.get()));
        if (!channel_)
            throw std::system_error(errno, std::generic_category(), "ibv_create_comp_channel");
        // Non-blocking, so that an event loop can call ibv_get_cq_event until EAGAIN.
        const int flags = ::fcntl(channel_->fd, F_GETFL);
        if (flags < 0 || ::fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK) < 0)
            throw std::system_error(errno, std::generic_category(), "fcntl O_NONBLOCK");
    }
    //! [channel]

    pd_.reset(ibv_alloc_pd(context_.get()));
    if (!pd_)
        throw std::system_error(errno, std::generic_category(), "ibv_alloc_pd");

    void* memory = nullptr;
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    if (int rc = ::posix_memalign(&memory, page, config.buffer_size); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "posix_memalign");
    }
    buffer_.reset(static_cast<std::byte*>(memory));
    std::memset(memory, 0, config.buffer_size);

    // Receives and READs write into the buffer, and REMOTE_WRITE requires LOCAL_WRITE.
    config_.access |= IBV_ACCESS_LOCAL_WRITE;
    mr_.reset(ibv_reg_mr(pd_.get(), memory, config.buffer_size, config_.access));
    if (!mr_)
        throw std::system_error(errno, std::generic_category(), "ibv_reg_mr");

    cq_.reset(ibv_create_cq(context_.get(), static_cast<int>(cq_size), nullptr, channel_.get(), 0));
    if (!cq_)
        throw std::system_error(errno, std::generic_category(), "ibv_create_cq");

    ibv_qp_init_attr init_attr{};
    init_attr.send_cq = cq_.get();
    init_attr.recv_cq = cq_.get();
    init_attr.cap.max_send_wr = config.tx_depth;
    init_attr.cap.max_recv_wr = config.rx_depth;
    init_attr.cap.max_send_sge = 1;
    init_attr.cap.max_recv_sge = 1;
    init_attr.qp_type = IBV_QPT_RC;
    qp_.reset(ibv_create_qp(pd_.get(), &init_attr));
    if (!qp_)
        throw std::system_error(errno, std::generic_category(), "ibv_create_qp");
    ibv_qp_attr attr{};
    if (int rc = ibv_query_qp(qp_.get(), &attr, IBV_QP_CAP, &init_attr); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_query_qp");
    }
    max_inline_data_ = init_attr.cap.max_inline_data;

    attr = {};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = config.port;
    attr.qp_access_flags = config_.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                             IBV_ACCESS_REMOTE_ATOMIC);
    if (int rc = ibv_modify_qp(
            qp_.get(), &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_modify_qp INIT");
    }
    psn_ = std::random_device{}() & 0xffffff;
}
//! [constructor]

RDMAEndpoint::RDMAEndpoint(RDMAEndpoint&& other) noexcept
    : config_(std::move(other.config_)),
      device_name_(std::move(other.device_name_)),
      gid_index_(other.gid_index_),
      gid_(other.gid_),
      lid_(other.lid_),
      ethernet_(other.ethernet_),
      mtu_(other.mtu_),
      psn_(other.psn_),
      max_inline_data_(other.max_inline_data_),
      max_rd_atomic_(other.max_rd_atomic_),
      max_dest_rd_atomic_(other.max_dest_rd_atomic_),
      remote_(std::exchange(other.remote_, std::nullopt)),
      stash_(std::move(other.stash_)),
      stashed_(std::exchange(other.stashed_, 0)),
      events_(std::exchange(other.events_, CqEventTracker(other.config_.ack_batch))),
      context_(std::move(other.context_)),
      channel_(std::move(other.channel_)),
      pd_(std::move(other.pd_)),
      buffer_(std::move(other.buffer_)),
      mr_(std::move(other.mr_)),
      cq_(std::move(other.cq_)),
      qp_(std::move(other.qp_)) {
    other.stash_.clear();
}

RDMAEndpoint& RDMAEndpoint::operator=(RDMAEndpoint&& other) noexcept {
    if (this != &other) {
        release();  // children first: a member-wise move would close our context before our QP
        config_ = std::move(other.config_);
        device_name_ = std::move(other.device_name_);
        gid_index_ = other.gid_index_;
        gid_ = other.gid_;
        lid_ = other.lid_;
        ethernet_ = other.ethernet_;
        mtu_ = other.mtu_;
        psn_ = other.psn_;
        max_inline_data_ = other.max_inline_data_;
        max_rd_atomic_ = other.max_rd_atomic_;
        max_dest_rd_atomic_ = other.max_dest_rd_atomic_;
        remote_ = std::exchange(other.remote_, std::nullopt);
        stash_ = std::move(other.stash_);
        other.stash_.clear();
        stashed_ = std::exchange(other.stashed_, 0);
        events_ = std::exchange(other.events_, CqEventTracker(config_.ack_batch));
        context_ = std::move(other.context_);
        channel_ = std::move(other.channel_);
        pd_ = std::move(other.pd_);
        buffer_ = std::move(other.buffer_);
        mr_ = std::move(other.mr_);
        cq_ = std::move(other.cq_);
        qp_ = std::move(other.qp_);
    }
    return *this;
}

RDMAEndpoint::~RDMAEndpoint() {
    release();
}

void RDMAEndpoint::release() noexcept {
    // ibv_destroy_cq waits until every event taken with ibv_get_cq_event is acked.
    if (cq_ && events_.acks_outstanding() > 0)
        ack_all_before_destroy(*this, events_);
    qp_.reset();
    cq_.reset();
    mr_.reset();
    buffer_.reset();
    pd_.reset();
    channel_.reset();
    context_.reset();
    remote_.reset();
    stash_.clear();
    stashed_ = 0;
}

std::span<std::byte> RDMAEndpoint::buffer() noexcept {
    return buffer_ ? std::span<std::byte>(buffer_.get(), config_.buffer_size)
                   : std::span<std::byte>();
}

PeerInfo RDMAEndpoint::local_info() const {
    if (!valid())
        throw std::logic_error("local_info: the endpoint is empty (moved from)");
    PeerInfo info;
    info.lid = lid_;
    info.qpn = qp_->qp_num;
    info.psn = psn_;
    info.gid = gid_;
    info.mtu = mtu_;
    info.addr = reinterpret_cast<std::uintptr_t>(buffer_.get());
    info.rkey =
        (config_.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)) ? mr_->rkey : 0;
    info.length = config_.buffer_size;
    info.message_size = config_.message_size;
    info.iterations = config_.iterations;
    return info;
}

//! [connect]
void RDMAEndpoint::connect(const PeerInfo& remote) {
    if (!valid())
        throw std::logic_error("connect: the endpoint is empty (moved from)");
    if (remote_)
        throw std::logic_error("connect: the endpoint is already connected");
    // Both sides take the smaller MTU, so that they agree without another round trip.
    const ibv_mtu path_mtu = std::min(mtu_, remote.mtu);
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = path_mtu;
    attr.dest_qp_num = remote.qpn;
    attr.rq_psn = remote.psn;
    attr.max_dest_rd_atomic = max_dest_rd_atomic_;
    attr.min_rnr_timer = 12;
    attr.ah_attr.dlid = remote.lid;
    attr.ah_attr.port_num = config_.port;
    // RoCE has no LIDs: every packet needs a GRH, whatever the remote GID looks like.
    if (ethernet_ || !is_zero(remote.gid)) {
        if (gid_index_ < 0)
            throw std::logic_error("connect: a GRH is needed but no GID was chosen");
        attr.ah_attr.is_global = 1;
        attr.ah_attr.grh.dgid = remote.gid;
        attr.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(gid_index_);
        attr.ah_attr.grh.hop_limit = 1;
    }
    if (int rc =
            ibv_modify_qp(qp_.get(), &attr,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
        rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_modify_qp RTR");
    }
    attr = {};
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = 14;   // 4.096 us * 2^14 = 67 ms per try ...
    attr.retry_cnt = 6;  // ... 7 tries: a dead peer is noticed within about half a second
                         // (not 7: Soft-RoCE takes 7 to mean "for ever", as step04 notes)
    attr.rnr_retry = 7;  // 7 means: retry forever while the peer has no receive posted
    attr.sq_psn = psn_;
    attr.max_rd_atomic = max_rd_atomic_;
    if (int rc = ibv_modify_qp(qp_.get(), &attr,
                               IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                   IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
        rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_modify_qp RTS");
    }
    mtu_ = path_mtu;
    remote_ = remote;
}
//! [connect]

//! [handshake]
void RDMAEndpoint::handshake_as_client(int fd) {
    const auto timeout = config_.timeout;
    const auto deadline = Clock::now() + timeout;
    if (config_.handshake == HandshakeFormat::rc_pingpong) {
        const auto mine = format_rc_pingpong(local_info());
        write_all(fd, mine, deadline, timeout, "the handshake");
        std::array<char, kRcPingpongMessageSize> theirs{};
        read_exact(fd, theirs, deadline, timeout, "the peer's handshake");
        PeerInfo remote = parse_rc_pingpong(theirs);
        remote.mtu = mtu_;  // not on the wire: both sides must be given the same -m
        write_all(fd, kRcPingpongDone, deadline, timeout, "\"done\"");
        connect(remote);
        return;
    }
    const HandshakeV3Message mine = encode_handshake_v3(local_info());
    write_all(fd, {reinterpret_cast<const char*>(mine.data()), mine.size()}, deadline, timeout,
              "the handshake");
    HandshakeV3Message theirs{};
    std::span<char> raw(reinterpret_cast<char*>(theirs.data()), theirs.size());
    read_exact(fd, raw.first(4), deadline, timeout, "the peer's handshake");
    if (get_be(theirs.data(), 4) != kHandshakeMagic)
        (void)decode_handshake_v3(theirs);  // throws
    read_exact(fd, raw.subspan(4), deadline, timeout, "the peer's handshake");
    const PeerInfo remote = decode_handshake_v3(theirs);
    // The server has found the same mismatch, answered, and closed: both sides say it.
    if (std::string mismatch = describe_run_mismatch(local_info(), remote, false);
        !mismatch.empty())
        throw TutorialError(kExitPeer, mismatch);
    connect(remote);
    write_all(fd, kRcPingpongDone, deadline, timeout, "\"done\"");
}

void RDMAEndpoint::handshake_as_server(int fd) {
    const auto timeout = config_.timeout;
    const auto deadline = Clock::now() + timeout;
    std::array<char, 5> done{};
    if (config_.handshake == HandshakeFormat::rc_pingpong) {
        std::array<char, kRcPingpongMessageSize> theirs{};
        read_exact(fd, theirs, deadline, timeout, "the peer's handshake");
        PeerInfo remote = parse_rc_pingpong(theirs);
        remote.mtu = mtu_;
        connect(remote);
        write_all(fd, format_rc_pingpong(local_info()), deadline, timeout, "the handshake");
    } else {
        HandshakeV3Message theirs{};
        std::span<char> raw(reinterpret_cast<char*>(theirs.data()), theirs.size());
        // The magic first: a peer speaking another format is told so, not left waiting.
        read_exact(fd, raw.first(4), deadline, timeout, "the peer's handshake");
        if (get_be(theirs.data(), 4) != kHandshakeMagic)
            (void)decode_handshake_v3(theirs);
        read_exact(fd, raw.subspan(4), deadline, timeout, "the peer's handshake");
        const HandshakeV3Message mine = encode_handshake_v3(local_info());
        const auto answer = [&] {
            write_all(fd, {reinterpret_cast<const char*>(mine.data()), mine.size()}, deadline,
                      timeout, "the handshake");
        };
        // Before failing, answer anyway (the peer then names the problem too); a failed write
        // must not hide the problem, so it is ignored there.
        const auto answer_anyway = [&]() noexcept {
            try {
                answer();
            } catch (const std::exception&) {
            }
        };
        PeerInfo remote;
        try {
            remote = decode_handshake_v3(theirs);
        } catch (const TutorialError&) {
            // Another version: answer first, so that the client can name both versions too.
            if (get_be(&theirs[4], 2) != kHandshakeVersion)
                answer_anyway();
            throw;
        }
        if (std::string mismatch = describe_run_mismatch(local_info(), remote, true);
            !mismatch.empty()) {
            answer_anyway();  // the client compares too, and says the same
            throw TutorialError(kExitPeer, mismatch);
        }
        connect(remote);
        answer();
    }
    read_exact(fd, done, deadline, timeout, "the peer's \"done\"");
    if (std::string_view(done.data(), done.size()) != kRcPingpongDone) {
        protocol_error("expected \"done\" after the handshake, received \"" + printable(done) +
                       "\"");
    }
}
//! [handshake]

void RDMAEndpoint::connect_to_peer(const std::string& host, std::uint16_t port) {
    if (!valid())
        throw std::logic_error("connect_to_peer: the endpoint is empty (moved from)");
    t_stop_flag = config_.stop_flag;
    Socket socket = connect_tcp(host, port, config_.timeout);
    handshake_as_client(socket.get());
}

void RDMAEndpoint::accept_peer(std::uint16_t port, const std::string& bind_address) {
    if (!valid())
        throw std::logic_error("accept_peer: the endpoint is empty (moved from)");
    t_stop_flag = config_.stop_flag;
    Socket socket = accept_tcp(bind_address, port, config_.timeout);
    handshake_as_server(socket.get());
}

// ====================================================================== posting

void RDMAEndpoint::throw_not_connected(const char* what) const {
    if (!valid())
        throw std::logic_error(std::string(what) + ": the endpoint is empty (moved from)");
    throw std::logic_error(std::string(what) +
                           ": the endpoint is not connected yet (call connect_to_peer or "
                           "accept_peer first)");
}

void RDMAEndpoint::throw_outside_buffer(std::size_t offset, std::size_t length,
                                        const char* what) const {
    throw std::out_of_range(std::string(what) + ": local range [" + std::to_string(offset) + ", +" +
                            std::to_string(length) + ") is outside the " +
                            std::to_string(config_.buffer_size) + "-byte buffer");
}

void RDMAEndpoint::check_remote_range(std::size_t offset, std::size_t length,
                                      const char* what) const {
    if (remote_->rkey == 0) {
        throw std::logic_error(std::string(what) +
                               ": the peer advertised no remote access (no rkey; the "
                               "rc_pingpong handshake carries none)");
    }
    if (offset > remote_->length || length > remote_->length - offset) {
        throw std::out_of_range(std::string(what) + ": remote range [" + std::to_string(offset) +
                                ", +" + std::to_string(length) + ") is outside the peer's " +
                                std::to_string(remote_->length) + "-byte buffer");
    }
}

void RDMAEndpoint::throw_post_send_failed(int rc) {
    throw std::system_error(rc, std::generic_category(), "ibv_post_send");
}

void RDMAEndpoint::post_recv(std::uint64_t wr_id, std::size_t offset, std::size_t length) {
    post_recv_batch(wr_id, offset, length, 1);
}

void RDMAEndpoint::post_recv_batch(std::uint64_t wr_id, std::size_t offset, std::size_t length,
                                   std::size_t count) {
    if (!valid())
        throw std::logic_error("post_recv: the endpoint is empty (moved from)");
    check_local_range(offset, length, "post_recv");
    constexpr std::size_t kChain = 32;
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(buffer_.get() + offset),
                static_cast<std::uint32_t>(length), mr_->lkey};
    std::array<ibv_recv_wr, kChain> wrs{};
    while (count > 0) {
        const std::size_t n = std::min(count, kChain);
        for (std::size_t i = 0; i < n; ++i) {
            wrs[i] = {};
            wrs[i].wr_id = wr_id;
            wrs[i].sg_list = &sge;  // the device reads the list while posting; one is enough
            wrs[i].num_sge = 1;
            wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
        }
        ibv_recv_wr* bad = nullptr;
        if (int rc = ibv_post_recv(qp_.get(), wrs.data(), &bad); rc != 0) {
            throw std::system_error(rc, std::generic_category(), "ibv_post_recv");
        }
        count -= n;
    }
}

//! [post-one-sided]
void RDMAEndpoint::post_one_sided(ibv_wr_opcode opcode, std::uint64_t wr_id,
                                  std::size_t local_offset, std::uint64_t remote_addr,
                                  std::uint32_t rkey, std::size_t length, std::uint32_t imm_data) {
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = opcode;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(imm_data);
    wr.wr.rdma.remote_addr = remote_addr;  // the peer's virtual address ...
    wr.wr.rdma.rkey = rkey;                // ... and the key that opens its memory region
    post_to_send_queue(wr, local_offset, length);
}

// Both ranges are checked before anything reaches the device.
void RDMAEndpoint::check_and_post_one_sided(const char* what, ibv_wr_opcode opcode,
                                            std::uint64_t wr_id, std::size_t local_offset,
                                            std::size_t remote_offset, std::size_t length,
                                            std::uint32_t imm_data) {
    require_connected(what);
    check_local_range(local_offset, length, what);
    check_remote_range(remote_offset, length, what);
    post_one_sided(opcode, wr_id, local_offset, remote_->addr + remote_offset, remote_->rkey,
                   length, imm_data);
}

void RDMAEndpoint::post_write(std::uint64_t wr_id, std::size_t local_offset,
                              std::size_t remote_offset, std::size_t length) {
    check_and_post_one_sided("post_write", IBV_WR_RDMA_WRITE, wr_id, local_offset, remote_offset,
                             length, 0);
}
//! [post-one-sided]

void RDMAEndpoint::post_write_with_imm(std::uint64_t wr_id, std::size_t local_offset,
                                       std::size_t remote_offset, std::size_t length,
                                       std::uint32_t imm_data) {
    check_and_post_one_sided("post_write_with_imm", IBV_WR_RDMA_WRITE_WITH_IMM, wr_id, local_offset,
                             remote_offset, length, imm_data);
}

void RDMAEndpoint::post_read(std::uint64_t wr_id, std::size_t local_offset,
                             std::size_t remote_offset, std::size_t length) {
    check_and_post_one_sided("post_read", IBV_WR_RDMA_READ, wr_id, local_offset, remote_offset,
                             length, 0);
}

// ====================================================================== completions

void RDMAEndpoint::stash(const ibv_wc& wc) {
    stash_[wc.wr_id].push_back(wc);
    ++stashed_;
}

template <typename Wanted>
bool RDMAEndpoint::take_stashed(Wanted wanted, ibv_wc& out) {
    if (stashed_ == 0)
        return false;
    for (auto it = stash_.begin(); it != stash_.end(); ++it) {
        if (!it->second.empty() && wanted(it->second.front())) {
            out = it->second.front();
            it->second.pop_front();
            if (it->second.empty())
                stash_.erase(it);
            --stashed_;
            return true;
        }
    }
    return false;
}

//! [poll]
template <typename Wanted>
ibv_wc RDMAEndpoint::wait_for(Wanted wanted, std::optional<std::chrono::milliseconds> timeout,
                              const std::string& what) {
    if (!valid())
        throw std::logic_error(what + ": the endpoint is empty (moved from)");
    ibv_wc found{};
    if (take_stashed(wanted, found))
        return found;
    const auto limit = timeout.value_or(config_.timeout);
    const auto deadline = Clock::now() + limit;
    std::array<ibv_wc, 16> batch;
    for (unsigned spins = 1;; ++spins) {
        const int n = ibv_poll_cq(cq_.get(), static_cast<int>(batch.size()), batch.data());
        if (n < 0)
            throw std::system_error(EIO, std::generic_category(), "ibv_poll_cq");
        bool have = false;
        const ibv_wc* failed = nullptr;
        for (int i = 0; i < n; ++i) {
            if (batch[i].status != IBV_WC_SUCCESS) {
                if (failed == nullptr)
                    failed = &batch[i];
            } else if (!have && wanted(batch[i])) {
                found = batch[i];
                have = true;
            } else {
                stash(batch[i]);
            }
        }
        if (failed != nullptr) {
            if (have)
                stash(found);
            throw WorkCompletionError(*failed);
        }
        if (have)
            return found;
        // Reading the clock costs more than an empty poll: look at it now and then.
        if (spins % 1024 != 0)
            continue;
        check_stop(config_.stop_flag);
        if (Clock::now() >= deadline) {
            throw TutorialError(kExitTimeout, "no " + what + " within " + seconds_text(limit),
                                "is the peer still running? (a lost peer ends in "
                                "IBV_WC_RETRY_EXC_ERR only while something is being sent)");
        }
    }
}
//! [poll]

ibv_wc RDMAEndpoint::poll_completion(std::uint64_t wr_id,
                                     std::optional<std::chrono::milliseconds> timeout) {
    if (stashed_ != 0) {
        if (auto it = stash_.find(wr_id); it != stash_.end()) {
            const ibv_wc wc = it->second.front();
            it->second.pop_front();
            if (it->second.empty())
                stash_.erase(it);
            --stashed_;
            return wc;
        }
    }
    return wait_for([wr_id](const ibv_wc& wc) { return wc.wr_id == wr_id; }, timeout,
                    "completion for wr_id " + std::to_string(wr_id));
}

ibv_wc RDMAEndpoint::poll_send_completion(std::optional<std::chrono::milliseconds> timeout) {
    return wait_for(is_send_side, timeout, std::string("send completion"));
}

ibv_wc RDMAEndpoint::poll_recv_completion(std::optional<std::chrono::milliseconds> timeout) {
    return wait_for([](const ibv_wc& wc) { return !is_send_side(wc); }, timeout,
                    std::string("receive completion"));
}

// try_poll() when something is stashed (or the endpoint is empty): the stash first, then the CQ.
std::size_t RDMAEndpoint::try_poll_stashed(std::span<ibv_wc> completions) {
    if (!valid())
        throw std::logic_error("try_poll: the endpoint is empty (moved from)");
    std::size_t filled = 0;
    while (stashed_ != 0 && filled < completions.size()) {
        (void)take_stashed([](const ibv_wc&) { return true; }, completions[filled]);
        ++filled;
    }
    if (filled == completions.size())
        return filled;
    const int n = ibv_poll_cq(cq_.get(), static_cast<int>(completions.size() - filled),
                              completions.data() + filled);
    if (n < 0)
        throw_poll_failed();
    const auto batch = completions.first(filled + static_cast<std::size_t>(n));
    for (const ibv_wc& wc : batch) {
        if (wc.status != IBV_WC_SUCCESS)
            stash_good_and_throw(batch);
    }
    return batch.size();
}

// A batch with a failed completion: the good ones are kept for later calls, the first failure
// is thrown.
void RDMAEndpoint::stash_good_and_throw(std::span<const ibv_wc> batch) {
    const ibv_wc* failed = nullptr;
    for (const ibv_wc& wc : batch) {
        if (wc.status == IBV_WC_SUCCESS)
            stash(wc);
        else if (failed == nullptr)
            failed = &wc;
    }
    throw WorkCompletionError(*failed);
}

void RDMAEndpoint::throw_poll_failed() {
    throw std::system_error(EIO, std::generic_category(), "ibv_poll_cq");
}

// =========================================================== completion channel

//! [events]
void RDMAEndpoint::request_notify() {
    if (int rc = ibv_req_notify_cq(cq_.get(), 0); rc != 0)
        throw std::system_error(rc, std::generic_category(), "ibv_req_notify_cq");
}

bool RDMAEndpoint::get_event() {
    if (!channel_)
        throw std::logic_error("get_event: the endpoint has no completion channel");
    ibv_cq* cq = nullptr;
    void* cq_context = nullptr;
    if (ibv_get_cq_event(channel_.get(), &cq, &cq_context) != 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return false;
        throw std::system_error(errno, std::generic_category(), "ibv_get_cq_event");
    }
    if (cq != cq_.get()) {  // one CQ per channel here: anything else is a bug
        ibv_ack_cq_events(cq, 1);
        throw std::logic_error("ibv_get_cq_event returned a CQ this endpoint does not own");
    }
    return true;
}

void RDMAEndpoint::ack(std::uint32_t count) noexcept {
    ibv_ack_cq_events(cq_.get(), count);
}
//! [events]

}  // namespace tutorial
