// Step 08: CmEndpoint: the step's buffer, MR, channel and CQ on an id, and the id's QP.
#include "cm_endpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <string>
#include <system_error>

namespace tutorial {

namespace {

bool tracing = false;

std::string vendor_err_text(std::uint32_t vendor_err) {
    char text[16];
    std::snprintf(text, sizeof text, "0x%x", vendor_err);
    return text;
}

// step04's allocate_buffer: zeroed, page-aligned, rounded up to whole pages.
Buffer allocate_buffer(std::size_t size) {
    const long page_size = sysconf(_SC_PAGESIZE);
    const std::size_t page = page_size > 0 ? static_cast<std::size_t>(page_size) : 4096;
    const std::size_t allocated = (size + page - 1) / page * page;
    Buffer buffer(static_cast<std::byte*>(std::aligned_alloc(page, allocated)));
    if (!buffer) { throw std::system_error(ENOMEM, std::generic_category(), "aligned_alloc"); }
    std::memset(buffer.get(), 0, allocated);
    return buffer;
}

}  // namespace

WorkCompletionError::WorkCompletionError(const ibv_wc& wc, bool receive)
    : TutorialError(kExitRdma,
                    std::string("work completion failed: ") + wc_status_name(wc.status) + " (" +
                        ibv_wc_status_str(wc.status) + ") for wr_id " + std::to_string(wc.wr_id) +
                        ", vendor_err " + vendor_err_text(wc.vendor_err),
                    wc_status_cause(wc.status, receive)) {}

void set_nonblocking(int fd) {
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        throw std::system_error(errno, std::generic_category(), "fcntl O_NONBLOCK");
    }
}

void enable_trace() noexcept { tracing = true; }

timespec trace_clock() noexcept {
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);
    return now;
}

void trace(const char* what, const rdma_cm_id* id, timespec since) {
    if (!tracing) return;
    static constexpr const char* kStates[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
    const char* state = "none";  // no QP on this id (yet, or any more)
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    if (id != nullptr && id->qp != nullptr &&
        ibv_query_qp(id->qp, &attr, IBV_QP_STATE, &init) == 0 && attr.qp_state <= IBV_QPS_ERR) {
        state = kStates[attr.qp_state];
    }
    std::fprintf(stderr, "trace %lld.%06ld %s; QP %s\n", static_cast<long long>(since.tv_sec),
                 since.tv_nsec / 1000, what, state);
}

//! [constructor]
// step06's create_queues, on the id: its context (id->verbs) and PD (id->pd) are librdmacm's.
// rdma_create_qp makes the QP and moves it to INIT; connect and accept take it to RTS.
CmEndpoint::CmEndpoint(CmId id, const CmEndpointConfig& config)
    : config_(config), id_(std::move(id)) {
    buffer_ = allocate_buffer(config_.buffer_size);
    ibv_port_attr port{};
    if (const int rc = ibv_query_port(id_->verbs, id_->port_num, &port); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_query_port");
    }
    max_msg_sz_ = port.max_msg_sz;
    // The sends, receives and the WRITE's source need local access only. A peer may WRITE the
    // remote window alone: its own MR, whose rkey opens those bytes and no others.
    mr_.reset(ibv_reg_mr(id_->pd, buffer_.get(), config_.buffer_size, IBV_ACCESS_LOCAL_WRITE));
    if (!mr_) { throw std::system_error(errno, std::generic_category(), "ibv_reg_mr"); }
    if (config_.remote_window > config_.buffer_size) {
        throw std::invalid_argument("CmEndpoint: the remote window is larger than the buffer");
    }
    if (config_.remote_window > 0) {
        window_mr_.reset(
            ibv_reg_mr(id_->pd, buffer_.get() + config_.buffer_size - config_.remote_window,
                       config_.remote_window, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
        if (!window_mr_) {
            throw std::system_error(errno, std::generic_category(), "ibv_reg_mr (remote window)");
        }
    }
    if (config_.completion_channel) {
        channel_.reset(ibv_create_comp_channel(id_->verbs));
        if (!channel_) {
            throw std::system_error(errno, std::generic_category(), "ibv_create_comp_channel");
        }
        set_nonblocking(channel_->fd);
    }
    const int cq_entries = static_cast<int>(config_.tx_depth + config_.rx_depth);
    cq_.reset(ibv_create_cq(id_->verbs, cq_entries, nullptr, channel_.get(), 0));
    if (!cq_) { throw std::system_error(errno, std::generic_category(), "ibv_create_cq"); }
    ibv_qp_init_attr attr{};
    attr.send_cq = cq_.get();
    attr.recv_cq = cq_.get();
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = config_.tx_depth;
    attr.cap.max_recv_wr = config_.rx_depth;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_sge = 1;
    attr.cap.max_inline_data = 64;
    int rc = rdma_create_qp(id_.get(), id_->pd, &attr);
    if (rc != 0 && errno == EINVAL) {  // less inline data than asked, or none: ask for none
        attr.cap.max_inline_data = 0;
        rc = rdma_create_qp(id_.get(), id_->pd, &attr);
    }
    if (rc != 0) throw std::system_error(errno, std::generic_category(), "rdma_create_qp");
    qp_.reset(id_.get());
    trace("rdma_create_qp", id_.get());
    max_inline_data_ = attr.cap.max_inline_data;  // what the device granted
}
//! [constructor]

CmEndpoint::~CmEndpoint() {
    // ibv_destroy_cq waits until every event taken with ibv_get_cq_event is acked.
    if (cq_ && events_.acks_outstanding() > 0) { ack_all_before_destroy(*this, events_); }
}

PrivateData CmEndpoint::window(PrivateData p) const {
    if (!window_mr_) return p;  // address, rkey and length 0: nothing here is remotely writable
    p.addr = reinterpret_cast<std::uintptr_t>(window_mr_->addr);
    p.rkey = window_mr_->rkey;
    p.length = static_cast<std::uint32_t>(window_mr_->length);
    return p;
}

//! [write]
void CmEndpoint::post_write(std::uint64_t wr_id, std::size_t offset, std::size_t length,
                            const PrivateData& remote) {
    check_length(length, "post_write");
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(buffer_.get() + offset),
                static_cast<std::uint32_t>(length), mr_->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote.addr;  // from the peer's private data
    wr.wr.rdma.rkey = remote.rkey;
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(id_->qp, &wr, &bad); rc != 0) throw_post_failed(rc, "ibv_post_send");
}
//! [write]

void CmEndpoint::throw_post_failed(int rc, const char* verb) {
    throw std::system_error(rc, std::generic_category(), verb);
}

void CmEndpoint::throw_message_too_long(std::size_t length, const char* what) const {
    throw std::invalid_argument(std::string(what) + ": a " + std::to_string(length) +
                                "-byte message exceeds the port's max_msg_sz of " +
                                std::to_string(max_msg_sz_) + " bytes");
}

void CmEndpoint::post_recv(std::uint64_t wr_id, std::size_t offset, std::size_t length,
                           std::size_t count) {
    check_length(length, "post_recv");
    constexpr std::size_t kChain = 32;
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(buffer_.get() + offset),
                static_cast<std::uint32_t>(length), mr_->lkey};
    std::array<ibv_recv_wr, kChain> wrs{};
    while (count > 0) {
        const std::size_t n = std::min(count, kChain);
        for (std::size_t i = 0; i < n; ++i) {
            wrs[i] = {};
            wrs[i].wr_id = wr_id;
            wrs[i].sg_list = &sge;
            wrs[i].num_sge = 1;
            wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
        }
        ibv_recv_wr* bad = nullptr;
        if (int rc = ibv_post_recv(id_->qp, wrs.data(), &bad); rc != 0) {
            throw std::system_error(rc, std::generic_category(), "ibv_post_recv");
        }
        count -= n;
    }
}

void CmEndpoint::request_notify() {
    if (const int rc = ibv_req_notify_cq(cq_.get(), 0); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_req_notify_cq");
    }
}

bool CmEndpoint::get_event() {
    ibv_cq* cq = nullptr;
    void* cq_context = nullptr;
    if (ibv_get_cq_event(channel_.get(), &cq, &cq_context) != 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) { return false; }
        throw std::system_error(errno, std::generic_category(), "ibv_get_cq_event");
    }
    return true;
}

}  // namespace tutorial
