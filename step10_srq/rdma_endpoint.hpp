// Step 06: step05's RDMAEndpoint, extended with a completion channel (O_NONBLOCK fd) and its
// events.
#pragma once

#include "cq_events.hpp"
#include "errors.hpp"
#include "gid.hpp"
#include "resources.hpp"
#include "verbs_raii.hpp"
#include "wire_format.hpp"

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace tutorial {

/// \brief A work completion that finished with a status other than IBV_WC_SUCCESS.
///
/// what() reads like `work completion failed: IBV_WC_RETRY_EXC_ERR (transport retry counter
/// exceeded) for wr_id 7, vendor_err 0x0`; hint() names the likely cause. The exit code is
/// kExitRdma.
class WorkCompletionError : public TutorialError {
  public:
    /// \p receive: whether \p wc was a receive's. In a failed completion the opcode is undefined
    /// (ibv_poll_cq(3)), so the caller tells from the wr_id; the hint depends on it.
    WorkCompletionError(const ibv_wc& wc, bool receive);
    [[nodiscard]] ibv_wc_status status() const noexcept { return wc_.status; }

  private:
    ibv_wc wc_;
};

/// \brief What one side tells the other to connect an RC QP and, in v3, to address its buffer
/// and to agree on the run: step04's QpEndpointInfo (LID, QPN, PSN, GID, all that
/// ibv_rc_pingpong's message carries), and what only handshake v3 carries.
struct PeerInfo : QpEndpointInfo {
    ibv_mtu mtu = IBV_MTU_1024;      ///< v3 only: the largest path MTU this side accepts
    std::uint64_t addr = 0;          ///< v3 only: the buffer's virtual address
    std::uint32_t rkey = 0;          ///< v3 only: the buffer's remote key (0 = no remote access)
    std::uint64_t length = 0;        ///< v3 only: the buffer's length in bytes
    std::uint32_t message_size = 0;  ///< v3 only: the program's -s (0: not said)
    std::uint32_t iterations = 0;    ///< v3 only: the program's -n (0: not said)
    /// v3 only: the RDMA READs (and atomics) this side can have outstanding, as the requester
    /// and as the responder; both sides use the smaller one. ibv_rc_pingpong's wire: 1.
    std::uint8_t read_depth = 1;
    bool operator==(const PeerInfo& other) const noexcept;
};

/// \brief Which device Device opens: the options -d, -i and -g.
struct DeviceConfig {
    std::string device_name;         ///< empty: the first device
    std::uint8_t port = 1;           ///< the port number, from 1
    int gid_index = -1;              ///< negative: choose_gid() over the port's table
    std::uint8_t service_level = 0;  ///< -l/--sl: the SL in each QP's address vector
    std::uint8_t traffic_class = 0;  ///< --tclass: the GRH's traffic class (DSCP and ECN bits)
    std::uint16_t pkey_index = 0;    ///< --pkey-index: the P_Key table entry at INIT
};

/// \brief An opened device that endpoints share: the device list, the context and one protection
/// domain, with the port's attributes and the GID chosen for it.
///
/// A server opens its device once and gives each connection its own RDMAEndpoint on it. It is
/// neither copied nor moved: every endpoint on it keeps a reference, and must be destroyed first.
class Device {
  public:
    /// \brief step04's opening: the device list, the named device, its context, a port that
    /// exists, its attributes and the GID (-g, or choose_gid()); then the PD.
    /// \throws TutorialError kExitNoDevice, kExitNoProvider, kExitNoSuchDevice (device, port or
    ///         GID); std::system_error naming the verb
    explicit Device(const DeviceConfig& config);
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    /// \brief The raw handles, and what the constructor queried, for the endpoints on it.
    [[nodiscard]] ibv_context* context() const noexcept { return context_.get(); }
    [[nodiscard]] ibv_pd* pd() const noexcept { return pd_.get(); }
    [[nodiscard]] const std::string& name() const noexcept { return opened_.name; }
    [[nodiscard]] std::uint8_t port() const noexcept { return port_; }
    [[nodiscard]] const ibv_device_attr& attr() const noexcept { return opened_.attr; }
    [[nodiscard]] const ibv_port_attr& port_attr() const noexcept { return local_.attr; }
    /// \brief The port's attributes and the GID index in use, as step04's query_local_port()
    /// found them.
    [[nodiscard]] const LocalPort& local_port() const noexcept { return local_; }
    /// \brief The port as a connection through this local address uses it: step03's choice of
    /// GID by the TCP connection's local address (-g still wins), with the fabric controls.
    [[nodiscard]] LocalPort local_port_for(
        const std::optional<std::array<std::uint8_t, 16>>& local_address) const;

  private:
    std::uint8_t port_ = 1;
    int gid_index_ = -1;   // -g, or negative
    OpenedDevice opened_;  // step04's open_and_check: the name and the device's attributes
    LocalPort local_;      // step04's query_local_port: the port's attributes and the GID
    //! [device-members]
    // Declared parent-first: C++ destroys members in reverse, PD -> context -> device list.
    DeviceList device_list_;
    Context context_;
    ProtectionDomain pd_;
    //! [device-members]
};

/// \brief One endpoint's queues and buffer: what RDMAEndpoint creates on a Device.
struct EndpointConfig {
    std::size_t buffer_size = 4096;       ///< the registered buffer's size in bytes (> 0)
    std::uint32_t tx_depth = 1;           ///< send queue depth: outstanding sends, writes and reads
    std::uint32_t rx_depth = 500;         ///< receive queue depth
    int access = IBV_ACCESS_LOCAL_WRITE;  ///< MR access; add IBV_ACCESS_REMOTE_WRITE/READ for
                                          ///< one-sided peers (they also go to the QP)
    ibv_mtu mtu{};                        ///< path MTU; 0: the port's active MTU
    //! [config]
    // New in step06:
    bool completion_channel = false;  ///< bind the CQ to an O_NONBLOCK completion channel
    //! [config]
};

/// Completion events are acked this many at a time: ibv_ack_cq_events takes a mutex.
constexpr std::uint32_t kAckBatch = 16;

/// \brief The owner of a completion channel, in verbs_raii.hpp's shape (step06).
inline constexpr char kDestroyCompChannel[] = "ibv_destroy_comp_channel";
using CompletionChannel =
    std::unique_ptr<ibv_comp_channel,
                    VerbsDeleter<ibv_comp_channel, ibv_destroy_comp_channel, kDestroyCompChannel>>;

/// \brief An RC queue pair with its own registered buffer, on a shared Device: the tutorial's
/// reusable class.
///
/// It owns, parent-first, a page-aligned buffer, its memory region, a completion channel, one
/// completion queue and one RC QP; the context and PD are the Device's. A constructed endpoint is
/// in INIT; after connect() (or connect_to_peer(), which does the handshake first) it is
/// in RTS and can post sends. Receives may be posted from INIT on.
///
/// \par Thread safety
/// One endpoint must be used by one thread at a time. Distinct endpoints are independent and
/// may be used from distinct threads.
class RDMAEndpoint {
  public:
    /// \brief Allocates and registers the buffer, creates the CQ and QP on \p device and moves
    /// the QP to INIT. \p device must outlive the endpoint.
    /// \throws TutorialError kExitUsage (a depth or size over a device limit; the message names
    ///         the limit); std::system_error naming the verb that failed (e.g. "ibv_reg_mr")
    /// Nothing leaks when it throws: every resource already made has an owner.
    RDMAEndpoint(const Device& device, const EndpointConfig& config);
    /// \p other is left empty and not connected (no remote_info()), fit only to be destroyed.
    RDMAEndpoint(RDMAEndpoint&& other) noexcept;
    RDMAEndpoint& operator=(RDMAEndpoint&&) = delete;
    /// \brief Acks the CQ events not yet acked (ibv_destroy_cq waits for them), then C++ destroys
    /// the members child-first: QP -> CQ -> channel -> MR -> buffer.
    ~RDMAEndpoint();

    /// \brief What this side advertises: LID, QPN, PSN, GID, MTU, the buffer (rkey 0 when the
    /// MR grants no remote access) and the RDMA READ depth. message_size and iterations are 0:
    /// the handshake fills them in.
    [[nodiscard]] PeerInfo local_info() const;

    /// \brief Chooses this connection's source GID by the TCP connection's local address, as
    /// step03 does (-g still wins); the handshake calls it once the socket is connected.
    /// \throws std::logic_error once connected, or on a moved-from endpoint
    void use_local_address(const std::optional<std::array<std::uint8_t, 16>>& local_address);
    /// \brief The port as this endpoint uses it: the GID, the rule that chose it, the fabric
    /// controls.
    [[nodiscard]] const LocalPort& local_port() const noexcept { return local_port_; }

    /// \brief Moves the QP to RTR then RTS towards \p remote, with the smaller MTU and READ depth
    /// of both sides.
    /// \throws std::system_error ("ibv_modify_qp INIT->RTR"/"ibv_modify_qp RTR->RTS")
    /// \throws TutorialError (kExitPeer) when the port is RoCE and \p remote has no GID
    /// \throws std::logic_error when already connected, or moved from
    void connect(const PeerInfo& remote);

    /// \brief Once connected.
    [[nodiscard]] const std::optional<PeerInfo>& remote_info() const noexcept { return remote_; }

    [[nodiscard]] std::span<std::byte> buffer() const noexcept {
        return {buffer_.get(), config_.buffer_size};
    }
    /// \brief The raw handles, for code that goes beyond the class.
    [[nodiscard]] ibv_qp* qp() const noexcept { return qp_.get(); }
    [[nodiscard]] ibv_cq* cq() const noexcept { return cq_.get(); }  ///< \copybrief qp()
    [[nodiscard]] ibv_mr* mr() const noexcept { return mr_.get(); }  ///< \copybrief qp()
    /// \brief The path MTU in use once connected (or the configured one before).
    [[nodiscard]] ibv_mtu path_mtu() const noexcept { return mtu_; }

    /// \brief Posts a SEND of buffer()[offset, offset+length); inline when the length fits the
    /// QP's max_inline_data.
    /// \param wr_id returned in the completion
    /// \param offset where the message starts in buffer()
    /// \param length bytes to send (0 is allowed)
    /// \param signaled false: no completion for this send (an unsignaled send's queue slot is
    ///        freed when a later signaled send completes; signal at least every tx_depth sends,
    ///        or the queue fills and ibv_post_send fails. Soft-RoCE frees the slots anyway.)
    /// \throws std::logic_error before connecting; std::out_of_range outside the buffer;
    ///         std::system_error ("ibv_post_send")
    //! [post-send]
    void post_send(std::uint64_t wr_id, std::size_t offset, std::size_t length,
                   bool signaled = true) {
        require_connected("post_send");
        check_local_range(offset, length, "post_send");
        ibv_sge sge{reinterpret_cast<std::uintptr_t>(buffer_.get() + offset),
                    static_cast<std::uint32_t>(length), mr_->lkey};
        ibv_send_wr wr{};
        wr.wr_id = wr_id;
        wr.sg_list = &sge;
        wr.num_sge = length > 0 ? 1 : 0;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
        // Inline: the CPU copies the payload into the work request; no DMA read of the buffer.
        if (length <= max_inline_data_) wr.send_flags |= IBV_SEND_INLINE;
        ibv_send_wr* bad = nullptr;
        if (int rc = ibv_post_send(qp_.get(), &wr, &bad); rc != 0) [[unlikely]]
            throw_post_send_failed(rc);
    }
    //! [post-send]

    /// \brief Posts \p count receives, all into buffer()[offset, offset+length) and all with
    /// \p wr_id, chained in as few ibv_post_recv calls as possible. Allowed from INIT on, so that
    /// receives are ready before the peer's first send.
    /// \throws std::out_of_range outside the buffer; std::system_error ("ibv_post_recv")
    void post_recv(std::uint64_t wr_id, std::size_t offset, std::size_t length,
                   std::size_t count = 1);

    /// \name The completion channel (step06); only with EndpointConfig::completion_channel.
    /// @{
    /// \brief The channel's fd, O_NONBLOCK, for poll(2)/epoll(7); -1 without a channel.
    [[nodiscard]] int channel_fd() const noexcept { return channel_ ? channel_->fd : -1; }
    /// \brief ibv_req_notify_cq(cq, 0): the next completion raises one event (one-shot).
    /// \throws std::system_error ("ibv_req_notify_cq")
    void request_notify();
    /// \brief ibv_get_cq_event(): true when it took an event (count it in events()), false when
    /// none is queued (EAGAIN).
    /// \throws std::system_error ("ibv_get_cq_event"); std::logic_error without a channel
    [[nodiscard]] bool get_event();
    /// \brief ibv_ack_cq_events(cq, \p count). The destructor acks whatever is left.
    void ack(std::uint32_t count) noexcept;
    /// \brief ibv_poll_cq into \p completions: how many it filled, failed ones included (the
    /// caller throws WorkCompletionError for those).
    /// \throws std::system_error ("ibv_poll_cq")
    [[nodiscard]] int poll(std::span<ibv_wc> completions) {
        const int n =
            ibv_poll_cq(cq_.get(), static_cast<int>(completions.size()), completions.data());
        if (n < 0) [[unlikely]]
            throw_poll_failed();
        return n;
    }
    /// \brief The CQ's event bookkeeping: received, acked, re-arms, drains, safety-net finds.
    [[nodiscard]] CqEventTracker& events() noexcept { return events_; }
    /// @}

  private:
    // Every post checks first, inline: a compare or two on the hot path, the throw out of line.
    void require_connected(const char* what) const {
        if (!remote_) [[unlikely]]
            throw_not_connected(what);
    }
    void check_local_range(std::size_t offset, std::size_t length, const char* what) const {
        if (offset > config_.buffer_size || length > config_.buffer_size - offset) [[unlikely]]
            throw_outside_buffer(offset, length, what);
        // An SGE's length is 32 bits: a longer one would be cut short, so check the port's limit.
        if (length > max_msg_sz_) [[unlikely]]
            throw_message_too_long(length, what);
    }
    [[noreturn]] static void throw_not_connected(const char* what);
    [[noreturn]] void throw_outside_buffer(std::size_t offset, std::size_t length,
                                           const char* what) const;
    [[noreturn]] void throw_message_too_long(std::size_t length, const char* what) const;
    [[noreturn]] static void throw_poll_failed();
    [[noreturn]] static void throw_post_send_failed(int rc);
    void check_device_limits() const;
    void create_queues();
    void create_channel();

    const Device* device_;
    EndpointConfig config_;
    ibv_mtu mtu_ = IBV_MTU_1024;
    std::uint32_t psn_ = 0;
    std::uint32_t max_inline_data_ = 0;
    std::uint32_t max_msg_sz_ = 0;  // the port's largest message (ibv_port_attr::max_msg_sz)
    std::uint8_t read_depth_ = 1;
    LocalPort local_port_;  // the Device's, then the one use_local_address() chose
    std::optional<PeerInfo> remote_;
    CqEventTracker events_{16};

    //! [members]
    // Declared parent-first, on the Device's context and PD: C++ destroys them in reverse,
    // QP -> CQ -> channel -> MR -> buffer, each child before its parent, also when the
    // constructor throws. The channel must outlive the CQ bound to it (else EBUSY).
    Buffer buffer_;
    MemoryRegion mr_;
    CompletionChannel channel_;
    CompletionQueue cq_;
    QueuePair qp_;
    //! [members]
};

}  // namespace tutorial
