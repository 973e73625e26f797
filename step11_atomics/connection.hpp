// Step 11: one RC QP on a CQ, with the remote access its peer is granted: the server's QPs let
// clients READ, WRITE and run atomics on the target; a client's QPs grant nothing.
#pragma once

#include "rdma_device.hpp"
#include "verbs_raii.hpp"

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace tutorial {

/// \brief The memory a side advertises in its handshake: the server's target MR, or a client's
/// local buffer (rkey 0: the server may not touch it).
struct Exposed {
    std::uint64_t addr = 0;
    std::uint64_t length = 0;
    std::uint32_t rkey = 0;
};

/// \brief One connection: an RC QP whose send and receive queues complete into \p cq. It is in
/// INIT once constructed, in RTS after connect(). The Device and the CQ must outlive it.
class Connection {
  public:
    /// \param device the opened device, whose PD the QP belongs to
    /// \param cq the CQ that both of the QP's queues complete into
    /// \param tx_depth the send queue's depth
    /// \param mtu the path MTU asked for (0: the port's active MTU)
    /// \param remote_access the IBV_ACCESS_REMOTE_* flags the peer's one-sided verbs get on this
    ///        QP (the MR must grant them too)
    /// \param exposed the memory that local_info() advertises
    /// \throws TutorialError kExitUsage (tx depth or MTU over a device limit);
    ///         std::system_error naming the verb
    Connection(const Device& device, ibv_cq* cq, std::uint32_t tx_depth, ibv_mtu mtu,
               unsigned remote_access, Exposed exposed);
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;

    /// \brief What this side advertises: LID, QPN, PSN, GID, MTU, the exposed memory, READ depth.
    [[nodiscard]] PeerInfo local_info() const;
    /// \brief step03's rule: the GID that holds the TCP connection's local address (-g wins).
    void use_local_address(const std::optional<std::array<std::uint8_t, 16>>& local_address);
    [[nodiscard]] const LocalPort& local_port() const noexcept { return local_port_; }
    /// \brief RTR then RTS towards \p remote, with the smaller MTU and READ depth of both sides.
    void connect(const PeerInfo& remote);
    [[nodiscard]] const std::optional<PeerInfo>& remote_info() const noexcept { return remote_; }
    /// \brief The READs and atomics in flight, each way, that both sides agreed on (connect()).
    [[nodiscard]] std::uint8_t read_depth() const noexcept { return read_depth_; }
    [[nodiscard]] std::uint32_t qp_num() const noexcept { return qp_->qp_num; }
    [[nodiscard]] ibv_qp* qp() const noexcept { return qp_.get(); }

  private:
    const Device* device_;
    ibv_mtu mtu_;
    std::uint32_t psn_ = 0;
    std::uint8_t read_depth_ = 1;
    Exposed exposed_;
    LocalPort local_port_;
    std::optional<PeerInfo> remote_;
    QueuePair qp_;
};

}  // namespace tutorial
