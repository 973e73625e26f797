// Step 09: the server's pieces: a session per client, with its coroutine and endpoint; totals.
#pragma once

#include <fcntl.h>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "async_endpoint.hpp"
#include "handshake.hpp"
#include "options.hpp"
#include "pingpong.hpp"
#include "rdma_endpoint.hpp"
#include "reactor.hpp"
#include "task.hpp"
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

struct ServerTotals {
    std::uint32_t connected = 0, complete = 0, failed = 0, rejected = 0, aborted = 0;
    std::uint64_t events = 0, acked = 0, empty_drains = 0, safety_net_finds = 0, messages = 0;
};

/// How a client's session ended: the words after "server: client N (PEER): ", and the total
/// that counts it.
struct Outcome {
    std::string text;
    std::uint32_t ServerTotals::*counter = &ServerTotals::failed;
};

/// Thrown inside a client's coroutine to end it with an outcome of its own (a rejected
/// handshake, mostly) instead of "failed: what()".
class SessionEnd : public std::runtime_error {
  public:
    explicit SessionEnd(Outcome outcome)
        : std::runtime_error(outcome.text), outcome_(std::move(outcome)) {}
    [[nodiscard]] const Outcome& outcome() const noexcept { return outcome_; }

  private:
    Outcome outcome_;
};

//! [session]
/// One client of the server: its socket, its coroutine, and its endpoint (QP, CQ, completion
/// channel) once the handshake came.
struct ClientSession {
    enum class State { handshake, await_done, running, ended };
    std::uint64_t id = 0;
    std::string peer;
    Socket socket;
    std::optional<FdWatch> socket_watch;  // after the socket: it leaves epoll before the close
    State state = State::handshake;
    std::optional<HandshakeFormat> format;  // known from the first 4 bytes
    std::vector<char> inbox;
    Clock::time_point handshake_deadline;
    std::uint32_t received = 0, sent = 0, verified = 0;
    std::uint32_t watched_received = 0;  // the watchdog's last look, and since when it is quiet
    Clock::time_point quiet_since;
    bool aborted = false;         // the server's shutdown cancelled it
    std::optional<Outcome> stop;  // the watchdog cancelled it, and why
    // C++ destroys members in reverse: the coroutine's frame first, then the endpoint.
    std::unique_ptr<AsyncEndpoint> endpoint;
    Task<void> coroutine;
};
//! [session]

/// How long AsyncEndpoint::cancel() may wait for a QP's flush completions (on rxe they come at
/// once).
inline constexpr auto kFlushTimeout = std::chrono::seconds(1);

/// A TCP peer that accept gave: the non-blocking socket and "host:port".
struct TcpPeer {
    Socket socket;
    std::string name;
};

Socket listen_for_clients(const Options& o);
/// The next client waiting on \p listener (with TCP_NODELAY), or none yet.
/// \throws std::system_error ("accept4")
std::optional<TcpPeer> accept_now(const Socket& listener);

/// The server: its coroutines and the shutdown's order are in main.cpp (the lesson), the rest in
/// server.cpp.
class Server {
  public:
    explicit Server(const Options& options);
    int run();

  private:
    // main.cpp: the coroutines, and the shutdown's order
    Task<void> accept_loop();
    Task<void> serve_client(ClientSession& s);
    void shut_down();
    // server.cpp: everything else
    void open_event_sources();
    ClientSession& add_session(TcpPeer peer);
    bool housekeeping();
    std::ptrdiff_t read_into_inbox(ClientSession& s);
    Task<PeerInfo> take_handshake(ClientSession& s);
    PeerInfo parse_handshake(ClientSession& s);
    void start_rdma(ClientSession& s, PeerInfo remote);
    void answer(ClientSession& s, PeerInfo local);
    Task<void> take_done(ClientSession& s);
    void check_message(ClientSession& s, const Received& message);
    Task<void> watchdog();
    void end_silent_sessions();
    void stop(ClientSession& s, Outcome outcome);
    [[nodiscard]] Outcome silent_outcome(const ClientSession& s) const;
    [[nodiscard]] Outcome ended_by(const ClientSession& s, const std::exception& e) const;
    [[nodiscard]] std::string fd_limit_text(std::size_t other_clients) const;
    void refuse_at_fd_limit();
    Task<void> watch_async_events();
    void on_async_event();
    void finish(ClientSession& s, const Outcome& outcome);
    void print_totals() const;

    const Options& o_;
    // Declared first, destroyed last: every awaiter and endpoint below refers to it.
    Reactor reactor_;
    const Device device_;  // opened once: every client's endpoint shares its context and PD
    Socket listen_;
    // Kept free for the moment no other fd is: see refuse_at_fd_limit().
    Socket spare_fd_{::open("/dev/null", O_RDONLY | O_CLOEXEC)};
    std::optional<FdWatch> listen_watch_;  // after listen_: destroyed first
    std::optional<FdWatch> async_watch_;   // the device's async_fd
    std::map<std::uint64_t, std::unique_ptr<ClientSession>> sessions_;
    Task<void> accepting_;
    Task<void> watching_;
    Task<void> async_watching_;
    std::uint64_t next_id_ = 1;
    bool stopping_ = false;
    std::uint32_t ended_ = 0;   // clients that finish()ed
    std::uint32_t reaped_ = 0;  // ended_ at the last reaping
    ServerTotals totals_;
};

}  // namespace tutorial
