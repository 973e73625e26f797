// Step 11 (work in progress): atomic_write.hpp on one device, each "client" an RC QP connected to
// a QP of the "server" on the same device, all reaching one MR. Usage: loopback [DEVICE] Prints
// each result; exits 1 when a check fails.
#include "../atomic_write.hpp"

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
Qp make_qp_ex() {
    Qp q;
    q.cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    if (!q.cq) die("ibv_create_cq");
    ibv_qp_init_attr_ex a{};
    a.send_cq = a.recv_cq = q.cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = 16;
    a.cap.max_recv_wr = 1;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.pd = pd;
    a.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_WRITE;
    q.qp = ibv_create_qp_ex(ctx, &a);
    if (!q.qp) die("ibv_create_qp_ex");
    ibv_qp_attr at{};
    at.qp_state = IBV_QPS_INIT;
    at.port_num = 1;
    at.qp_access_flags = IBV_ACCESS_REMOTE_ATOMIC;
    if (ibv_modify_qp(q.qp, &at,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0)
        die("INIT");
    return q;
}
}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    int count = 0;
    ibv_device** list = ibv_get_device_list(&count);
    if (!list || count == 0) die("ibv_get_device_list");
    ibv_device* device = list[0];
    for (int i = 0; argc > 2 && i < count; ++i)
        if (std::strcmp(ibv_get_device_name(list[i]), argv[2]) == 0) device = list[i];
    const bool expect = argc > 1 && std::strcmp(argv[1], "yes") == 0;  // what this kernel has
    ctx = ibv_open_device(device);
    if (!ctx) die("ibv_open_device");
    pd = ibv_alloc_pd(ctx);
    if (!pd) die("ibv_alloc_pd");
    const bool has = supports_atomic_write(ctx);
    std::printf("ATOMIC_WRITE capability: %s\n", has ? "yes" : "no");
    check(has == expect,
          expect ? "the device reports ATOMIC_WRITE" : "the device does not report ATOMIC_WRITE");
    if (!has) return failures == 0 ? 0 : 1;
    void* memory = nullptr;
    if (posix_memalign(&memory, 4096, 4096) != 0) die("posix_memalign");
    std::memset(memory, 0, 4096);
    ibv_mr* mr =
        ibv_reg_mr(pd, memory, 4096,
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_WRITE);
    if (!mr) die("ibv_reg_mr");
    Qp c = make_qp_ex(), s = make_qp();
    connect(c.qp, s.qp->qp_num);
    connect(s.qp, c.qp->qp_num);
    auto* word = static_cast<std::uint64_t*>(memory) + 1;
    post_atomic_write(ibv_qp_to_qp_ex(c.qp),
                      RemoteWord{reinterpret_cast<std::uintptr_t>(word), mr->rkey},
                      0x1122334455667788ULL, 1);
    const ibv_wc wc = await_wc(c.cq);
    std::printf("atomic write: %s; the word now 0x%llx\n", ibv_wc_status_str(wc.status),
                static_cast<unsigned long long>(*word));
    check(wc.status == IBV_WC_SUCCESS && *word == 0x1122334455667788ULL,
          "the 8 bytes land as given");
    return failures == 0 ? 0 : 1;
}
