// Step 10: a connection's QP on the shared CQ and SRQ: create, connect, send, end.
#include "connection.hpp"

#include "device.hpp"
#include "qp_transitions.hpp"
#include "resources.hpp"

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <string>
#include <system_error>

namespace tutorial {

Connection::Connection(const Device& device, const SharedCompletionQueue& cq,
                       const SharedReceiveQueue& srq, std::uint32_t tx_depth,
                       std::size_t message_size, ibv_mtu mtu)
    : device_(&device),
      message_size_(message_size),
      mtu_(mtu != 0 ? mtu : device.port_attr().active_mtu),
      local_port_(device.local_port()) {
    const auto max_wr = static_cast<std::uint64_t>(device.attr().max_qp_wr);
    if (tx_depth > max_wr) { over_limit("tx depth", tx_depth, device.name(), "max_qp_wr", max_wr); }
    if (mtu != 0 && mtu > device.port_attr().max_mtu) {
        over_limit("MTU", static_cast<std::uint64_t>(mtu_bytes(mtu)), device.name(), "max_mtu",
                   static_cast<std::uint64_t>(mtu_bytes(device.port_attr().max_mtu)));
    }
    read_depth_ = static_cast<std::uint8_t>(std::clamp(
        std::min(device.attr().max_qp_init_rd_atom, device.attr().max_qp_rd_atom), 1, 16));
    send_buffer_ = allocate_buffer(message_size);
    send_mr_.reset(ibv_reg_mr(device.pd(), send_buffer_.get(), message_size, 0));
    if (!send_mr_) { throw_reg_mr_error(errno, message_size); }
    // Sends and receives complete into the one shared CQ; receives come from the SRQ.
    qp_ = create_rc_qp(device.pd(), cq.get(), srq.get(), tx_depth);
    ibv_qp_attr attr = init_attributes(device.port(), local_port_.pkey_index);
    modify_qp(qp_.get(), attr, IBV_QPS_RESET, IBV_QPS_INIT);
    max_inline_data_ = query_queue_pair(qp_.get()).max_inline_data;
    psn_ = random_psn();
}

PeerInfo Connection::local_info() const {
    PeerInfo info;
    info.lid = local_port_.attr.lid;
    info.qpn = qp_->qp_num;
    info.psn = psn_;
    info.gid = local_port_.gid;
    info.mtu = mtu_;
    info.addr = reinterpret_cast<std::uintptr_t>(send_buffer_.get());
    info.rkey = 0;
    info.length = message_size_;
    info.read_depth = read_depth_;
    return info;
}

void Connection::use_local_address(
    const std::optional<std::array<std::uint8_t, 16>>& local_address) {
    if (remote_) throw std::logic_error("use_local_address: the connection is connected");
    local_port_ = device_->local_port_for(local_address);
}

void Connection::connect(const PeerInfo& remote) {
    if (remote_) throw std::logic_error("connect: the connection is connected");
    const ibv_mtu path_mtu = std::min(mtu_, remote.mtu);
    connect_qp(qp_.get(), local_port_, device_->port(), path_mtu, psn_, remote,
               std::min(read_depth_, remote.read_depth));
    mtu_ = path_mtu;
    remote_ = remote;
}

void Connection::post_send(std::uint64_t wr_id, std::size_t length, bool signaled) {
    if (!remote_) [[unlikely]]
        throw std::logic_error("post_send: the connection is not connected yet");
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(send_buffer_.get()),
                static_cast<std::uint32_t>(std::min(length, message_size_)), send_mr_->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = length > 0 ? 1 : 0;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
    if (length <= max_inline_data_) wr.send_flags |= IBV_SEND_INLINE;
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(qp_.get(), &wr, &bad); rc != 0) [[unlikely]]
        throw std::system_error(rc, std::generic_category(), "ibv_post_send");
}

//! [error]
void Connection::move_to_error() {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    if (const int rc = ibv_modify_qp(qp_.get(), &attr, IBV_QP_STATE); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_modify_qp to ERR");
    }
}
//! [error]

}  // namespace tutorial
