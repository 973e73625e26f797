// Step 07: the client's window of RDMA WRITEs (or SENDs) and the target's side, one technique at
// a time: a window with credits, selective signaling, post lists, several QPs, inline.
#pragma once

#include "errors.hpp"
#include "rdma_endpoint.hpp"
#include "tcp.hpp"

#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace tutorial {

inline constexpr std::uint64_t kFinalWrId = std::numeric_limits<std::uint64_t>::max();
inline constexpr std::uint64_t kReceiveWrId = kFinalWrId - 1;
inline constexpr std::uint64_t kNoTarget = kFinalWrId;  // -D: no count agreed

// One run of the client, at one size: what the options ask for.
struct Plan {
    std::size_t size = 65536;
    std::uint64_t iters = 0;  // per QP; 0 with -D
    std::chrono::seconds duration{0};
    std::uint32_t depth = 1;         // -t: the window, per QP
    std::uint32_t signal_every = 1;  // -Q
    std::uint32_t post_list = 1;     // -l
    std::uint32_t inline_size = 0;   // -I
    bool send = false;               // --op send
    std::chrono::seconds timeout{10};
};

// perftest's tposted and tcompleted: when the i-th work request (over all QPs) was posted, and
// when the i-th completed, in nanoseconds; empty with -D, which counts only.
struct Timeline {
    std::vector<std::int64_t> posted, completed;
    std::uint64_t messages = 0;  // work requests posted and retired, over all QPs
    std::int64_t first_post = 0, last_completion = 0;
};

[[nodiscard]] inline std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
        .count();
}

// Every 1024 polls: Ctrl-C, and --timeout with no completion at all.
class Watchdog {
  public:
    explicit Watchdog(std::chrono::seconds timeout) : timeout_(timeout), last_(Clock::now()) {}
    void check(bool progressed, std::uint64_t done, const char* what) {
        progressed_ |= progressed;
        if (++spins_ % 1024 != 0) return;
        throw_if_stopped();  // tcp.hpp: SIGINT or SIGTERM
        const auto now = Clock::now();
        if (progressed_) {
            progressed_ = false;
            last_ = now;
        } else if (now - last_ >= timeout_) {
            throw TutorialError(kExitTimeout,
                                "no completion within " + std::to_string(timeout_.count()) +
                                    " s (after " + std::to_string(done) + " " + what + ")",
                                "is the peer still running? (a lost peer ends in "
                                "IBV_WC_RETRY_EXC_ERR only while something is being sent)");
        }
    }

  private:
    std::chrono::seconds timeout_;
    Clock::time_point last_;
    bool progressed_ = false;
    std::uint64_t spins_ = 0;
};

// One QP's send queue as the window loop sees it: its prebuilt requests and its credits.
struct SendQueue {
    RDMAEndpoint* endpoint = nullptr;
    std::vector<ibv_sge> sges;
    std::vector<ibv_send_wr> wrs;      // -l of them, chained through next
    std::uint64_t target = kNoTarget;  // work requests to post: -n, or (-D) set when time is up
    std::uint64_t posted = 0;          // work requests posted ...
    std::uint64_t completed = 0;       // ... and retired by a signaled completion
};

//! [prebuilt]
// Built once per QP and size, outside the timed loop: -l work requests chained through next,
// each with its own SGE over the registered buffer, addressed to the target's buffer.
[[nodiscard]] inline SendQueue prebuild_requests(RDMAEndpoint& endpoint, const Plan& plan) {
    SendQueue queue;
    queue.endpoint = &endpoint;
    queue.target = plan.iters > 0 ? plan.iters : kNoTarget;
    queue.sges.resize(plan.post_list);
    queue.wrs.resize(plan.post_list);
    for (std::size_t i = 0; i < plan.post_list; ++i) {
        queue.sges[i] = {reinterpret_cast<std::uintptr_t>(endpoint.buffer().data()),
                         static_cast<std::uint32_t>(plan.size), endpoint.mr()->lkey};
        ibv_send_wr& wr = queue.wrs[i];
        wr.sg_list = &queue.sges[i];
        wr.num_sge = 1;
        wr.opcode = plan.send ? IBV_WR_SEND : IBV_WR_RDMA_WRITE;
        wr.wr.rdma.remote_addr = endpoint.remote_info()->addr;  // from the handshake
        wr.wr.rdma.rkey = endpoint.remote_info()->rkey;
        wr.next = i + 1 < plan.post_list ? &queue.wrs[i + 1] : nullptr;
    }
    return queue;
}
//! [prebuilt]

//! [inline]
// -I: the CPU copies a payload of at most max_inline_data bytes into the work request itself,
// and the device does not read the buffer (which is free again as soon as the call returns).
[[nodiscard]] inline unsigned inline_flag(const Plan& plan) {
    return plan.size <= plan.inline_size ? IBV_SEND_INLINE : 0;
}
//! [inline]

//! [signaling]
// Selective signaling: work request number `number` (from 1, per QP) asks for a completion when
// it ends a group of -Q, or is the last. Its completion retires itself and the unsignaled ones
// before it, so the wr_id is the number: completed = wr_id.
[[nodiscard]] inline bool signaled(std::uint64_t number, const SendQueue& queue, const Plan& plan) {
    return number % plan.signal_every == 0 || number == queue.target;
}
//! [signaling]

//! [one-at-a-time]
// -t 1: post one signaled WRITE, wait for its completion, post the next. One round trip each.
inline void run_one_at_a_time(SendQueue& queue, const Plan& plan, Timeline& timeline) {
    ibv_send_wr& wr = queue.wrs[0];
    wr.send_flags = IBV_SEND_SIGNALED | inline_flag(plan);
    std::array<ibv_wc, 1> wc{};
    Watchdog watchdog(plan.timeout);
    timeline.first_post = now_ns();
    for (std::uint64_t number = 1; number <= queue.target; ++number) {
        wr.wr_id = number;
        timeline.posted[number - 1] = now_ns();
        ibv_send_wr* bad = nullptr;
        if (const int rc = ibv_post_send(queue.endpoint->qp(), &wr, &bad); rc != 0)
            throw std::system_error(rc, std::generic_category(), "ibv_post_send");
        while (queue.endpoint->try_poll(wc) == 0)
            watchdog.check(false, number - 1, "work requests");
        watchdog.check(true, number, "work requests");
        timeline.completed[number - 1] = now_ns();
    }
    queue.posted = queue.completed = timeline.messages = queue.target;
    timeline.last_completion = timeline.completed.back();
}
//! [one-at-a-time]

//! [post-list]
// -l: `count` work requests chained through next, posted by one ibv_post_send.
inline void post_list(SendQueue& queue, const Plan& plan, std::uint64_t count, Timeline& timeline) {
    for (std::uint64_t i = 0; i < count; ++i) {
        const std::uint64_t number = queue.posted + i + 1;
        queue.wrs[i].wr_id = number;
        queue.wrs[i].send_flags =
            (signaled(number, queue, plan) ? IBV_SEND_SIGNALED : 0) | inline_flag(plan);
    }
    queue.wrs[count - 1].next = nullptr;  // a shorter last list ends early
    if (!timeline.posted.empty()) {       // perftest's tposted: just before the post
        const std::int64_t now = now_ns();
        for (std::uint64_t i = 0; i < count; ++i) timeline.posted[timeline.messages + i] = now;
    }
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(queue.endpoint->qp(), queue.wrs.data(), &bad);
    if (count < plan.post_list) queue.wrs[count - 1].next = &queue.wrs[count];
    if (rc != 0) throw std::system_error(rc, std::generic_category(), "ibv_post_send");
    timeline.messages += count;
    queue.posted += count;
}
//! [post-list]

//! [credits]
// The window: post while the send queue has room. A credit is a send-queue slot; it comes back
// when a signaled completion retires the work requests up to it. ibv_post_send never sees a full
// queue, so it never fails with ENOMEM. A list shrinks to the credits left: the window fills up,
// so it always holds the next signaled work request (-Q <= -t), and a completion comes.
inline void post_while_credits(SendQueue& queue, const Plan& plan, Timeline& timeline) {
    for (;;) {
        const std::uint64_t credits = plan.depth - (queue.posted - queue.completed);
        const std::uint64_t count =
            std::min({std::uint64_t{plan.post_list}, queue.target - queue.posted, credits});
        if (count == 0) return;
        post_list(queue, plan, count, timeline);
    }
}
//! [credits]

//! [reap]
// Up to 16 completions per ibv_poll_cq; each returns the credits of the work requests it retires.
inline std::size_t reap_completions(SendQueue& queue, Timeline& timeline, std::uint64_t& retired) {
    std::array<ibv_wc, 16> wcs;
    const std::size_t n = queue.endpoint->try_poll(wcs);  // throws on a failed completion
    if (n == 0) return 0;
    const std::int64_t now = now_ns();
    for (const ibv_wc& wc : std::span(wcs).first(n)) {
        if (!timeline.completed.empty()) {
            for (std::uint64_t i = retired; i < retired + (wc.wr_id - queue.completed); ++i)
                timeline.completed[i] = now;
        }
        retired += wc.wr_id - queue.completed;
        queue.completed = wc.wr_id;
    }
    timeline.last_completion = now;
    return n;
}
//! [reap]

//! [window]
// -t N over -q QPs: round-robin, each QP posts what its credits allow, then its CQ is polled.
// -D: when time is up, each QP's next work request is its last (and signaled).
inline void run_window(std::vector<SendQueue>& queues, const Plan& plan, Timeline& timeline) {
    Watchdog watchdog(plan.timeout);
    std::uint64_t retired = 0;
    timeline.messages = 0;
    timeline.first_post = now_ns();
    const std::int64_t end = timeline.first_post + std::chrono::nanoseconds(plan.duration).count();
    for (bool busy = true; busy;) {
        busy = false;
        const bool time_up = plan.iters == 0 && now_ns() >= end;
        bool progressed = false;
        for (SendQueue& queue : queues) {
            if (time_up && queue.target == kNoTarget) queue.target = queue.posted + 1;
            post_while_credits(queue, plan, timeline);
            progressed |= reap_completions(queue, timeline, retired) > 0;
            busy |= queue.completed < queue.target;
        }
        watchdog.check(progressed, retired, "work requests");
    }
}
//! [window]

//! [final]
// The end of a run on one QP: one more work request, with the QP's count as immediate data (32
// bits: the count modulo 2^32). It is the only one that completes at the target (a WRITE alone
// consumes no receive there).
inline void post_final(SendQueue& queue, const Plan& plan) {
    ibv_send_wr wr{};
    wr.wr_id = kFinalWrId;
    wr.opcode = plan.send ? IBV_WR_SEND_WITH_IMM : IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(static_cast<std::uint32_t>(queue.posted));  // zero length: no SGE
    wr.wr.rdma.remote_addr = queue.endpoint->remote_info()->addr;
    wr.wr.rdma.rkey = queue.endpoint->remote_info()->rkey;
    ibv_send_wr* bad = nullptr;
    if (const int rc = ibv_post_send(queue.endpoint->qp(), &wr, &bad); rc != 0)
        throw std::system_error(rc, std::generic_category(), "ibv_post_send");
    (void)queue.endpoint->poll_completion(kFinalWrId, plan.timeout);
}
//! [final]

// Until its final arrives the target has nothing to do: it looks every millisecond instead of
// spinning, and leaves the CPU to the device (on Soft-RoCE the device is the kernel, on a CPU).
inline ibv_wc wait_quietly(RDMAEndpoint& endpoint, std::chrono::milliseconds wait) {
    const auto deadline = Clock::now() + wait;
    std::array<ibv_wc, 1> wc{};
    while (endpoint.try_poll(wc) == 0) {
        throw_if_stopped();
        if (Clock::now() >= deadline) {
            throw TutorialError(
                kExitTimeout,
                "no final work request within " + std::to_string(wait.count() / 1000) + " s",
                "is the client still running?");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return wc[0];
}

//! [target-write]
// The target of --op write: one receive per QP and size, for the final WRITE_WITH_IMM only; the
// WRITEs before it land in the buffer with no completion here. Returns the counts, summed: each
// as its immediate says, modulo 2^32 (-n is far below; a -D run may pass it, see the chapter).
inline std::uint64_t wait_for_final_writes(std::vector<RDMAEndpoint>& endpoints,
                                           std::uint64_t iters, std::chrono::milliseconds wait) {
    std::uint64_t total = 0;
    for (RDMAEndpoint& endpoint : endpoints) {
        const ibv_wc wc = wait_quietly(endpoint, wait);
        if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc.wc_flags & IBV_WC_WITH_IMM)) {
            throw TutorialError(kExitPeer,
                                "expected a write-with-immediate, got completion "
                                "opcode " +
                                    std::to_string(wc.opcode));
        }
        const std::uint32_t count = ntohl(wc.imm_data);
        if (iters != 0 && count != iters) {
            throw TutorialError(kExitPeer, "the client wrote " + std::to_string(count) +
                                               " messages on a QP, -n says " +
                                               std::to_string(iters));
        }
        total += count;
    }
    return total;
}
//! [target-write]

// A final SEND's immediate against the SENDs the target counted on its QP since the previous one,
// modulo 2^32: the immediate holds 32 bits, and with -D a QP may send more. Returns the target's
// own count. \throws TutorialError kExitPeer when they differ, or the count differs from -n.
[[nodiscard]] inline std::uint64_t checked_send_count(std::uint32_t count, std::uint64_t arrived,
                                                      std::uint64_t iters) {
    if (count != static_cast<std::uint32_t>(arrived) || (iters != 0 && arrived != iters)) {
        throw TutorialError(kExitPeer, "the client says it sent " + std::to_string(count) +
                                           " messages on a QP, " + std::to_string(arrived) +
                                           " arrived");
    }
    return arrived;
}

//! [receive-window]
// The target of --op send: 2 x -t receives per QP stay posted (step04 explains RNR); each one that
// completes is posted again at once. A SEND_WITH_IMM ends a QP's run: its immediate must equal
// the SENDs counted since the previous one, modulo 2^32. `finals` of them end the call.
inline std::uint64_t receive_sends(std::vector<RDMAEndpoint>& endpoints, std::size_t size,
                                   std::uint64_t iters, std::uint64_t finals,
                                   std::chrono::seconds timeout) {
    std::vector<std::uint64_t> since_final(endpoints.size(), 0);
    std::array<ibv_wc, 16> wcs;
    Watchdog watchdog(timeout);
    std::uint64_t total = 0;
    while (finals > 0) {
        bool progressed = false;
        for (std::size_t q = 0; q < endpoints.size(); ++q) {
            const std::size_t n = endpoints[q].try_poll(wcs);
            if (n == 0) continue;
            endpoints[q].post_recv(kReceiveWrId, 0, size, n);  // chained: one call per 32
            progressed = true;
            for (const ibv_wc& wc : std::span(wcs).first(n)) {
                if (!(wc.wc_flags & IBV_WC_WITH_IMM)) {
                    ++since_final[q];
                    continue;
                }
                total += checked_send_count(ntohl(wc.imm_data), since_final[q], iters);
                since_final[q] = 0;
                --finals;
            }
        }
        watchdog.check(progressed, total, "messages");
    }
    return total;
}
//! [receive-window]

}  // namespace tutorial
