// Step 08: the server, on librdmacm's asynchronous API in step06's epoll loop: the CM event
// channel's fd beside every client's completion channel, one thread, many clients.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cm_endpoint.hpp"
#include "options.hpp"
#include "pingpong.hpp"

namespace tutorial {

// step06's Socket (tcp.hpp): it owns any file descriptor; here the epoll set and the signalfd.
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

/// One client: its endpoint (id, QP, CQ, completion channel) and its ping-pong.
struct Connection {
    std::uint64_t number = 0;
    std::string peer;
    std::string note;      // the client's --note, from its private data
    bool example = false;  // no magic: one of rdma-core's examples
    std::unique_ptr<CmEndpoint> endpoint;
    std::unique_ptr<PingPong> pingpong;
    Clock::time_point last_progress;  // the accept, then each completion
};

class Server {
  public:
    explicit Server(const Options& options) : o_(options) {}
    int run();

  private:
    enum Kind : std::uint64_t { kSignal = 0, kCm = 1, kChannel = 2 };
    static std::uint64_t tag(std::uint64_t number, Kind kind) { return number << 2 | kind; }

    void open_event_sources();
    void dispatch(std::uint64_t data);
    void listen();
    void watch(int fd, std::uint64_t data);
    void on_cm_events();
    void on_cm_event(const rdma_cm_event& event, const std::optional<PrivateData>& theirs);
    void on_connect_request(rdma_cm_id* new_id, const std::optional<PrivateData>& theirs);
    void accept(CmId id, Connection& c);
    // How progress() finds completions: an event on the channel, the safety net's poll after a
    // quiet --safety-ms, or --busy-poll's poll on every pass (no CQ events at all).
    enum class Poll { event, safety_net, busy };
    void progress(Connection& c, Poll how);
    void sweep(Poll how);
    void end_silent_connections();
    void report(const Connection& c, const std::string& outcome);
    void end(rdma_cm_id* id, std::string outcome);
    Connection* find(rdma_cm_id* id);
    void shut_down();

    const Options& o_;
    Socket epoll_;
    Socket signal_fd_;
    // Declared parent-first: the channel outlives every id on it (rdma_destroy_event_channel(3):
    // destroy them first), the listening id outlives nothing it owns.
    CmEventChannel channel_;
    CmId listen_;
    std::map<std::uint64_t, Connection> connections_;
    std::vector<ibv_wc> completions_;
    std::uint64_t next_number_ = 1;
    bool stopping_ = false;
    std::uint32_t ended_ = 0;
};

}  // namespace tutorial
