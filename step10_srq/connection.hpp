// Step 10: one client's RC QP on the shared CQ and SRQ, with its own send slot.
#pragma once

#include "rdma_device.hpp"
#include "shared_cq.hpp"
#include "shared_srq.hpp"
#include "verbs_raii.hpp"

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace tutorial {

/// A send's wr_id has this bit set; a receive's is its ring slot (ReceiveRing), bit clear.
inline constexpr std::uint64_t kSendTag = std::uint64_t{1} << 63;

/// \brief One connection: an RC QP on the shared CQ and SRQ, and the registered bytes of its
/// outgoing message. It is in INIT once constructed, in RTS after connect(). The Device, CQ and
/// SRQ must outlive it.
class Connection {
  public:
    /// \throws TutorialError kExitUsage (tx depth or MTU over a device limit);
    ///         std::system_error naming the verb
    Connection(const Device& device, const SharedCompletionQueue& cq, const SharedReceiveQueue& srq,
               std::uint32_t tx_depth, std::size_t message_size, ibv_mtu mtu);
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;

    /// \brief What this side advertises: LID, QPN, PSN, GID, MTU, send slot (rkey 0), READ depth.
    [[nodiscard]] PeerInfo local_info() const;
    /// \brief step03's rule: the GID that holds the TCP connection's local address (-g wins).
    void use_local_address(const std::optional<std::array<std::uint8_t, 16>>& local_address);
    [[nodiscard]] const LocalPort& local_port() const noexcept { return local_port_; }
    /// \brief RTR then RTS towards \p remote, with the smaller MTU and READ depth of both sides.
    void connect(const PeerInfo& remote);
    [[nodiscard]] const std::optional<PeerInfo>& remote_info() const noexcept { return remote_; }
    [[nodiscard]] ibv_mtu path_mtu() const noexcept { return mtu_; }
    [[nodiscard]] std::uint32_t qp_num() const noexcept { return qp_->qp_num; }

    /// \brief The outgoing message's bytes: fill them, then post_send().
    [[nodiscard]] std::span<std::byte> send_slot() const noexcept {
        return {send_buffer_.get(), message_size_};
    }
    /// \brief Posts a SEND of the send slot's first \p length bytes; inline when it fits.
    /// \throws std::logic_error before connect(); std::system_error ("ibv_post_send")
    void post_send(std::uint64_t wr_id, std::size_t length, bool signaled);
    /// \brief To ERR: its sends flush into the shared CQ; its receives stay on the SRQ.
    /// \throws std::system_error ("ibv_modify_qp to ERR")
    void move_to_error();

  private:
    const Device* device_;
    std::size_t message_size_;
    ibv_mtu mtu_;
    std::uint32_t psn_ = 0;
    std::uint32_t max_inline_data_ = 0;
    std::uint8_t read_depth_ = 1;
    LocalPort local_port_;
    std::optional<PeerInfo> remote_;
    // Parent-first: C++ destroys the QP, then the send slot's MR, then its bytes.
    Buffer send_buffer_;
    MemoryRegion send_mr_;
    QueuePair qp_;
};

}  // namespace tutorial
