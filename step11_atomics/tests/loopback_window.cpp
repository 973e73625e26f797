// Step 11: the window rules the chapter states, on one device: each "client" an RC QP connected
// to a QP of the "server" on the same device, all reaching one MR. Usage: loopback_window DEVICE.
// Prints each result; exits 1 when a check fails.
#include "../memory_window.hpp"

#include <infiniband/verbs.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace tutorial;

namespace {

/// The holder gives the window back itself: a SEND that also asks the receiver's device to
/// invalidate \p rkey before it completes the receive (the receive's wc.invalidated_rkey).
inline void post_send_with_invalidate(ibv_qp* qp, const void* from, std::uint32_t length,
                                      std::uint32_t lkey, std::uint32_t rkey, std::uint64_t wr_id) {
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(from), length, lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = length > 0 ? 1 : 0;
    wr.opcode = IBV_WR_SEND_WITH_INV;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.invalidate_rkey = rkey;
    tutorial::detail::post(qp, wr);
}

int failures = 0;
void check(bool ok, const char* what) {
    std::printf("%s: %s\n", ok ? "ok" : "FAILED", what);
    if (!ok) { ++failures; }
}
[[noreturn]] void die(const char* what) {
    std::perror(what);
    std::exit(2);
}

ibv_context* ctx = nullptr;
ibv_pd* pd = nullptr;
constexpr int kGid = 1;

struct Qp {
    ibv_cq* cq = nullptr;
    ibv_qp* qp = nullptr;
};

std::vector<Qp> created;  // every QP and CQ, destroyed at the end (clean under LeakSanitizer)

Qp make_qp() {
    Qp q;
    q.cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    if (!q.cq) die("ibv_create_cq");
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = q.cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = 16;
    a.cap.max_recv_wr = 1;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    q.qp = ibv_create_qp(pd, &a);
    if (!q.qp) die("ibv_create_qp");
    ibv_qp_attr at{};
    at.qp_state = IBV_QPS_INIT;
    at.port_num = 1;
    at.qp_access_flags =
        IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
    if (ibv_modify_qp(q.qp, &at,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0)
        die("INIT");
    created.push_back(q);
    return q;
}

void connect(ibv_qp* qp, std::uint32_t dest) {
    ibv_gid gid;
    if (ibv_query_gid(ctx, 1, kGid, &gid) != 0) die("ibv_query_gid");
    ibv_qp_attr at{};
    at.qp_state = IBV_QPS_RTR;
    at.path_mtu = IBV_MTU_1024;
    at.dest_qp_num = dest;
    at.max_dest_rd_atomic = 16;
    at.min_rnr_timer = 12;
    at.ah_attr.is_global = 1;
    at.ah_attr.grh.dgid = gid;
    at.ah_attr.grh.sgid_index = kGid;
    at.ah_attr.grh.hop_limit = 64;
    at.ah_attr.port_num = 1;
    if (ibv_modify_qp(qp, &at,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
        die("RTR");
    ibv_qp_attr r{};
    r.qp_state = IBV_QPS_RTS;
    r.timeout = 14;
    r.retry_cnt = 7;
    r.rnr_retry = 7;
    r.max_rd_atomic = 16;
    if (ibv_modify_qp(qp, &r,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0)
        die("RTS");
}

ibv_wc await_wc(ibv_cq* cq) {
    ibv_wc wc{};
    int n;
    for (long spins = 0; (n = ibv_poll_cq(cq, 1, &wc)) == 0; ++spins) {
        if (spins == 200000000L) {
            std::printf("no completion\n");
            std::exit(3);
        }
    }
    if (n < 0) die("ibv_poll_cq");
    return wc;
}
ibv_qp_state state_of(ibv_qp* qp) {
    ibv_qp_attr a{};
    ibv_qp_init_attr i{};
    if (ibv_query_qp(qp, &a, IBV_QP_STATE, &i) != 0) die("ibv_query_qp");
    return a.qp_state;
}
struct Pair {
    Qp client, server;
};
Pair pair() {
    Pair p{make_qp(), make_qp()};
    connect(p.client.qp, p.server.qp->qp_num);
    connect(p.server.qp, p.client.qp->qp_num);
    return p;
}

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    int count = 0;
    ibv_device** list = ibv_get_device_list(&count);
    if (!list || count == 0) die("ibv_get_device_list");
    ibv_device* device = list[0];
    for (int i = 0; argc > 1 && i < count; ++i)
        if (std::strcmp(ibv_get_device_name(list[i]), argv[1]) == 0) device = list[i];
    ctx = ibv_open_device(device);
    if (!ctx) die("ibv_open_device");
    pd = ibv_alloc_pd(ctx);
    if (!pd) die("ibv_alloc_pd");
    // The server's MR: page 0 its own, pages 1.. one slice per client. No remote access of its
    // own: only windows grant it.
    constexpr std::size_t kPage = 4096, kBytes = 4 * kPage;
    void* memory = nullptr;
    if (posix_memalign(&memory, kPage, kBytes) != 0) die("posix_memalign");
    std::memset(memory, 0, kBytes);
    auto* base = static_cast<unsigned char*>(memory);
    ibv_mr* mr = ibv_reg_mr(pd, memory, kBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
    if (!mr) die("ibv_reg_mr");
    std::printf("MR rkey 0x%x (access LOCAL_WRITE | MW_BIND: no remote access of its own)\n",
                mr->rkey);
    // The client's own memory (a separate MR, as another host's would be).
    void* client_memory = nullptr;
    if (posix_memalign(&client_memory, kPage, kPage) != 0) die("posix_memalign");
    auto* mine = static_cast<char*>(client_memory);
    ibv_mr* client_mr = ibv_reg_mr(pd, client_memory, kPage, IBV_ACCESS_LOCAL_WRITE);
    if (!client_mr) die("ibv_reg_mr");
    std::snprintf(mine, 64, "written through the window");

    Pair p = pair();
    Window mw = allocate_window(pd);
    const std::uint64_t slice = reinterpret_cast<std::uintptr_t>(base + kPage);
    const std::uint32_t rkey =
        post_bind(p.server.qp, mw, mr, slice, kPage, IBV_ACCESS_REMOTE_WRITE, 1);
    ibv_wc wc = await_wc(p.server.cq);
    check(wc.status == IBV_WC_SUCCESS, "the bind completes");
    std::printf("window rkey 0x%x; ibv_mw::rkey still 0x%x\n", rkey, mw.mw->rkey);
    check(mw.mw->rkey != rkey, "ibv_mw::rkey is not the bound rkey (a bind WR does not update it)");
    bound(mw, rkey);

    post_write(p.client.qp, mine, 64, client_mr->lkey, RemoteWord{slice, rkey}, 2);
    wc = await_wc(p.client.cq);
    check(wc.status == IBV_WC_SUCCESS &&
              std::strcmp(reinterpret_cast<char*>(base + kPage), mine) == 0,
          "a WRITE inside the window lands");

    post_write(p.client.qp, mine, 64, client_mr->lkey, RemoteWord{slice + kPage, rkey}, 3);
    wc = await_wc(p.client.cq);
    std::printf("a WRITE outside the window, inside the MR: %s\n", ibv_wc_status_str(wc.status));
    check(wc.status == IBV_WC_SUCCESS,
          "On Soft-RoCE: a WRITE outside the window but inside the MR succeeds (the spec: "
          "REM_ACCESS_ERR)");

    errno = 0;
    const int dereg = ibv_dereg_mr(mr);
    std::printf("ibv_dereg_mr while a window is bound: %d (%s)\n", dereg,
                std::strerror(dereg != 0 ? errno : 0));
    check(dereg != 0, "ibv_dereg_mr fails while a window is bound");

    // The client gives the window back: SEND_WITH_INV into a posted receive of the server.
    ibv_sge rs{reinterpret_cast<std::uintptr_t>(base + 64), 64, mr->lkey};
    ibv_recv_wr rw{};
    rw.wr_id = 9;
    rw.sg_list = &rs;
    rw.num_sge = 1;
    ibv_recv_wr* rbad = nullptr;
    if (ibv_post_recv(p.server.qp, &rw, &rbad) != 0) die("ibv_post_recv");
    post_send_with_invalidate(p.client.qp, mine, 8, client_mr->lkey, rkey, 4);
    wc = await_wc(p.client.cq);
    check(wc.status == IBV_WC_SUCCESS, "the SEND with invalidate completes");
    wc = await_wc(p.server.cq);
    std::printf("server's receive: %s, wc_flags 0x%x, invalidated_rkey 0x%x\n",
                ibv_wc_status_str(wc.status), wc.wc_flags, wc.invalidated_rkey);
    check(wc.status == IBV_WC_SUCCESS && wc.invalidated_rkey == rkey,
          "the receive names the invalidated rkey");

    post_write(p.client.qp, mine, 64, client_mr->lkey, RemoteWord{slice, rkey}, 5);
    wc = await_wc(p.client.cq);
    std::printf("a WRITE after the invalidation: %s; client QP %s, server QP %s\n",
                ibv_wc_status_str(wc.status),
                state_of(p.client.qp) == IBV_QPS_ERR ? "ERR" : "not ERR",
                state_of(p.server.qp) == IBV_QPS_ERR ? "ERR" : "not ERR");
    check(wc.status == IBV_WC_REM_ACCESS_ERR,
          "a WRITE after the invalidation fails: IBV_WC_REM_ACCESS_ERR");
    check(state_of(p.client.qp) == IBV_QPS_ERR && state_of(p.server.qp) == IBV_QPS_ERR,
          "both QPs are in ERR");

    // Connect again: a new pair, the same window bound again (it is free after the invalidation).
    Pair q = pair();
    const std::uint32_t rkey2 =
        post_bind(q.server.qp, mw, mr, slice, kPage, IBV_ACCESS_REMOTE_WRITE, 6);
    wc = await_wc(q.server.cq);
    std::printf("bind again on a new QP, rkey 0x%x: %s\n", rkey2, ibv_wc_status_str(wc.status));
    check(wc.status == IBV_WC_SUCCESS && rkey2 != rkey,
          "the window binds again, with another rkey");
    if (wc.status != IBV_WC_SUCCESS) return 1;
    bound(mw, rkey2);
    std::snprintf(mine, 64, "again");
    post_write(q.client.qp, mine, 64, client_mr->lkey, RemoteWord{slice, rkey2}, 7);
    wc = await_wc(q.client.cq);
    check(wc.status == IBV_WC_SUCCESS &&
              std::strcmp(reinterpret_cast<char*>(base + kPage), "again") == 0,
          "the new connection writes through it");
    // Bound and valid, with ibv_mw::rkey current: a second bind must fail (the window is not free).
    const std::uint32_t rkey3 =
        post_bind(q.server.qp, mw, mr, slice, kPage, IBV_ACCESS_REMOTE_WRITE, 11);
    wc = await_wc(q.server.cq);
    std::printf("a bind of a valid window (rkey 0x%x): %s\n", rkey3, ibv_wc_status_str(wc.status));
    check(wc.status != IBV_WC_SUCCESS, "a valid type-2 window cannot be bound again");
    check(state_of(q.server.qp) == IBV_QPS_ERR, "the failed bind put its QP in ERR");
    Pair q2 = pair();
    post_write(q2.client.qp, mine, 64, client_mr->lkey, RemoteWord{slice, rkey}, 8);
    wc = await_wc(q2.client.cq);
    check(wc.status == IBV_WC_REM_ACCESS_ERR, "the old rkey stays refused");

    // A bind over the MR's end: post_bind() refuses it; posted as it is, the device fails it.
    Pair r = pair();
    Window over = allocate_window(pd);
    bool refused = false;
    try {
        (void)post_bind(r.server.qp, over, mr, slice + 2 * kPage, 2 * kPage,
                        IBV_ACCESS_REMOTE_WRITE, 10);
    } catch (const std::invalid_argument& e) {
        refused = true;
        std::printf("post_bind: %s\n", e.what());
    }
    check(refused, "post_bind refuses a window over the MR's end before posting");
    ibv_send_wr wr{};
    wr.wr_id = 10;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = over.mw.get();
    wr.bind_mw.rkey = ibv_inc_rkey(over.rkey);
    wr.bind_mw.bind_info = {mr, slice + 2 * kPage, 2 * kPage, IBV_ACCESS_REMOTE_WRITE};
    detail::post(r.server.qp, wr);
    wc = await_wc(r.server.cq);
    std::printf("a bind over the MR's end, posted: %s\n", ibv_wc_status_str(wc.status));
    check(wc.status != IBV_WC_SUCCESS, "a bind over the MR's end fails");
    check(state_of(r.server.qp) == IBV_QPS_ERR, "the failed bind put its QP in ERR");
    // Child objects first: the windows (a window holds its QP and MR), the QPs and their CQs,
    // then the MRs, the PD, the device.
    mw.mw.reset();
    over.mw.reset();
    for (auto it = created.rbegin(); it != created.rend(); ++it) {
        if (ibv_destroy_qp(it->qp) != 0 || ibv_destroy_cq(it->cq) != 0) die("destroy");
    }
    if (ibv_dereg_mr(client_mr) != 0 || ibv_dereg_mr(mr) != 0) die("ibv_dereg_mr");
    std::free(client_memory);
    std::free(memory);
    if (ibv_dealloc_pd(pd) != 0 || ibv_close_device(ctx) != 0) die("close");
    ibv_free_device_list(list);
    return failures == 0 ? 0 : 1;
}
