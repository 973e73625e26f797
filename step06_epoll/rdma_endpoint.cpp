// Step 06: the RDMA endpoint's implementation, with the completion channel added to step05's class.
#include "rdma_endpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <system_error>

namespace tutorial {

const char* wc_status_name(ibv_wc_status status) {
    switch (status) {
        case IBV_WC_SUCCESS:
            return "IBV_WC_SUCCESS";
        case IBV_WC_LOC_LEN_ERR:
            return "IBV_WC_LOC_LEN_ERR";
        case IBV_WC_LOC_QP_OP_ERR:
            return "IBV_WC_LOC_QP_OP_ERR";
        case IBV_WC_LOC_EEC_OP_ERR:
            return "IBV_WC_LOC_EEC_OP_ERR";
        case IBV_WC_LOC_PROT_ERR:
            return "IBV_WC_LOC_PROT_ERR";
        case IBV_WC_WR_FLUSH_ERR:
            return "IBV_WC_WR_FLUSH_ERR";
        case IBV_WC_MW_BIND_ERR:
            return "IBV_WC_MW_BIND_ERR";
        case IBV_WC_BAD_RESP_ERR:
            return "IBV_WC_BAD_RESP_ERR";
        case IBV_WC_LOC_ACCESS_ERR:
            return "IBV_WC_LOC_ACCESS_ERR";
        case IBV_WC_REM_INV_REQ_ERR:
            return "IBV_WC_REM_INV_REQ_ERR";
        case IBV_WC_REM_ACCESS_ERR:
            return "IBV_WC_REM_ACCESS_ERR";
        case IBV_WC_REM_OP_ERR:
            return "IBV_WC_REM_OP_ERR";
        case IBV_WC_RETRY_EXC_ERR:
            return "IBV_WC_RETRY_EXC_ERR";
        case IBV_WC_RNR_RETRY_EXC_ERR:
            return "IBV_WC_RNR_RETRY_EXC_ERR";
        case IBV_WC_LOC_RDD_VIOL_ERR:
            return "IBV_WC_LOC_RDD_VIOL_ERR";
        case IBV_WC_REM_INV_RD_REQ_ERR:
            return "IBV_WC_REM_INV_RD_REQ_ERR";
        case IBV_WC_REM_ABORT_ERR:
            return "IBV_WC_REM_ABORT_ERR";
        case IBV_WC_INV_EECN_ERR:
            return "IBV_WC_INV_EECN_ERR";
        case IBV_WC_INV_EEC_STATE_ERR:
            return "IBV_WC_INV_EEC_STATE_ERR";
        case IBV_WC_FATAL_ERR:
            return "IBV_WC_FATAL_ERR";
        case IBV_WC_RESP_TIMEOUT_ERR:
            return "IBV_WC_RESP_TIMEOUT_ERR";
        case IBV_WC_GENERAL_ERR:
            return "IBV_WC_GENERAL_ERR";
        default:
            return "IBV_WC_(unknown)";
    }
}

const char* wc_status_hint(ibv_wc_status status) {
    switch (status) {
        case IBV_WC_RETRY_EXC_ERR:
            return "the peer's QP stopped answering: the peer was killed, or its QP is gone";
        case IBV_WC_RNR_RETRY_EXC_ERR:
            return "the peer had no receive posted for our send";
        case IBV_WC_LOC_LEN_ERR:
            return "a message was longer than the posted receive: do both sides use the same -s?";
        case IBV_WC_WR_FLUSH_ERR:
            return "the QP went to the error state after an earlier failure";
        default:
            return "";
    }
}

void FileDescriptor::reset(int fd) {
    if (fd_ >= 0) {
        ::close(fd_);
    }
    fd_ = fd;
}

std::optional<int> choose_gid_index(std::span<const GidEntry> table) {
    auto is_zero = [](const GidEntry& e) {
        return std::all_of(e.gid.begin(), e.gid.end(), [](std::uint8_t b) { return b == 0; });
    };
    auto is_ipv4_mapped = [](const GidEntry& e) {
        return std::all_of(e.gid.begin(), e.gid.begin() + 10,
                           [](std::uint8_t b) { return b == 0; }) &&
               e.gid[10] == 0xff && e.gid[11] == 0xff;
    };
    std::optional<int> best;
    int best_rank = 0;
    for (const GidEntry& e : table) {
        if (is_zero(e)) {
            continue;
        }
        int rank = 1;
        if (e.type == IBV_GID_TYPE_ROCE_V2) {
            rank = is_ipv4_mapped(e) ? 3 : 2;
        }
        if (rank > best_rank) {
            best_rank = rank;
            best = e.index;
        }
    }
    return best;
}

namespace {

std::string list_sysfs_devices() {
    std::string names;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/sys/class/infiniband", ec)) {
        names += (names.empty() ? "" : " ") + entry.path().filename().string();
    }
    return names;
}

Context open_device(const std::string& name, const char* program) {
    int count = 0;
    DeviceList list(ibv_get_device_list(&count));
    if (!list) {
        throw std::system_error(errno, std::generic_category(), "ibv_get_device_list");
    }
    const std::string prog = program;
    if (count == 0) {
        const std::string sysfs = list_sysfs_devices();
        if (!sysfs.empty()) {
            throw TutorialError(
                kExitNoProvider,
                "/sys/class/infiniband lists " + sysfs + " but libibverbs found no device",
                "install the userspace provider: sudo apt-get install ibverbs-providers");
        }
        throw TutorialError(
            kExitNoDevice, "no RDMA device found",
            "get one of: a real RDMA NIC; Soft-RoCE on this host (sudo modprobe rdma_rxe && sudo "
            "rdma "
            "link add rxe0 type rxe netdev eth0); or the lab (lab/softroce run -- ./" +
                prog + ")");
    }
    ibv_device* chosen = nullptr;
    std::string found;
    for (int i = 0; i < count; ++i) {
        const char* dev_name = ibv_get_device_name(list.get()[i]);
        found += (found.empty() ? "" : ", ") + std::string(dev_name);
        if (name.empty() || name == dev_name) {
            chosen = chosen ? chosen : list.get()[i];
        }
    }
    if (!chosen) {
        throw TutorialError(kExitNoSuchDevice,
                            "no RDMA device named '" + name + "' (found: " + found + ")");
    }
    Context context(ibv_open_device(chosen));
    if (!context) {
        throw std::system_error(errno, std::generic_category(), "ibv_open_device");
    }
    return context;
}

std::uint32_t random_psn() {
    std::random_device rd;
    return rd() & 0xffffff;
}

}  // namespace

RDMAEndpoint::RDMAEndpoint(const EndpointConfig& config)
    : buffer_size_(config.buffer_size), events_(config.ack_batch) {
    context_ = open_device(config.device, "step06_epoll");
    ibv_port_attr port_attr{};
    if (config.port < 1 || config.port > 255 ||
        ibv_query_port(context_.get(), static_cast<std::uint8_t>(config.port), &port_attr) != 0) {
        throw TutorialError(kExitNoSuchDevice, "port " + std::to_string(config.port) +
                                                   " does not exist on " +
                                                   ibv_get_device_name(context_->device));
    }
    port_ = static_cast<std::uint8_t>(config.port);
    link_layer_ = port_attr.link_layer;

    ibv_device_attr device_attr{};
    if (const int rc = ibv_query_device(context_.get(), &device_attr); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_query_device");
    }
    const std::uint32_t cq_depth =
        config.cq_depth != 0 ? config.cq_depth : config.rx_depth + config.tx_depth;
    auto check_limit = [](const char* what, std::uint32_t value, int limit, const char* name) {
        if (value > static_cast<std::uint32_t>(limit)) {
            throw TutorialError(kExitUsage, std::string(what) + " " + std::to_string(value) +
                                                " is over the device's " + name + " " +
                                                std::to_string(limit));
        }
    };
    check_limit("rx-depth", config.rx_depth, device_attr.max_qp_wr, "max_qp_wr");
    check_limit("tx-depth", config.tx_depth, device_attr.max_qp_wr, "max_qp_wr");
    check_limit("cq-depth", cq_depth, device_attr.max_cqe, "max_cqe");

    // GID: the -g index, or the best entry of the port's table.
    if (config.gid_index >= 0) {
        gid_index_ = config.gid_index;
    } else {
        std::vector<GidEntry> table;
        for (int i = 0; i < port_attr.gid_tbl_len; ++i) {
            ibv_gid_entry entry{};
            if (ibv_query_gid_ex(context_.get(), port_, static_cast<std::uint32_t>(i), &entry, 0) !=
                0) {
                continue;
            }
            GidEntry row;
            row.index = i;
            std::memcpy(row.gid.data(), entry.gid.raw, 16);
            row.type = static_cast<ibv_gid_type>(entry.gid_type);
            table.push_back(row);
        }
        const auto chosen = choose_gid_index(table);
        if (!chosen && link_layer_ == IBV_LINK_LAYER_ETHERNET) {
            throw TutorialError(kExitRdma, "no usable GID on port " + std::to_string(config.port),
                                "RoCE needs a GID: is the netdev up with an IP address?");
        }
        gid_index_ = chosen.value_or(0);
    }
    ibv_gid gid{};
    if (const int rc = ibv_query_gid(context_.get(), port_, gid_index_, &gid); rc != 0) {
        throw std::system_error(rc < 0 ? errno : rc, std::generic_category(), "ibv_query_gid");
    }

    //! [channel]
    if (config.completion_channel) {
        channel_.reset(ibv_create_comp_channel(context_.get()));
        if (!channel_) {
            throw std::system_error(errno, std::generic_category(), "ibv_create_comp_channel");
        }
        // Non-blocking, so ibv_get_cq_event can be called until EAGAIN from an event loop.
        const int flags = ::fcntl(channel_->fd, F_GETFL);
        if (flags < 0 || ::fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
            throw std::system_error(errno, std::generic_category(), "fcntl(O_NONBLOCK)");
        }
    }
    //! [channel]
    pd_.reset(ibv_alloc_pd(context_.get()));
    if (!pd_) {
        throw std::system_error(errno, std::generic_category(), "ibv_alloc_pd");
    }
    const long page = ::sysconf(_SC_PAGESIZE);
    const std::size_t rounded = (buffer_size_ + page - 1) / page * page;
    buffer_.reset(static_cast<std::byte*>(std::aligned_alloc(page, rounded)));
    if (!buffer_) {
        throw std::system_error(ENOMEM, std::generic_category(), "aligned_alloc");
    }
    std::memset(buffer_.get(), 0, rounded);
    mr_.reset(ibv_reg_mr(pd_.get(), buffer_.get(), buffer_size_, IBV_ACCESS_LOCAL_WRITE));
    if (!mr_) {
        throw std::system_error(
            errno, std::generic_category(),
            "ibv_reg_mr (registering " + std::to_string(buffer_size_) + " bytes)");
    }
    cq_.reset(
        ibv_create_cq(context_.get(), static_cast<int>(cq_depth), nullptr, channel_.get(), 0));
    if (!cq_) {
        throw std::system_error(errno, std::generic_category(), "ibv_create_cq");
    }
    ibv_qp_init_attr init{};
    init.send_cq = cq_.get();
    init.recv_cq = cq_.get();
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = config.tx_depth;
    init.cap.max_recv_wr = config.rx_depth;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.cap.max_inline_data = 64;
    qp_.reset(ibv_create_qp(pd_.get(), &init));
    if (!qp_) {
        init.cap.max_inline_data = 0;  // a device without inline data
        qp_.reset(ibv_create_qp(pd_.get(), &init));
    }
    if (!qp_) {
        throw std::system_error(errno, std::generic_category(), "ibv_create_qp");
    }
    max_inline_ = init.cap.max_inline_data;

    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = port_;
    attr.qp_access_flags = 0;
    if (const int rc = ibv_modify_qp(
            qp_.get(), &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_modify_qp(INIT)");
    }
    local_.lid = port_attr.lid;
    local_.qpn = qp_->qp_num;
    local_.psn = random_psn();
    std::memcpy(local_.gid.data(), gid.raw, 16);
}

RDMAEndpoint::~RDMAEndpoint() {
    // ibv_destroy_cq waits until every event taken from the channel is acked.
    if (cq_) {
        ack_all_before_destroy(*this, events_);
    }
}

void RDMAEndpoint::connect(const QpInfo& remote, ibv_mtu mtu) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = mtu;
    attr.dest_qp_num = remote.qpn;
    attr.rq_psn = remote.psn;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = 12;
    attr.ah_attr.dlid = remote.lid;
    attr.ah_attr.sl = 0;
    attr.ah_attr.src_path_bits = 0;
    attr.ah_attr.port_num = port_;
    // RoCE always needs the GRH; on InfiniBand the LID is enough.
    if (ethernet() || std::any_of(remote.gid.begin(), remote.gid.end(), [](auto b) { return b; })) {
        attr.ah_attr.is_global = 1;
        attr.ah_attr.grh.hop_limit = 1;
        std::memcpy(attr.ah_attr.grh.dgid.raw, remote.gid.data(), 16);
        attr.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(gid_index_);
    }
    if (const int rc =
            ibv_modify_qp(qp_.get(), &attr,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
        rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_modify_qp(RTR)");
    }
    attr = {};
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = 14;  // 4.096 us * 2^14 = 67 ms per try; 7 retries: a dead peer shows in ~0.5 s
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.sq_psn = local_.psn;
    attr.max_rd_atomic = 1;
    if (const int rc =
            ibv_modify_qp(qp_.get(), &attr,
                          IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                              IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
        rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_modify_qp(RTS)");
    }
}

void RDMAEndpoint::post_send(std::uint64_t wr_id, std::size_t offset, std::size_t length) {
    ibv_sge sge{};
    sge.addr = reinterpret_cast<std::uintptr_t>(buffer_.get() + offset);
    sge.length = static_cast<std::uint32_t>(length);
    sge.lkey = mr_->lkey;
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED | (length <= max_inline_ ? IBV_SEND_INLINE : 0);
    ibv_send_wr* bad = nullptr;
    if (const int rc = ibv_post_send(qp_.get(), &wr, &bad); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_post_send");
    }
}

void RDMAEndpoint::post_recv(std::uint64_t wr_id, std::size_t offset, std::size_t length,
                             std::uint32_t count) {
    if (count == 0) {
        return;
    }
    ibv_sge sge{};
    sge.addr = reinterpret_cast<std::uintptr_t>(buffer_.get() + offset);
    sge.length = static_cast<std::uint32_t>(length);
    sge.lkey = mr_->lkey;
    std::vector<ibv_recv_wr> wrs(count);
    for (std::uint32_t i = 0; i < count; ++i) {
        wrs[i].wr_id = wr_id;
        wrs[i].sg_list = &sge;
        wrs[i].num_sge = 1;
        wrs[i].next = i + 1 < count ? &wrs[i + 1] : nullptr;
    }
    ibv_recv_wr* bad = nullptr;
    if (const int rc = ibv_post_recv(qp_.get(), wrs.data(), &bad); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_post_recv");
    }
}

int RDMAEndpoint::try_poll(std::span<ibv_wc> out) {
    const int n = ibv_poll_cq(cq_.get(), static_cast<int>(out.size()), out.data());
    if (n < 0) {
        throw std::system_error(EIO, std::generic_category(), "ibv_poll_cq");
    }
    return n;
}

//! [verbs_source]
void RDMAEndpoint::request_notify() {
    if (const int rc = ibv_req_notify_cq(cq_.get(), 0); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_req_notify_cq");
    }
}

bool RDMAEndpoint::get_event() {
    ibv_cq* cq = nullptr;
    void* cq_context = nullptr;
    if (ibv_get_cq_event(channel_.get(), &cq, &cq_context) != 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            return false;
        }
        throw std::system_error(errno, std::generic_category(), "ibv_get_cq_event");
    }
    if (cq != cq_.get()) {  // one CQ per channel here; anything else is a bug
        ibv_ack_cq_events(cq, 1);
        throw std::logic_error("ibv_get_cq_event returned a CQ this endpoint does not own");
    }
    return true;
}

void RDMAEndpoint::ack(std::uint32_t count) {
    ibv_ack_cq_events(cq_.get(), count);
}
//! [verbs_source]

}  // namespace tutorial
