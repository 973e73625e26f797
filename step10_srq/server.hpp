// The server's pieces: a session per client, the totals, and the Server class. Its event loop,
// the channel service and the safety net are in main.cpp (the lesson); the rest in server.cpp.
#pragma once

#include <fcntl.h>
#include <sys/epoll.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "handshake.hpp"
#include "options.hpp"
#include "pingpong.hpp"
#include "rdma_endpoint.hpp"
#include "tcp.hpp"
#include "wire_format.hpp"

namespace tutorial {

/// The client speaks step05's handshake v3, which carries -s and -n. The server also speaks
/// ibv_rc_pingpong's (step04's format_wire_message and parse_wire_message, in wire_format.hpp),
/// so that ibv_rc_pingpong itself can be one of its clients.

//! [detect_handshake]
/// Which handshake a client speaks, from its first 4 bytes: handshake v3's magic "RDMA"
/// (0x52444d41, big-endian), or anything else, which must then be ibv_rc_pingpong's hex LID.
[[nodiscard]] inline HandshakeFormat detect_handshake(std::span<const char, 4> first) {
    std::uint32_t magic = 0;
    for (const char c : first) { magic = magic << 8 | static_cast<unsigned char>(c); }
    return magic == kHandshakeMagic ? HandshakeFormat::v3 : HandshakeFormat::rc_pingpong;
}
//! [detect_handshake]

//! [session]
/// One client of the server: its handshake socket, its endpoint (QP, CQ,
/// completion channel) and its ping-pong.
struct ClientSession {
    enum class State { handshake, await_done, running };
    std::uint64_t id = 0;
    std::string peer;
    Socket socket;
    State state = State::handshake;
    std::optional<HandshakeFormat> format;  // known from the first 4 bytes
    std::vector<char> inbox;
    Clock::time_point handshake_deadline;
    Clock::time_point last_progress;
    std::unique_ptr<RDMAEndpoint> endpoint;
    std::unique_ptr<PingPong> pingpong;
};
//! [session]

struct ServerTotals {
    std::uint32_t connected = 0, complete = 0, failed = 0, rejected = 0, aborted = 0;
    std::uint64_t events = 0, acked = 0, empty_drains = 0, safety_net_finds = 0, messages = 0;
};

Socket listen_for_clients(const Options& o);

class Server {
  public:
    /// Opens the device once: every client's endpoint shares its context and PD.
    explicit Server(const Options& options) : o_(options), device_(device_config(options)) {}
    int run();

  private:
    enum Kind : std::uint64_t { kListen = 0, kSignal = 1, kAsync = 2, kSocket = 3, kChannel = 4 };
    static std::uint64_t tag(std::uint64_t id, Kind kind) { return id << 3 | kind; }

    // main.cpp: the event loop
    void open_event_sources();
    void dispatch(std::uint64_t data);
    void on_channel(ClientSession& s);
    void safety_net_sweep(bool timed_out);
    // server.cpp: everything else
    void watch(int fd, std::uint64_t data);
    void accept_clients();
    void refuse_at_fd_limit();
    [[nodiscard]] std::string fd_limit_text(std::size_t other_clients) const;
    void on_signal();
    void on_async_event();
    void on_socket(ClientSession& s);
    void take_handshake(ClientSession& s);
    void take_done(ClientSession& s);
    std::string start_rdma(ClientSession& s, PeerInfo remote);
    void answer(ClientSession& s);
    void progress(ClientSession& s, std::span<const ibv_wc> completions);
    void end_silent_sessions();
    void shut_down();
    void finish(std::uint64_t id, const std::string& outcome, std::uint32_t ServerTotals::*counter);
    void reject(std::uint64_t id, const std::string& why);  // finish() as "rejected: why"
    void fail(std::uint64_t id, const std::string& why);    // finish() as "failed: why"

    const Options& o_;
    const Device device_;  // declared before the sessions, whose endpoints use it
    // tcp.hpp's Socket owns any descriptor: the epoll set and the signalfd too.
    Socket epoll_;
    Socket listen_;
    // Kept free for the moment no other fd is: see refuse_at_fd_limit().
    Socket spare_fd_{::open("/dev/null", O_RDONLY | O_CLOEXEC)};
    Socket signal_fd_;
    std::map<std::uint64_t, ClientSession> sessions_;
    std::vector<ibv_wc> completions_;  // on_channel()'s: reused, so no allocation per message
    std::uint64_t next_id_ = 1;
    bool stopping_ = false;
    std::uint32_t ended_ = 0;
    ServerTotals totals_;
};

}  // namespace tutorial
