// Step 06: step05's RDMAEndpoint, extended with a completion channel (O_NONBLOCK fd) and its
// events.
#include "rdma_endpoint.hpp"

#include "device.hpp"
#include "gid.hpp"
#include "qp_transitions.hpp"
#include "resources.hpp"

#include <fcntl.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <stdexcept>
#include <system_error>
#include <utility>

namespace tutorial {

namespace {

// A completion's vendor_err, the device's own error code, in hex: "0x1f".
std::string vendor_err_text(std::uint32_t vendor_err) {
    char text[16];
    std::snprintf(text, sizeof text, "0x%x", vendor_err);
    return text;
}

}  // namespace

// ====================================================================== errors

WorkCompletionError::WorkCompletionError(const ibv_wc& wc, bool receive)
    : TutorialError(kExitRdma,
                    std::string("work completion failed: ") + wc_status_name(wc.status) + " (" +
                        ibv_wc_status_str(wc.status) + ") for wr_id " + std::to_string(wc.wr_id) +
                        ", vendor_err " + vendor_err_text(wc.vendor_err),
                    wc_status_cause(wc.status, receive)),
      wc_(wc) {}

bool PeerInfo::operator==(const PeerInfo& other) const noexcept {
    return lid == other.lid && qpn == other.qpn && psn == other.psn && gid == other.gid &&
           mtu == other.mtu && addr == other.addr && rkey == other.rkey && length == other.length &&
           message_size == other.message_size && iterations == other.iterations &&
           read_depth == other.read_depth;
}

// ====================================================================== the device

namespace {

[[noreturn]] void over_limit(const std::string& what, std::uint64_t value,
                             const std::string& device, const char* limit, std::uint64_t max) {
    throw TutorialError(kExitUsage,
                        what + " " + std::to_string(value) + " is over " + device + "'s limit " +
                            limit + " = " + std::to_string(max),
                        "ibv_devinfo -v shows the device's limits");
}

}  // namespace

//! [open]
// step04's open_and_check (the device list, the named device, its context, a port that exists)
// and query_local_port (the GID, -g or choose_gid); then the PD that every endpoint shares.
Device::Device(const DeviceConfig& config) : port_(config.port), gid_index_(config.gid_index) {
    opened_ = open_and_check(device_list_, context_, config.device_name, port_);
    local_ = query_local_port(context_.get(), port_, config.gid_index, opened_.attr.phys_port_cnt,
                              std::nullopt);
    check_pkey_index(local_.attr, port_, config.pkey_index);
    local_.service_level = config.service_level;
    local_.traffic_class = config.traffic_class;
    local_.pkey_index = config.pkey_index;
    pd_.reset(ibv_alloc_pd(context_.get()));
    if (!pd_) { throw std::system_error(errno, std::generic_category(), "ibv_alloc_pd"); }
}
//! [open]

LocalPort Device::local_port_for(
    const std::optional<std::array<std::uint8_t, 16>>& local_address) const {
    LocalPort port = query_local_port(context_.get(), port_, gid_index_, opened_.attr.phys_port_cnt,
                                      local_address);
    port.service_level = local_.service_level;
    port.traffic_class = local_.traffic_class;
    port.pkey_index = local_.pkey_index;
    return port;
}

// ====================================================================== the endpoint

//! [constructor]
// step04's build_resources on a shared Device: the limits, the buffer, MR, CQ and QP, INIT.
RDMAEndpoint::RDMAEndpoint(const Device& device, const EndpointConfig& config)
    : device_(&device), config_(config), local_port_(device.local_port()), events_(kAckBatch) {
    if (config.buffer_size == 0 || config.tx_depth == 0 || config.rx_depth == 0) {
        throw TutorialError(kExitUsage, "buffer size, tx depth and rx depth must be at least 1");
    }
    check_device_limits();
    mtu_ = config.mtu != 0 ? config.mtu : device.port_attr().active_mtu;
    max_msg_sz_ = device.port_attr().max_msg_sz;
    //! [read-depth]
    // READs in flight: as the requester (max_qp_init_rd_atom) and as the responder
    // (max_qp_rd_atom).
    read_depth_ = static_cast<std::uint8_t>(std::clamp(
        std::min(device.attr().max_qp_init_rd_atom, device.attr().max_qp_rd_atom), 1, 16));
    //! [read-depth]
    // Receives and READs write into the buffer, and REMOTE_WRITE requires LOCAL_WRITE.
    config_.access |= IBV_ACCESS_LOCAL_WRITE;
    create_queues();
    psn_ = random_psn();
}
//! [constructor]

// Member by member, as the defaulted one would, except that the source forgets its peer and its
// CQ's events: a moved-from std::optional stays engaged, so the source would still pass
// require_connected() and post through the MR and QP it no longer has.
RDMAEndpoint::RDMAEndpoint(RDMAEndpoint&& other) noexcept
    : device_(other.device_),
      config_(other.config_),
      mtu_(other.mtu_),
      psn_(other.psn_),
      max_inline_data_(other.max_inline_data_),
      max_msg_sz_(other.max_msg_sz_),
      read_depth_(other.read_depth_),
      local_port_(other.local_port_),
      remote_(std::exchange(other.remote_, std::nullopt)),
      events_(std::exchange(other.events_, CqEventTracker(kAckBatch))),
      buffer_(std::move(other.buffer_)),
      mr_(std::move(other.mr_)),
      channel_(std::move(other.channel_)),
      cq_(std::move(other.cq_)),
      qp_(std::move(other.qp_)) {}

// The config's depths, buffer and MTU against the device: exit code 2, naming the limit.
void RDMAEndpoint::check_device_limits() const {
    const ibv_device_attr& attr = device_->attr();
    const std::string& name = device_->name();
    const auto max_wr = static_cast<std::uint64_t>(attr.max_qp_wr);
    if (config_.tx_depth > max_wr) {
        over_limit("tx depth", config_.tx_depth, name, "max_qp_wr", max_wr);
    }
    if (config_.rx_depth > max_wr) {
        over_limit("rx depth", config_.rx_depth, name, "max_qp_wr", max_wr);
    }
    const std::uint64_t cq_size = std::uint64_t{config_.tx_depth} + config_.rx_depth;
    if (cq_size > static_cast<std::uint64_t>(attr.max_cqe)) {
        over_limit("tx depth + rx depth", cq_size, name, "max_cqe",
                   static_cast<std::uint64_t>(attr.max_cqe));
    }
    if (config_.buffer_size > attr.max_mr_size) {
        over_limit("buffer size", config_.buffer_size, name, "max_mr_size", attr.max_mr_size);
    }
    const ibv_mtu max_mtu = device_->port_attr().max_mtu;
    if (config_.mtu != 0 && config_.mtu > max_mtu) {
        over_limit("MTU", static_cast<std::uint64_t>(mtu_bytes(config_.mtu)),
                   name + " port " + std::to_string(device_->port()), "max_mtu",
                   static_cast<std::uint64_t>(mtu_bytes(max_mtu)));
    }
}

//! [build]
// A buffer that one-sided peers may reach: page-aligned buffer, MR (with the config's access),
// one CQ for both queues, the RC QP, then INIT.
void RDMAEndpoint::create_queues() {
    buffer_ = allocate_buffer(config_.buffer_size);
    mr_.reset(ibv_reg_mr(device_->pd(), buffer_.get(), config_.buffer_size, config_.access));
    if (!mr_) { throw_reg_mr_error(errno, config_.buffer_size); }
    if (config_.completion_channel) create_channel();
    // After a failure the QP flushes every posted request into the CQ: it must hold them all.
    const int cq_entries = static_cast<int>(config_.tx_depth + config_.rx_depth);
    cq_.reset(ibv_create_cq(device_->context(), cq_entries, nullptr, channel_.get(), 0));
    if (!cq_) { throw std::system_error(errno, std::generic_category(), "ibv_create_cq"); }
    qp_ = create_rc_qp(device_->pd(), cq_.get(), config_.tx_depth, config_.rx_depth);
    // RESET -> INIT: the QP's remote access is the MR's, so that one-sided peers get in.
    ibv_qp_attr attr = init_attributes(device_->port(), local_port_.pkey_index);
    attr.qp_access_flags = config_.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                             IBV_ACCESS_REMOTE_ATOMIC);
    modify_qp(qp_.get(), attr, IBV_QPS_RESET, IBV_QPS_INIT);
    max_inline_data_ = query_queue_pair(qp_.get()).max_inline_data;
}
//! [build]

//! [channel]
void RDMAEndpoint::create_channel() {
    channel_.reset(ibv_create_comp_channel(device_->context()));
    if (!channel_) {
        throw std::system_error(errno, std::generic_category(), "ibv_create_comp_channel");
    }
    // Non-blocking: with no event queued, ibv_get_cq_event fails with EAGAIN instead of blocking.
    const int flags = ::fcntl(channel_->fd, F_GETFL);
    if (flags < 0 || ::fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        throw std::system_error(errno, std::generic_category(), "fcntl O_NONBLOCK");
    }
}
//! [channel]

RDMAEndpoint::~RDMAEndpoint() {
    // ibv_destroy_cq waits until every event taken with ibv_get_cq_event is acked.
    if (cq_ && events_.acks_outstanding() > 0) { ack_all_before_destroy(*this, events_); }
}

PeerInfo RDMAEndpoint::local_info() const {
    PeerInfo info;
    info.lid = local_port_.attr.lid;
    info.qpn = qp_->qp_num;
    info.psn = psn_;
    info.gid = local_port_.gid;
    info.mtu = mtu_;
    info.addr = reinterpret_cast<std::uintptr_t>(buffer_.get());
    info.rkey =
        (config_.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)) ? mr_->rkey : 0;
    info.length = config_.buffer_size;
    info.read_depth = read_depth_;
    return info;
}

void RDMAEndpoint::use_local_address(
    const std::optional<std::array<std::uint8_t, 16>>& local_address) {
    if (remote_ || !qp_)
        throw std::logic_error("use_local_address: the endpoint is connected, or moved from");
    local_port_ = device_->local_port_for(local_address);
}

//! [connect]
// step03's connect_qp: RTR towards the peer, then RTS. Both sides take the smaller path MTU and
// RDMA READ depth, so that they agree without another round trip.
void RDMAEndpoint::connect(const PeerInfo& remote) {
    if (remote_ || !qp_)
        throw std::logic_error("connect: the endpoint is connected, or moved from");
    const ibv_mtu path_mtu = std::min(mtu_, remote.mtu);
    connect_qp(qp_.get(), local_port_, device_->port(), path_mtu, psn_, remote,
               std::min(read_depth_, remote.read_depth));
    mtu_ = path_mtu;
    remote_ = remote;
}
//! [connect]

// ====================================================================== posting

void RDMAEndpoint::throw_not_connected(const char* what) {
    throw std::logic_error(std::string(what) +
                           ": the endpoint is not connected yet (call connect_to_peer or "
                           "accept_peer first)");
}

void RDMAEndpoint::throw_outside_buffer(std::size_t offset, std::size_t length,
                                        const char* what) const {
    throw std::out_of_range(std::string(what) + ": local range [" + std::to_string(offset) + ", +" +
                            std::to_string(length) + ") is outside the " +
                            std::to_string(config_.buffer_size) + "-byte buffer");
}

void RDMAEndpoint::throw_message_too_long(std::size_t length, const char* what) const {
    throw std::invalid_argument(std::string(what) + ": a " + std::to_string(length) +
                                "-byte message exceeds the port's max_msg_sz of " +
                                std::to_string(max_msg_sz_) + " bytes");
}

void RDMAEndpoint::throw_post_send_failed(int rc) {
    throw std::system_error(rc, std::generic_category(), "ibv_post_send");
}

void RDMAEndpoint::throw_poll_failed() {
    throw std::system_error(EIO, std::generic_category(), "ibv_poll_cq");
}

void RDMAEndpoint::post_recv(std::uint64_t wr_id, std::size_t offset, std::size_t length,
                             std::size_t count) {
    check_local_range(offset, length, "post_recv");
    constexpr std::size_t kChain = 32;
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(buffer_.get() + offset),
                static_cast<std::uint32_t>(length), mr_->lkey};
    std::array<ibv_recv_wr, kChain> wrs{};
    while (count > 0) {
        const std::size_t n = std::min(count, kChain);
        for (std::size_t i = 0; i < n; ++i) {
            wrs[i] = {};
            wrs[i].wr_id = wr_id;
            wrs[i].sg_list = &sge;  // the device reads the list while posting; one is enough
            wrs[i].num_sge = 1;
            wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
        }
        ibv_recv_wr* bad = nullptr;
        if (int rc = ibv_post_recv(qp_.get(), wrs.data(), &bad); rc != 0) {
            throw std::system_error(rc, std::generic_category(), "ibv_post_recv");
        }
        count -= n;
    }
}

}  // namespace tutorial
