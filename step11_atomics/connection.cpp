// Step 11: a connection's QP: create it with the peer's remote access, connect it.
#include "connection.hpp"

#include "device.hpp"
#include "qp_transitions.hpp"
#include "resources.hpp"

#include <algorithm>
#include <stdexcept>

namespace tutorial {

Connection::Connection(const Device& device, ibv_cq* cq, std::uint32_t tx_depth, ibv_mtu mtu,
                       unsigned remote_access, Exposed exposed)
    : device_(&device),
      mtu_(mtu != 0 ? mtu : device.port_attr().active_mtu),
      exposed_(exposed),
      local_port_(device.local_port()) {
    const auto max_wr = static_cast<std::uint64_t>(device.attr().max_qp_wr);
    if (tx_depth > max_wr) { over_limit("tx depth", tx_depth, device.name(), "max_qp_wr", max_wr); }
    if (mtu != 0 && mtu > device.port_attr().max_mtu) {
        over_limit("MTU", static_cast<std::uint64_t>(mtu_bytes(mtu)), device.name(), "max_mtu",
                   static_cast<std::uint64_t>(mtu_bytes(device.port_attr().max_mtu)));
    }
    // Atomics count against the same limits as READs: max_qp_rd_atom (served) and
    // max_qp_init_rd_atom (initiated).
    read_depth_ = static_cast<std::uint8_t>(std::clamp(
        std::min(device.attr().max_qp_init_rd_atom, device.attr().max_qp_rd_atom), 1, 16));
    qp_ = create_rc_qp(device.pd(), cq, nullptr, tx_depth);
    //! [remote_access]
    ibv_qp_attr attr = init_attributes(device.port(), local_port_.pkey_index);
    attr.qp_access_flags = remote_access;  // what the peer's READ, WRITE and atomics may do here
    modify_qp(qp_.get(), attr, IBV_QPS_RESET, IBV_QPS_INIT);
    //! [remote_access]
    psn_ = random_psn();
}

PeerInfo Connection::local_info() const {
    PeerInfo info;
    info.lid = local_port_.attr.lid;
    info.qpn = qp_->qp_num;
    info.psn = psn_;
    info.gid = local_port_.gid;
    info.mtu = mtu_;
    info.addr = exposed_.addr;
    info.rkey = exposed_.rkey;
    info.length = exposed_.length;
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
    read_depth_ = std::min(read_depth_, remote.read_depth);
    connect_qp(qp_.get(), local_port_, device_->port(), path_mtu, psn_, remote, read_depth_);
    mtu_ = path_mtu;
    remote_ = remote;
}

}  // namespace tutorial
