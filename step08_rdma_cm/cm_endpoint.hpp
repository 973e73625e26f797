// Step 08: an endpoint on an rdma_cm_id: librdmacm owns the id and the QP, the step its buffer,
// MR, completion channel and CQ, all on the id's context and PD.
#pragma once

#include "cq_events.hpp"
#include "errors.hpp"
#include "private_data.hpp"
#include "verbs_raii.hpp"

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <span>
#include <string>

namespace tutorial {

/// \brief A work completion that finished with a status other than IBV_WC_SUCCESS.
class WorkCompletionError : public TutorialError {
  public:
    /// \p receive: whether \p wc was a receive's. In a failed completion the opcode is undefined
    /// (ibv_poll_cq(3)), so the caller tells from the wr_id; the hint depends on it.
    WorkCompletionError(const ibv_wc& wc, bool receive);
};

//! [owners]
// The owners of librdmacm's objects, in verbs_raii.hpp's shape.
inline int destroy_event_channel(rdma_event_channel* channel) {
    rdma_destroy_event_channel(channel);
    return 0;
}
// The QP that rdma_create_qp made belongs to the id: rdma_destroy_qp takes the id. This owner
// holds the id's address but owns only its QP; CmId owns the id itself.
inline int destroy_id_qp(rdma_cm_id* id) {
    rdma_destroy_qp(id);
    return 0;
}
inline int free_addrinfo(rdma_addrinfo* info) {
    rdma_freeaddrinfo(info);
    return 0;
}
inline constexpr char kDestroyEventChannel[] = "rdma_destroy_event_channel";
inline constexpr char kDestroyId[] = "rdma_destroy_id";
inline constexpr char kDestroyIdQp[] = "rdma_destroy_qp";
inline constexpr char kFreeAddrinfo[] = "rdma_freeaddrinfo";
inline constexpr char kDestroyCompChannel[] = "ibv_destroy_comp_channel";
using CmEventChannel =
    std::unique_ptr<rdma_event_channel,
                    VerbsDeleter<rdma_event_channel, destroy_event_channel, kDestroyEventChannel>>;
// rdma_destroy_id blocks until every event reported on the id is acked (rdma_ack_cm_event).
using CmId = std::unique_ptr<rdma_cm_id, VerbsDeleter<rdma_cm_id, rdma_destroy_id, kDestroyId>>;
using CmQueuePair =
    std::unique_ptr<rdma_cm_id, VerbsDeleter<rdma_cm_id, destroy_id_qp, kDestroyIdQp>>;
using AddrInfo =
    std::unique_ptr<rdma_addrinfo, VerbsDeleter<rdma_addrinfo, free_addrinfo, kFreeAddrinfo>>;
using CompletionChannel =
    std::unique_ptr<ibv_comp_channel,
                    VerbsDeleter<ibv_comp_channel, ibv_destroy_comp_channel, kDestroyCompChannel>>;
//! [owners]

struct CmEndpointConfig {
    std::size_t buffer_size = 4096;   ///< the registered buffer's size in bytes (> 0)
    std::uint32_t tx_depth = 16;      ///< send queue depth
    std::uint32_t rx_depth = 500;     ///< receive queue depth
    bool completion_channel = false;  ///< bind the CQ to an O_NONBLOCK completion channel
    std::size_t remote_window = 0;    ///< the buffer's last bytes the peer may WRITE (0: none)
};

constexpr std::uint32_t kAckBatch = 16;  // completion events acked at a time

/// \brief An RC QP made by librdmacm on an rdma_cm_id, with its own registered buffer, MR,
/// completion channel and CQ, and a second MR, the only one a peer may WRITE, over the
/// buffer's last CmEndpointConfig::remote_window bytes. The QP's state is librdmacm's: rdma_connect
/// and rdma_accept move it to RTS.
class CmEndpoint {
  public:
    /// \p id must have its device: an address resolved, or a connect request.
    /// \throws std::system_error naming the verb
    CmEndpoint(CmId id, const CmEndpointConfig& config);
    CmEndpoint(const CmEndpoint&) = delete;
    CmEndpoint& operator=(const CmEndpoint&) = delete;
    ~CmEndpoint();  // acks the CQ events not yet acked (ibv_destroy_cq waits for them)

    [[nodiscard]] rdma_cm_id* id() const noexcept { return id_.get(); }
    [[nodiscard]] std::span<std::byte> buffer() const noexcept {
        return {buffer_.get(), config_.buffer_size};
    }
    /// \p p with what a peer needs to WRITE into the remote window: its address, rkey and
    /// length; all 0 when this endpoint has none.
    [[nodiscard]] PrivateData window(PrivateData p) const;

    void post_send(std::uint64_t wr_id, std::size_t offset, std::size_t length,
                   bool signaled = true) {
        check_length(length, "post_send");
        ibv_sge sge{reinterpret_cast<std::uintptr_t>(buffer_.get() + offset),
                    static_cast<std::uint32_t>(length), mr_->lkey};
        ibv_send_wr wr{};
        wr.wr_id = wr_id;
        wr.sg_list = &sge;
        wr.num_sge = length > 0 ? 1 : 0;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
        if (length <= max_inline_data_) wr.send_flags |= IBV_SEND_INLINE;
        ibv_send_wr* bad = nullptr;
        if (int rc = ibv_post_send(id_->qp, &wr, &bad); rc != 0) [[unlikely]]
            throw_post_failed(rc, "ibv_post_send");
    }
    /// One signaled RDMA WRITE of buffer()[offset, offset+length) to the peer's window.
    void post_write(std::uint64_t wr_id, std::size_t offset, std::size_t length,
                    const PrivateData& remote);
    void post_recv(std::uint64_t wr_id, std::size_t offset, std::size_t length,
                   std::size_t count = 1);

    // step06's completion channel
    [[nodiscard]] int channel_fd() const noexcept { return channel_ ? channel_->fd : -1; }
    void request_notify();
    [[nodiscard]] bool get_event();
    void ack(std::uint32_t count) noexcept { ibv_ack_cq_events(cq_.get(), count); }
    [[nodiscard]] int poll(std::span<ibv_wc> completions) {
        const int n =
            ibv_poll_cq(cq_.get(), static_cast<int>(completions.size()), completions.data());
        if (n < 0) [[unlikely]]
            throw_post_failed(EIO, "ibv_poll_cq");
        return n;
    }
    [[nodiscard]] CqEventTracker& events() noexcept { return events_; }

  private:
    [[noreturn]] static void throw_post_failed(int rc, const char* verb);
    // An SGE's length is 32 bits: a longer one would be cut short, so check the port's limit.
    void check_length(std::size_t length, const char* what) const {
        if (length > max_msg_sz_) [[unlikely]]
            throw_message_too_long(length, what);
    }
    [[noreturn]] void throw_message_too_long(std::size_t length, const char* what) const;

    CmEndpointConfig config_;
    std::uint32_t max_inline_data_ = 0;
    std::uint32_t max_msg_sz_ = 0;  // the port's largest message (ibv_port_attr::max_msg_sz)
    CqEventTracker events_{kAckBatch};

    //! [members]
    // Declared parent-first: C++ destroys them in reverse, QP -> CQ -> channel -> MR -> buffer
    // -> id. The id goes last: its PD and context are librdmacm's, shared by every id on the
    // device. The PD is freed with the device's last id; the context stays open in librdmacm's
    // device list until the process ends (or the device is removed).
    CmId id_;                    // rdma_destroy_id
    Buffer buffer_;              // free
    MemoryRegion mr_;            // ibv_dereg_mr: local access only
    MemoryRegion window_mr_;     // ibv_dereg_mr: the remote window, if any
    CompletionChannel channel_;  // ibv_destroy_comp_channel
    CompletionQueue cq_;         // ibv_destroy_cq
    CmQueuePair qp_;             // rdma_destroy_qp
    //! [members]
};

void set_nonblocking(int fd);

/// --trace: turns on trace(), which is silent until then.
void enable_trace() noexcept;
[[nodiscard]] timespec trace_clock() noexcept;  // now, as trace() prints it
/// One line on stderr: the time \p since as tcpdump -tt prints it (to sort the line among a
/// capture's packets), \p what (a librdmacm call or a CM event), and the state of \p id's QP
/// now. A call's line gives the time the call began, and the QP's state once it returned.
void trace(const char* what, const rdma_cm_id* id, timespec since = trace_clock());

//! [conn_param]
/// What rdma_connect and rdma_accept send besides \p wire, the private data in wire order: one
/// RDMA READ or atomic in flight each way, 6 transport retries, and RNR retries for ever (7) for
/// the peer's sends to this side.
[[nodiscard]] inline rdma_conn_param connection_parameters(const PrivateData& wire) {
    rdma_conn_param param{};
    param.private_data = &wire;
    param.private_data_len = sizeof wire;
    param.responder_resources = 1;
    param.initiator_depth = 1;
    param.retry_count = 6;
    param.rnr_retry_count = 7;
    return param;
}
// The parameters point at \p wire: a temporary would be gone before rdma_connect reads it.
rdma_conn_param connection_parameters(const PrivateData&& wire) = delete;
//! [conn_param]

/// 127.x.x.x, ::1, localhost: on RoCE no RDMA device owns a loopback address.
[[nodiscard]] inline bool is_loopback(const std::string& host) {
    return host.rfind("127.", 0) == 0 || host == "::1" || host == "localhost";
}

}  // namespace tutorial
