// Step 11 (work in progress): atomics.hpp on one device, each "client" an RC QP connected to a
// QP of the "server" on the same device, all reaching one MR. Usage: loopback [DEVICE]
// Prints each result; exits 1 when a check fails.
#include "../atomics.hpp"

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

// A client: its QP (connected to one of the server's) and its CQ.
Qp client() {
    Qp c = make_qp(), s = make_qp();
    connect(c.qp, s.qp->qp_num);
    connect(s.qp, c.qp->qp_num);
    return c;
}

void await_one(ibv_cq* cq) {
    ibv_wc wc{};
    int n;
    while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {}
    if (n < 0 || wc.status != IBV_WC_SUCCESS) {
        std::fprintf(stderr, "completion failed: %s\n", ibv_wc_status_str(wc.status));
        std::exit(1);
    }
}

}  // namespace

int main(int argc, char** argv) {
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
    ibv_device_attr attr{};
    if (ibv_query_device(ctx, &attr) != 0) die("ibv_query_device");
    std::printf("atomic_cap %d (0 NONE, 1 HCA, 2 GLOB)\n", attr.atomic_cap);

    // The target: counter 0, lock 8, version 16, a 256-byte record from 64. Then the clients'
    // local words, 64 bytes apart, and their record copies.
    constexpr std::size_t kBytes = 1 << 16;
    void* memory = nullptr;
    if (posix_memalign(&memory, 4096, kBytes) != 0) die("posix_memalign");
    std::memset(memory, 0, kBytes);
    auto* base = static_cast<unsigned char*>(memory);
    ibv_mr* mr = ibv_reg_mr(pd, memory, kBytes,
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
    if (!mr) die("ibv_reg_mr");
    const auto remote = [&](std::size_t offset) {
        return RemoteWord{reinterpret_cast<std::uintptr_t>(base + offset), mr->rkey};
    };
    const auto local = [&](std::size_t offset) {
        return LocalWord{reinterpret_cast<std::uint64_t*>(base + offset), mr->lkey};
    };
    auto* counter = reinterpret_cast<std::uint64_t*>(base);

    constexpr int kClients = 4;
    constexpr std::uint64_t kM = 500;
    std::vector<Qp> clients;
    for (int i = 0; i < kClients; ++i) clients.push_back(client());

    // 1. READ then WRITE, the clients in lockstep: every READ of a round before any WRITE.
    for (std::uint64_t m = 0; m < kM; ++m) {
        for (int i = 0; i < kClients; ++i) {
            post_read(clients[i].qp, local(4096 + 64 * i).value, 8, mr->lkey, remote(0), 1);
        }
        for (int i = 0; i < kClients; ++i) await_one(clients[i].cq);
        for (int i = 0; i < kClients; ++i) {
            std::uint64_t* mine = local(4096 + 64 * i).value;
            *mine += 1;
            post_write(clients[i].qp, mine, 8, mr->lkey, remote(0), 2);
        }
        for (int i = 0; i < kClients; ++i) await_one(clients[i].cq);
    }
    std::printf("read-write: counter %" PRIu64 ", expected %" PRIu64 ", lost %" PRIu64 "\n",
                *counter, kClients * kM, kClients * kM - *counter);
    check(*counter == kM, "read-write in lockstep ends at M: every round's updates but one lost");

    // 2. FETCH_AND_ADD, the same lockstep.
    *counter = 0;
    for (std::uint64_t m = 0; m < kM; ++m) {
        for (int i = 0; i < kClients; ++i)
            post_fetch_add(clients[i].qp, local(4096 + 64 * i), remote(0), 1, 3);
        for (int i = 0; i < kClients; ++i) await_one(clients[i].cq);
    }
    std::printf("fetch-add: counter %" PRIu64 ", expected %" PRIu64 "\n", *counter, kClients * kM);
    check(*counter == kClients * kM, "fetch-add ends at clients x M");

    // 3. An unaligned atomic is refused before the post.
    bool refused = false;
    try {
        post_fetch_add(clients[0].qp, local(4096), remote(4), 1, 9);
    } catch (const std::invalid_argument& e) {
        refused = true;
        std::printf("unaligned: %s\n", e.what());
    }
    check(refused, "an unaligned fetch-add is refused before posting");

    // 4. A seqlock: two writers and two readers on their own threads, 256-byte records each
    // filled with one byte; a reader must never accept a record of mixed bytes.
    SharedRecord shared{remote(8), remote(16), remote(64), 256};
    std::atomic<int> writers_left{2};
    std::atomic<std::uint64_t> busy{0}, torn{0}, reads{0}, mixed{0};
    std::vector<std::thread> threads;
    for (int w = 0; w < 2; ++w) {
        threads.emplace_back([&, w] {
            const Qp& q = clients[w];
            auto* record = base + 8192 + 512 * w;
            for (int k = 1; k <= 300; ++k) {
                std::memset(record, (w * 100 + k) % 251 + 1, 256);
                busy +=
                    seqlock_write(q.qp, shared, static_cast<std::uint64_t>(w + 1),
                                  local(4096 + 64 * w), record, mr->lkey, [&] { await_one(q.cq); });
            }
            --writers_left;
        });
    }
    for (int r = 2; r < 4; ++r) {
        threads.emplace_back([&, r] {
            const Qp& q = clients[r];
            auto* record = base + 8192 + 512 * r;
            while (writers_left > 0) {
                torn += seqlock_read(q.qp, shared, local(4096 + 64 * r), local(4096 + 64 * r + 8),
                                     record, mr->lkey, [&] { await_one(q.cq); });
                ++reads;
                for (int b = 1; b < 256; ++b)
                    if (record[b] != record[0]) {
                        ++mixed;
                        break;
                    }
            }
        });
    }
    for (auto& t : threads) t.join();
    std::printf("seqlock: %" PRIu64 " reads accepted, %" PRIu64 " torn and retried, %" PRIu64
                " lock attempts found it held; version %" PRIu64 "\n",
                reads.load(), torn.load(), busy.load(), *local(16).value);
    check(mixed == 0, "no reader accepted a mixed record");
    check(*local(16).value == 2 * 2 * 300, "the version ends at 2 per write");
    check(*local(8).value == 0, "the lock ends free");
    return failures == 0 ? 0 : 1;
}
