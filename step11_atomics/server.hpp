// The server's pieces: a session per client, the totals, and the Server class. Its event loop
// is in main.cpp (the lesson); the rest in server.cpp.
#pragma once

#include <fcntl.h>
#include <sys/epoll.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "connection.hpp"
#include "connection_table.hpp"
#include "handshake.hpp"
#include "memory_window.hpp"
#include "options.hpp"
#include "rdma_device.hpp"
#include "run_config.hpp"
#include "shared_cq.hpp"
#include "target.hpp"
#include "tcp.hpp"

namespace tutorial {

//! [session]
/// One client of the server: its handshake socket, its connection (a QP on the shared CQ that
/// lets the client READ, WRITE and run atomics on the target), its page of the target, and the
/// memory window over that page once the client asks for it.
struct ClientSession {
    enum class State { handshake, await_done, running };
    enum class WindowState { none, binding, bound, invalidating, invalid };
    std::uint64_t id = 0;
    std::string peer;
    Socket socket;
    State state = State::handshake;
    std::vector<char> inbox;
    Clock::time_point handshake_deadline;
    std::uint32_t slot = 0;  // its page of the target: slot_offset(slot)
    std::unique_ptr<Connection> connection;
    // Declared after the connection: C++ deallocates the window first, then destroys the QP.
    std::optional<Window> window;
    WindowState window_state = WindowState::none;
    std::uint32_t pending_rkey = 0;  // the key of the bind in flight
};
//! [session]

/// The work requests the server posts on a client's QP: a window's bind and invalidation.
enum ServerWrId : std::uint64_t { kBindWrId = 1, kInvalidateWrId = 2 };

struct ServerTotals {
    std::uint32_t connected = 0, complete = 0, failed = 0, rejected = 0, aborted = 0;
    std::uint32_t windows_bound = 0, windows_invalidated = 0;
    std::uint64_t stale_completions = 0;  // for a QP no longer in the table
};

Socket listen_for_clients(const Options& o);

class Server {
  public:
    /// Opens the device once, with the one CQ for every client's QP, and registers the target.
    explicit Server(const Options& options);
    int run();

  private:
    enum Kind : std::uint64_t { kListen = 0, kSignal = 1, kAsync = 2, kSocket = 3, kChannel = 4 };
    static std::uint64_t tag(std::uint64_t id, Kind kind) { return id << 3 | kind; }

    // main.cpp: the event loop and the window's lesson
    void open_event_sources();
    void dispatch(std::uint64_t data);
    void on_channel();
    void on_completion(const ibv_wc& wc);
    void take_command(ClientSession& s);
    void safety_net_sweep();
    // server.cpp: everything else
    void watch(int fd, std::uint64_t data);
    void accept_clients();
    void on_signal();
    void on_async_event();
    void on_socket(ClientSession& s);
    void take_handshake(ClientSession& s);
    void take_done(ClientSession& s);
    void start_rdma(ClientSession& s, const PeerInfo& remote);
    void end_silent_sessions();
    void shut_down();
    void finish(std::uint64_t id, const std::string& outcome, std::uint32_t ServerTotals::*counter);
    void reject(std::uint64_t id, const std::string& why);  // finish() as "rejected: why"
    void fail(std::uint64_t id, const std::string& why);    // finish() as "failed: why"
    [[nodiscard]] std::uint64_t word(std::uint64_t offset) const;

    const Options& o_;
    // Declared before the sessions, whose QPs and windows use them: C++ destroys every window
    // and QP first, then the CQ and its channel, the target's MR, then the device.
    const Device device_;
    Buffer target_;
    MemoryRegion target_mr_;
    SharedCompletionQueue cq_;
    Socket epoll_;
    Socket listen_;
    Socket signal_fd_;
    std::map<std::uint64_t, ClientSession> sessions_;
    std::vector<bool> slot_taken_;
    ConnectionTable table_;  // the shared CQ's qp_num -> session id
    std::uint64_t next_id_ = 1;
    bool stopping_ = false;
    int exit_code_ = kExitOk;  // kExitRdma after a CQ error
    std::uint32_t ended_ = 0;
    ServerTotals totals_;
};

}  // namespace tutorial
