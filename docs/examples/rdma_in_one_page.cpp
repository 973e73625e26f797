// RDMA on one page: two RC QPs of one process, connected to each other, do a SEND and a WRITE.
// Exit codes: 0 when both transfers completed, 1 on any error (one line on stderr).
#include <infiniband/verbs.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>

namespace {

// step02's owner shape: a std::unique_ptr whose deleter calls the destroy verb and reports a
// failure on stderr, never throwing.
void report(int rc, const char* verb) noexcept {
    const int err = rc > 0 ? rc : errno;  // ibv_close_device returns -1 and sets errno
    if (rc != 0) { std::fprintf(stderr, "destroy failed: %s: %s\n", verb, std::strerror(err)); }
}
struct Deleter {
    void operator()(ibv_context* c) const noexcept {
        report(ibv_close_device(c), "ibv_close_device");
    }
    void operator()(ibv_pd* pd) const noexcept { report(ibv_dealloc_pd(pd), "ibv_dealloc_pd"); }
    void operator()(ibv_mr* mr) const noexcept { report(ibv_dereg_mr(mr), "ibv_dereg_mr"); }
    void operator()(ibv_cq* cq) const noexcept { report(ibv_destroy_cq(cq), "ibv_destroy_cq"); }
    void operator()(ibv_qp* qp) const noexcept { report(ibv_destroy_qp(qp), "ibv_destroy_qp"); }
};
template <typename T>
using Owner = std::unique_ptr<T, Deleter>;

// Most verbs return 0 or the error number; a create verb returns nullptr and sets errno.
void check(int rc, const char* verb) {
    if (rc != 0) { throw std::system_error(rc, std::generic_category(), verb); }
}
template <typename T>
Owner<T> created(T* object, const char* verb) {
    if (object == nullptr) { throw std::system_error(errno, std::generic_category(), verb); }
    return Owner<T>(object);
}

constexpr std::uint8_t kPort = 1;
enum WorkId : std::uint64_t { kSend, kRecv, kWrite };  // each work request's wr_id
constexpr std::array<const char*, 3> kWorkNames = {"SEND", "RECV", "RDMA WRITE"};

// The memory both QPs use, registered once: they share one PD, so one MR serves both here.
using Bytes = std::array<char, 64>;
struct Buffers {
    Bytes message{"Hello from QP A"};    // A sends this...
    Bytes received{};                    // ...into B's receive buffer
    Bytes write_source{"Written by A"};  // A writes this...
    Bytes write_target{};                // ...here, by address and rkey, with no receive
};

Owner<ibv_context> open_first_device() {
    int count = 0;
    const std::unique_ptr<ibv_device*[], decltype(&ibv_free_device_list)> list(
        ibv_get_device_list(&count), ibv_free_device_list);
    if (!list && errno != ENOSYS) {  // ENOSYS: no RDMA support in the kernel, so no device
        throw std::system_error(errno, std::generic_category(), "ibv_get_device_list");
    }
    if (!list || count == 0) {
        throw std::runtime_error(
            "no RDMA device: load your NIC's driver, or add Soft-RoCE "
            "(modprobe rdma_rxe; rdma link add rxe0 type rxe netdev eth0)");
    }
    auto context = created(ibv_open_device(list[0]), "ibv_open_device");
    std::printf("device: %s, port %d\n", ibv_get_device_name(list[0]), kPort);
    return context;  // an opened device stays open after its list is freed
}

// The GID the address vector names: on Ethernet a RoCE v2 entry, IPv4-mapped if there is one
// (without one, step01 falls back to RoCE v1: this stops); on InfiniBand the port's own GID.
ibv_gid_entry choose_gid(ibv_context* context, const ibv_port_attr& port) {
    const bool ethernet = port.link_layer == IBV_LINK_LAYER_ETHERNET;
    constexpr std::uint8_t kIpv4Mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    std::optional<ibv_gid_entry> chosen;
    for (int index = 0; index < port.gid_tbl_len; ++index) {
        ibv_gid_entry entry{};
        if (ibv_query_gid_ex(context, kPort, index, &entry, 0) != 0) { continue; }  // empty entry
        if (!ethernet) { return entry; }
        if (entry.gid_type != IBV_GID_TYPE_ROCE_V2) { continue; }
        if (std::memcmp(entry.gid.raw, kIpv4Mapped, sizeof kIpv4Mapped) == 0) { return entry; }
        if (!chosen) { chosen = entry; }
    }
    if (!chosen) { throw std::runtime_error(ethernet ? "port 1 has no RoCE v2 GID" : "no GID"); }
    return *chosen;
}

Owner<ibv_qp> create_qp(ibv_pd* pd, ibv_cq* cq) {
    ibv_qp_init_attr init{};
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 2;  // the SEND and the WRITE
    init.cap.max_recv_wr = 1;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    return created(ibv_create_qp(pd, &init), "ibv_create_qp");
}

// RESET -> INIT -> RTR -> RTS with the attributes ibv_modify_qp(3) requires for RC. The remote QP
// is on this same port, so its LID and GID are ours.
void connect(ibv_qp* qp, const ibv_port_attr& port, const ibv_gid_entry& gid,
             std::uint32_t remote_qp_num, std::uint32_t local_psn, std::uint32_t remote_psn) {
    ibv_qp_attr init{};
    init.qp_state = IBV_QPS_INIT;
    init.port_num = kPort;
    init.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;  // the peer may WRITE into our MRs
    check(ibv_modify_qp(qp, &init,
                        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
          "ibv_modify_qp to INIT");

    ibv_qp_attr rtr{};
    rtr.qp_state = IBV_QPS_RTR;
    rtr.path_mtu = port.active_mtu;
    rtr.dest_qp_num = remote_qp_num;
    rtr.rq_psn = remote_psn;
    rtr.max_dest_rd_atomic = 0;  // incoming READs and atomics: none here
    rtr.min_rnr_timer = 12;
    rtr.ah_attr.dlid = port.lid;  // InfiniBand routes by LID; RoCE by the GID below
    rtr.ah_attr.port_num = kPort;
    if (port.link_layer == IBV_LINK_LAYER_ETHERNET || (port.flags & IBV_QPF_GRH_REQUIRED) != 0) {
        rtr.ah_attr.is_global = 1;
        rtr.ah_attr.grh.dgid = gid.gid;
        rtr.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(gid.gid_index);
        rtr.ah_attr.grh.hop_limit = 1;
    }
    check(ibv_modify_qp(qp, &rtr,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                            IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
          "ibv_modify_qp to RTR");

    ibv_qp_attr rts{};
    rts.qp_state = IBV_QPS_RTS;
    rts.sq_psn = local_psn;
    rts.timeout = 14;  // 4.096 us * 2^14 = 67 ms before a retry
    rts.retry_cnt = 6;
    rts.rnr_retry = 6;
    rts.max_rd_atomic = 0;  // outgoing READs and atomics: none here
    check(ibv_modify_qp(qp, &rts,
                        IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                            IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC),
          "ibv_modify_qp to RTS");
}

// One scatter/gather element: these bytes, inside the MR whose lkey it names.
ibv_sge sge_of(const ibv_mr& mr, Bytes& bytes) {
    return {.addr = reinterpret_cast<std::uintptr_t>(bytes.data()),
            .length = static_cast<std::uint32_t>(bytes.size()),
            .lkey = mr.lkey};
}

void post_receive(ibv_qp* qp, ibv_sge sge) {
    ibv_recv_wr wr{.wr_id = kRecv, .next = nullptr, .sg_list = &sge, .num_sge = 1};
    ibv_recv_wr* bad = nullptr;
    check(ibv_post_recv(qp, &wr, &bad), "ibv_post_recv");
}

void post_send(ibv_qp* qp, ibv_sge sge, WorkId id, ibv_wr_opcode opcode,
               std::uint64_t remote_addr = 0, std::uint32_t rkey = 0) {
    ibv_send_wr wr{};
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = opcode;
    wr.send_flags = IBV_SEND_SIGNALED;  // a completion for this one
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    check(ibv_post_send(qp, &wr, &bad), "ibv_post_send");
}

// Busy-polls until `count` work requests have completed. On RC each SEND and WRITE completes,
// with success or with an error once its retries are spent, so this loop ends.
void wait_for_completions(ibv_cq* cq, int count) {
    for (ibv_wc wc{}; count > 0;) {
        const int polled = ibv_poll_cq(cq, 1, &wc);
        if (polled < 0) { throw std::runtime_error("ibv_poll_cq failed"); }
        if (polled == 0) { continue; }
        const std::string name = kWorkNames.at(wc.wr_id);
        if (wc.status != IBV_WC_SUCCESS) {
            throw std::runtime_error(name + " failed: " + ibv_wc_status_str(wc.status));
        }
        std::printf("completion: %s\n", name.c_str());
        --count;
    }
}

void run() {
    // Parent first: C++ destroys them in reverse, QP -> CQ -> MR -> PD -> context.
    const auto context = open_first_device();
    ibv_port_attr port{};
    check(ibv_query_port(context.get(), kPort, &port), "ibv_query_port");
    if (port.state != IBV_PORT_ACTIVE) { throw std::runtime_error("port 1 is not ACTIVE"); }
    const ibv_gid_entry gid = choose_gid(context.get(), port);
    const auto pd = created(ibv_alloc_pd(context.get()), "ibv_alloc_pd");
    Buffers memory;  // before its MR, so that it outlives it
    // A RECV writes into the memory, a WRITE too; REMOTE_WRITE needs LOCAL_WRITE (ibv_reg_mr(3)).
    const auto mr = created(ibv_reg_mr(pd.get(), &memory, sizeof memory,
                                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE),
                            "ibv_reg_mr");
    const auto cq = created(ibv_create_cq(context.get(), 4, nullptr, nullptr, 0), "ibv_create_cq");
    const auto a = create_qp(pd.get(), cq.get());
    const auto b = create_qp(pd.get(), cq.get());
    connect(a.get(), port, gid, b->qp_num, 0x1000, 0x2000);
    connect(b.get(), port, gid, a->qp_num, 0x2000, 0x1000);
    std::printf("QPs 0x%06x and 0x%06x connected, GID index %u\n", a->qp_num, b->qp_num,
                gid.gid_index);

    // Two-sided: B posts a receive before A sends, and both get a completion.
    post_receive(b.get(), sge_of(*mr, memory.received));
    post_send(a.get(), sge_of(*mr, memory.message), kSend, IBV_WR_SEND);
    wait_for_completions(cq.get(), 2);
    std::printf("B received: %s\n", memory.received.data());

    // One-sided: A names B's memory by address and rkey; B posts nothing and sees no completion.
    post_send(a.get(), sge_of(*mr, memory.write_source), kWrite, IBV_WR_RDMA_WRITE,
              reinterpret_cast<std::uintptr_t>(memory.write_target.data()), mr->rkey);
    wait_for_completions(cq.get(), 1);
    // A's completion says B's side acknowledged the WRITE. Verbs promise B's CPU nothing from a
    // WRITE alone: a real target learns of it from a message that follows (step05 uses a WRITE
    // with immediate data). Here both QPs share one device and one process, so we just look.
    std::printf("B's memory after the WRITE: %s\n", memory.write_target.data());
}

}  // namespace

int main() try {
    run();
    return 0;
} catch (const std::exception& error) {  // every error, caught once
    std::fprintf(stderr, "rdma_in_one_page: %s\n", error.what());
    return 1;
}
