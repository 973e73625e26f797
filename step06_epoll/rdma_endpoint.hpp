// Step 06: the RDMA endpoint (context, PD, MR, CQ, RC QP), now with an optional completion channel.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cq_events.hpp"

namespace tutorial {

constexpr int kExitOk = 0, kExitRdma = 1, kExitUsage = 2, kExitNoDevice = 3, kExitNoProvider = 4,
              kExitNoSuchDevice = 5, kExitPeer = 6, kExitTimeout = 7, kExitInterrupted = 130;

/// An error with an exit code and an optional hint line.
class TutorialError : public std::runtime_error {
  public:
    TutorialError(int exit_code, const std::string& what, std::string hint = {})
        : std::runtime_error(what), exit_code_(exit_code), hint_(std::move(hint)) {}
    [[nodiscard]] int exit_code() const { return exit_code_; }
    [[nodiscard]] const std::string& hint() const { return hint_; }

  private:
    int exit_code_;
    std::string hint_;
};

/// A work completion that did not succeed: carries the status, its name and the wr_id.
class WorkCompletionError : public TutorialError {
  public:
    WorkCompletionError(ibv_wc_status status, std::uint64_t wr_id, const std::string& what,
                        std::string hint)
        : TutorialError(kExitRdma, what, std::move(hint)), status_(status), wr_id_(wr_id) {}
    [[nodiscard]] ibv_wc_status status() const { return status_; }
    [[nodiscard]] std::uint64_t wr_id() const { return wr_id_; }

  private:
    ibv_wc_status status_;
    std::uint64_t wr_id_;
};

/// IBV_WC_RETRY_EXC_ERR and friends, by name (ibv_wc_status_str gives prose).
[[nodiscard]] const char* wc_status_name(ibv_wc_status status);
/// The likely cause of a failed completion, or "" when none is known.
[[nodiscard]] const char* wc_status_hint(ibv_wc_status status);

//! [raii]
// One owner shape for every verbs object: a move-only std::unique_ptr whose
// deleter calls the destroy verb and reports, never throws, a failure.
template <typename T, auto Destroy, const char* Verb>
struct VerbsDeleter {
    void operator()(T* object) const noexcept {
        const int rc = Destroy(object);
        if (rc != 0) {
            const int err = rc > 0 ? rc : errno;  // ibv_close_device returns -1 and sets errno
            std::fprintf(stderr, "destroy failed: %s: %s (errno %d)\n", Verb, std::strerror(err),
                         err);
        }
    }
};
inline constexpr char kCloseDevice[] = "ibv_close_device";
inline constexpr char kDestroyCompChannel[] = "ibv_destroy_comp_channel";
inline constexpr char kDeallocPd[] = "ibv_dealloc_pd";
inline constexpr char kDeregMr[] = "ibv_dereg_mr";
inline constexpr char kDestroyCq[] = "ibv_destroy_cq";
inline constexpr char kDestroyQp[] = "ibv_destroy_qp";
using Context =
    std::unique_ptr<ibv_context, VerbsDeleter<ibv_context, ibv_close_device, kCloseDevice>>;
using CompletionChannel =
    std::unique_ptr<ibv_comp_channel,
                    VerbsDeleter<ibv_comp_channel, ibv_destroy_comp_channel, kDestroyCompChannel>>;
using ProtectionDomain = std::unique_ptr<ibv_pd, VerbsDeleter<ibv_pd, ibv_dealloc_pd, kDeallocPd>>;
using MemoryRegion = std::unique_ptr<ibv_mr, VerbsDeleter<ibv_mr, ibv_dereg_mr, kDeregMr>>;
using CompletionQueue = std::unique_ptr<ibv_cq, VerbsDeleter<ibv_cq, ibv_destroy_cq, kDestroyCq>>;
using QueuePair = std::unique_ptr<ibv_qp, VerbsDeleter<ibv_qp, ibv_destroy_qp, kDestroyQp>>;
struct DeviceListDeleter {
    void operator()(ibv_device** list) const noexcept { ibv_free_device_list(list); }
};
using DeviceList = std::unique_ptr<ibv_device*, DeviceListDeleter>;
struct FreeDeleter {
    void operator()(void* p) const noexcept { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<std::byte, FreeDeleter>;
//! [raii]

/// One row of a port's GID table, as the pure GID choice sees it.
struct GidEntry {
    int index = 0;
    std::array<std::uint8_t, 16> gid{};
    ibv_gid_type type = IBV_GID_TYPE_IB;
};
/// Prefer RoCE v2 with an IPv4-mapped address, then RoCE v2, then anything else
/// valid; skip zero GIDs. Returns nullopt when the table has no usable GID.
[[nodiscard]] std::optional<int> choose_gid_index(std::span<const GidEntry> table);

/// What the peer needs to reach our QP (rc_pingpong's LID, QPN, PSN and GID).
struct QpInfo {
    std::uint16_t lid = 0;
    std::uint32_t qpn = 0;
    std::uint32_t psn = 0;
    std::array<std::uint8_t, 16> gid{};
};

struct EndpointConfig {
    std::string device;  // empty: the first device
    int port = 1;
    int gid_index = -1;  // negative: choose_gid_index
    std::size_t buffer_size = 4096;
    std::uint32_t tx_depth = 16;
    std::uint32_t rx_depth = 500;
    std::uint32_t cq_depth = 0;       // 0: rx_depth + tx_depth
    bool completion_channel = false;  // bind the CQ to an O_NONBLOCK completion channel
    std::uint32_t ack_batch = 16;     // acknowledge CQ events at least this often
};

/// An RC endpoint: owns context, completion channel, PD, buffer, MR, CQ and QP.
/// Move-only. Not thread-safe: one thread uses it at a time.
class RDMAEndpoint {
  public:
    /// Opens the device and builds every object, or throws (leaking nothing).
    explicit RDMAEndpoint(const EndpointConfig& config);
    /// Acknowledges every outstanding CQ event, then destroys in reverse order.
    ~RDMAEndpoint();
    RDMAEndpoint(RDMAEndpoint&&) noexcept = default;
    RDMAEndpoint& operator=(RDMAEndpoint&&) noexcept = delete;
    RDMAEndpoint(const RDMAEndpoint&) = delete;
    RDMAEndpoint& operator=(const RDMAEndpoint&) = delete;

    [[nodiscard]] const QpInfo& local_info() const { return local_; }
    [[nodiscard]] int gid_index() const { return gid_index_; }
    [[nodiscard]] bool ethernet() const { return link_layer_ == IBV_LINK_LAYER_ETHERNET; }
    [[nodiscard]] std::span<std::byte> buffer() const { return {buffer_.get(), buffer_size_}; }
    [[nodiscard]] std::uint32_t max_inline() const { return max_inline_; }

    /// INIT -> RTR -> RTS towards `remote` with path MTU `mtu`.
    void connect(const QpInfo& remote, ibv_mtu mtu);
    /// Posts a signaled SEND of buffer()[offset, offset+length), inline when it fits.
    void post_send(std::uint64_t wr_id, std::size_t offset, std::size_t length);
    /// Posts `count` receives, all into buffer()[offset, offset+length).
    void post_recv(std::uint64_t wr_id, std::size_t offset, std::size_t length,
                   std::uint32_t count = 1);
    /// ibv_poll_cq into `out`; returns how many completions it wrote.
    [[nodiscard]] int try_poll(std::span<ibv_wc> out);
    /// The same, under the name service_channel() expects of its event source.
    [[nodiscard]] int poll(std::span<ibv_wc> out) { return try_poll(out); }

    // ---- the completion channel (config.completion_channel) ----
    /// The channel's fd (O_NONBLOCK), for poll/epoll; -1 without a channel.
    [[nodiscard]] int channel_fd() const { return channel_ ? channel_->fd : -1; }
    /// ibv_req_notify_cq(cq, 0): the next CQE raises one event.
    void request_notify();
    /// ibv_get_cq_event: true when it took an event, false on EAGAIN.
    [[nodiscard]] bool get_event();
    /// ibv_ack_cq_events(cq, count).
    void ack(std::uint32_t count);
    /// The event bookkeeping of this endpoint's CQ.
    [[nodiscard]] CqEventTracker& events() { return events_; }
    [[nodiscard]] const CqEventTracker& events() const { return events_; }

  private:
    // Members are declared parent-first; C++ destroys them in reverse:
    // QP -> CQ -> MR -> buffer -> PD -> channel -> context.
    Context context_;
    CompletionChannel channel_;
    ProtectionDomain pd_;
    AlignedBuffer buffer_;
    MemoryRegion mr_;
    CompletionQueue cq_;
    QueuePair qp_;
    std::size_t buffer_size_ = 0;
    std::uint8_t port_ = 1;
    int gid_index_ = 0;
    std::uint8_t link_layer_ = IBV_LINK_LAYER_UNSPECIFIED;
    std::uint32_t max_inline_ = 0;
    QpInfo local_;
    CqEventTracker events_;
};

/// The owner of an epoll/socket/signalfd descriptor.
class FileDescriptor {
  public:
    FileDescriptor() = default;
    explicit FileDescriptor(int fd) : fd_(fd) {}
    ~FileDescriptor() { reset(); }
    FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.release()) {}
    FileDescriptor& operator=(FileDescriptor&& other) noexcept {
        if (this != &other) {
            reset(other.release());
        }
        return *this;
    }
    FileDescriptor(const FileDescriptor&) = delete;
    FileDescriptor& operator=(const FileDescriptor&) = delete;
    [[nodiscard]] int get() const { return fd_; }
    [[nodiscard]] explicit operator bool() const { return fd_ >= 0; }
    int release() { return std::exchange(fd_, -1); }
    void reset(int fd = -1);

  private:
    int fd_ = -1;
};

}  // namespace tutorial
