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

/// \brief A file descriptor's owner: the epoll set and the signalfd.
class FileDescriptor {
  public:
    explicit FileDescriptor(int fd = -1) noexcept : fd_(fd) {}
    FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
    FileDescriptor& operator=(FileDescriptor&& other) noexcept {
        std::swap(fd_, other.fd_);
        return *this;
    }
    ~FileDescriptor() {
        if (fd_ >= 0) ::close(fd_);
    }
    [[nodiscard]] int get() const noexcept { return fd_; }

  private:
    int fd_;
};

//! [connection]
/// One client: its endpoint (id, QP, CQ, completion channel) and its ping-pong.
struct Connection {
    std::uint64_t number = 0;
    std::string peer;
    std::string note;          // the client's --note, from its private data
    bool example = false;      // no magic: one of rdma-core's examples
    bool established = false;  // ESTABLISHED seen
    std::unique_ptr<CmEndpoint> endpoint;
    std::unique_ptr<PingPong> pingpong;
};
//! [connection]

class Server {
  public:
    explicit Server(const Options& options) : o_(options) {}
    int run();

  private:
    enum Kind : std::uint64_t { kSignal = 0, kCm = 1, kChannel = 2 };
    static std::uint64_t tag(std::uint64_t number, Kind kind) { return number << 2 | kind; }

    // main.cpp: the event loop
    void open_event_sources();
    void dispatch(std::uint64_t data);
    // cm_server.cpp: everything else
    void listen();
    void watch(int fd, std::uint64_t data);
    void on_cm_events();
    void on_cm_event(const CmEvent& event);
    void on_connect_request(const CmEvent& event);
    void accept(CmId id, const PrivateData* theirs, Connection& c);
    void on_channel(Connection& c);
    void progress(Connection& c, std::span<const ibv_wc> completions);
    void sweep();
    void end(rdma_cm_id* id, const std::string& outcome);
    Connection* find(rdma_cm_id* id);
    void shut_down();

    const Options& o_;
    FileDescriptor epoll_;
    FileDescriptor signal_fd_;
    //! [server-members]
    // Declared parent-first: the channel outlives every id on it (rdma_destroy_event_channel
    // fails with EBUSY while one is left), the listening id outlives nothing it owns.
    CmEventChannel channel_;
    CmId listen_;
    std::map<std::uint64_t, Connection> connections_;
    //! [server-members]
    std::vector<ibv_wc> completions_;
    std::uint64_t next_number_ = 1;
    bool stopping_ = false;
    std::uint32_t ended_ = 0;
};

}  // namespace tutorial
