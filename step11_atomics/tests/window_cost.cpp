// Step 11: what a window costs against a registration, on the first device: ibv_reg_mr and
// ibv_dereg_mr of 4 KiB and of 1 MiB, against a bind and a LOCAL_INV of a type-2 window over the
// same bytes, each waited for. Usage: window_cost [ROUNDS] (default 1000). bench/window-cost runs
// it in the lab; not a test: it measures.
#include "../memory_window.hpp"

#include <infiniband/verbs.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

using namespace tutorial;

namespace {

int failures = 0;
[[maybe_unused]] void check(bool ok, const char* what) {
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
[[maybe_unused]] ibv_qp_state state_of(ibv_qp* qp) {
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

#include <chrono>
int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 1000;
    int count = 0;
    ibv_device** list = ibv_get_device_list(&count);
    if (!list || count == 0) die("ibv_get_device_list");
    ctx = ibv_open_device(list[0]);
    if (!ctx) die("ibv_open_device");
    pd = ibv_alloc_pd(ctx);
    if (!pd) die("ibv_alloc_pd");
    using C = std::chrono::steady_clock;
    for (std::size_t bytes : {std::size_t{4096}, std::size_t{1} << 20}) {
        void* memory = nullptr;
        if (posix_memalign(&memory, 4096, bytes) != 0) die("posix_memalign");
        std::memset(memory, 1, bytes);
        auto start = C::now();
        for (int i = 0; i < rounds; ++i) {
            ibv_mr* mr =
                ibv_reg_mr(pd, memory, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
            if (!mr) die("ibv_reg_mr");
            if (ibv_dereg_mr(mr) != 0) die("ibv_dereg_mr");
        }
        const double reg =
            std::chrono::duration<double, std::micro>(C::now() - start).count() / rounds;
        ibv_mr* mr = ibv_reg_mr(pd, memory, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
        if (!mr) die("ibv_reg_mr");
        Pair p = pair();
        Window w = allocate_window(pd);
        start = C::now();
        for (int i = 0; i < rounds; ++i) {
            const std::uint32_t rkey =
                post_bind(p.server.qp, w, mr, reinterpret_cast<std::uintptr_t>(memory), bytes,
                          IBV_ACCESS_REMOTE_WRITE, 1);
            if (await_wc(p.server.cq).status != IBV_WC_SUCCESS) die("bind");
            bound(w, rkey);
            post_local_invalidate(p.server.qp, rkey, 2);
            if (await_wc(p.server.cq).status != IBV_WC_SUCCESS) die("local inv");
        }
        const double bind =
            std::chrono::duration<double, std::micro>(C::now() - start).count() / rounds;
        std::printf(
            "%zu bytes: ibv_reg_mr + ibv_dereg_mr %.1f usec; bind + LOCAL_INV (each waited for) "
            "%.1f usec\n",
            bytes, reg, bind);
    }
    return 0;
}
