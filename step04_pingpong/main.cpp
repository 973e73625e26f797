// Step 04: ping-pong that interoperates with ibv_rc_pingpong, with honest latency figures.
#include "check.hpp"
#include "connect.hpp"
#include "device.hpp"
#include "enum_text.hpp"
#include "errors.hpp"
#include "gid.hpp"
#include "latency_file.hpp"
#include "local_port.hpp"
#include "options.hpp"
#include "qp_masks.hpp"
#include "qp_transitions.hpp"
#include "resources.hpp"
#include "stats.hpp"
#include "tcp.hpp"
#include "verbs_raii.hpp"
#include "wc_status.hpp"
#include "wire_format.hpp"

#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <span>
#include <string>
#include <system_error>
#include <vector>

namespace tutorial {

//! [pingpong_setup]
// Send work requests carry their sequence number; receives and the probe carry these.
inline constexpr std::uint64_t kReceiveWrId = UINT64_MAX;
inline constexpr std::uint64_t kProbeWrId = UINT64_MAX - 1;

// What the loop needs to know, fixed before it starts.
struct PingPongPlan {
    std::size_t size = 0;
    long long iters = 0;   // measured iterations
    long long warmup = 0;  // iterations before them, left out of the figures
    int rx_depth = 0;
    int tx_depth = 0;
    bool inline_send = false;  // size <= the max_inline_data the QP was granted
    bool check = false;
    bool client = false;
    std::chrono::seconds timeout{10};
};

struct PingPongResult {
    double usec = 0;                  // wall time of the measured iterations
    std::vector<double> round_trips;  // usec, one per measured iteration but the last
};

// Posts `count` receives of the whole buffer in one call: a chained list of work requests.
void post_receives(const Resources& resources, std::size_t size, int count) {
    std::vector<ibv_recv_wr> requests(static_cast<std::size_t>(count));
    ibv_sge sge{};
    sge.addr = reinterpret_cast<std::uintptr_t>(resources.buffer.get());
    sge.length = static_cast<std::uint32_t>(size);
    sge.lkey = resources.mr->lkey;
    for (std::size_t i = 0; i < requests.size(); ++i) {
        requests[i].wr_id = kReceiveWrId;
        requests[i].sg_list = &sge;  // every receive lands in the same buffer, as in rc_pingpong
        requests[i].num_sge = 1;
        requests[i].next = i + 1 < requests.size() ? &requests[i + 1] : nullptr;
    }
    ibv_recv_wr* bad = nullptr;
    if (const int rc = ibv_post_recv(resources.qp.get(), requests.data(), &bad); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_post_recv");
    }
}
//! [pingpong_setup]

//! [pingpong_loop]
// The traffic of ibv_rc_pingpong: the client sends first; each side sends its next message as
// soon as the peer's has arrived, `warmup + iters` times each way. Only every signal_every-th
// send asks for a completion: the peer's answer already tells us the send arrived.
class PingPong {
  public:
    PingPong(const Resources& resources, const PingPongPlan& plan)
        : resources_(resources),
          plan_(plan),
          signal_every_(std::max(1, plan.tx_depth / 2)),
          total_(plan.warmup + plan.iters),
          refill_batch_(std::max(1, std::min(kRefillBatch, plan.rx_depth / 2))),
          posted_receives_(plan.rx_depth) {
        send_times_.reserve(static_cast<std::size_t>(plan.iters));
    }

    [[nodiscard]] PingPongResult run() {
        if (plan_.client) {
            send_next();
        }
        std::array<ibv_wc, 16> completions{};
        last_progress_ = Clock::now();
        // Like ibv_rc_pingpong, wait for our last send's completion too: destroying the QP
        // earlier could drop that message before it left.
        while (received_ < total_ || completed_sends_ < total_) {
            const int n = ibv_poll_cq(resources_.cq.get(), static_cast<int>(completions.size()),
                                      completions.data());
            if (n < 0) {
                throw std::system_error(EIO, std::generic_category(), "ibv_poll_cq");
            }
            if (n == 0) {
                if (++idle_polls_ % 4096 == 0) {
                    check_idle();
                }
                continue;
            }
            idle_polls_ = 0;
            last_progress_ = Clock::now();
            // Send completions first. The CQ does not order a send's completion before the
            // peer's answer to it; handled in CQ order, a receive's reply could wait for
            // queue room that a send completion later in this very batch already freed.
            for (const bool receives : {false, true}) {
                for (int i = 0; i < n; ++i) {
                    const ibv_wc& wc = completions[static_cast<std::size_t>(i)];
                    if ((wc.wr_id == kReceiveWrId) == receives) {
                        handle(wc);
                    }
                }
            }
        }
        PingPongResult result;
        const Clock::time_point end = Clock::now();
        if (!send_times_.empty()) {
            result.usec =
                std::chrono::duration<double, std::micro>(end - send_times_.front()).count();
        }
        for (std::size_t i = 0; i + 1 < send_times_.size(); ++i) {
            result.round_trips.push_back(
                std::chrono::duration<double, std::micro>(send_times_[i + 1] - send_times_[i])
                    .count());
        }
        return result;
    }

  private:
    void handle(const ibv_wc& wc) {
        if (wc.status != IBV_WC_SUCCESS) {
            throw_wc_error(wc, wc.wr_id == kReceiveWrId);
        }
        if (wc.wr_id != kReceiveWrId) {
            send_completed(wc.wr_id);
            return;
        }
        if (wc.byte_len != plan_.size) {
            throw TutorialError(kExitPeer,
                                "received a " + std::to_string(wc.byte_len) +
                                    "-byte message, but -s is " + std::to_string(plan_.size),
                                "both sides must use the same -s");
        }
        if (plan_.check) {
            const std::span<const std::byte> message(resources_.buffer.get(), plan_.size);
            if (const auto offset =
                    find_pattern_mismatch(message, pattern_id(received_, !plan_.client))) {
                throw TutorialError(kExitPeer, "--check: message " + std::to_string(received_) +
                                                   " is wrong at byte " + std::to_string(*offset));
            }
        }
        ++received_;
        if (--posted_receives_ <= plan_.rx_depth - refill_batch_) {
            post_receives(resources_, plan_.size, plan_.rx_depth - posted_receives_);
            posted_receives_ = plan_.rx_depth;
        }
        if (sent_ < total_) {
            send_next();
        }
    }

    // A signaled send completed: it and every unsignaled send before it are done.
    void send_completed(std::uint64_t wr_id) {
        completed_sends_ = static_cast<long long>(wr_id) + 1;
        unsignaled_ = sent_ - completed_sends_;  // sends still in flight
    }

    // Client and server messages of the same iteration carry different patterns.
    [[nodiscard]] static std::uint64_t pattern_id(long long iteration, bool from_client) {
        return static_cast<std::uint64_t>(iteration) * 2 + (from_client ? 0 : 1);
    }

    void send_next() {
        if (sent_ >= plan_.warmup) {
            send_times_.push_back(Clock::now());
        }
        if (plan_.check) {
            fill_pattern(std::span(resources_.buffer.get(), plan_.size),
                         pattern_id(sent_, plan_.client));
        }
        // The send queue holds tx_depth requests; unsignaled ones are freed by a later
        // signaled completion, so wait for one before the queue can overflow. (Not
        // unsignaled_ + 1 >= tx_depth: with -t 1 that waited for a send never posted.)
        while (unsignaled_ >= plan_.tx_depth) {
            ibv_wc wc{};
            const int n = ibv_poll_cq(resources_.cq.get(), 1, &wc);
            if (n < 0) {
                throw std::system_error(EIO, std::generic_category(), "ibv_poll_cq");
            }
            if (n == 1) {
                if (wc.status != IBV_WC_SUCCESS || wc.wr_id == kReceiveWrId) {
                    handle(wc);  // (a receive cannot come first: the peer waits for this send)
                } else {
                    send_completed(wc.wr_id);
                }
            } else if (++idle_polls_ % 4096 == 0) {
                check_idle();
            }
        }
        ibv_sge sge{};
        sge.addr = reinterpret_cast<std::uintptr_t>(resources_.buffer.get());
        sge.length = static_cast<std::uint32_t>(plan_.size);
        sge.lkey = resources_.mr->lkey;
        ibv_send_wr wr{};
        wr.wr_id = static_cast<std::uint64_t>(sent_);
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        const bool signaled = (sent_ + 1) % signal_every_ == 0 || sent_ + 1 == total_;
        wr.send_flags =
            (signaled ? IBV_SEND_SIGNALED : 0) | (plan_.inline_send ? IBV_SEND_INLINE : 0);
        ibv_send_wr* bad = nullptr;
        if (const int rc = ibv_post_send(resources_.qp.get(), &wr, &bad); rc != 0) {
            throw std::system_error(rc, std::generic_category(), "ibv_post_send");
        }
        ++sent_;
        ++unsignaled_;
    }

    // Nothing for --timeout seconds. RC has no "peer gone" event: a side that only waits for a
    // receive would wait for ever. So we probe: one more send. If the peer's QP is gone it is not
    // acknowledged, and after the retries it fails with IBV_WC_RETRY_EXC_ERR.
    void check_idle() {
        throw_if_stopped();
        if (Clock::now() - last_progress_ < plan_.timeout) {
            return;
        }
        const std::string waited =
            "nothing from the peer for " + std::to_string(plan_.timeout.count()) + " s (after " +
            std::to_string(received_) + " of " + std::to_string(total_) + " messages)";
        std::fprintf(stderr, "%s: %s; probing its QP\n", kProgram, waited.c_str());
        ibv_sge sge{};
        sge.addr = reinterpret_cast<std::uintptr_t>(resources_.buffer.get());
        sge.length = 0;
        sge.lkey = resources_.mr->lkey;
        ibv_send_wr wr{};
        wr.wr_id = kProbeWrId;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        ibv_send_wr* bad = nullptr;
        if (ibv_post_send(resources_.qp.get(), &wr, &bad) == 0) {
            const Clock::time_point deadline = Clock::now() + std::chrono::seconds(5);
            while (Clock::now() < deadline) {
                ibv_wc wc{};
                if (ibv_poll_cq(resources_.cq.get(), 1, &wc) == 1) {
                    if (wc.status != IBV_WC_SUCCESS) {
                        throw_wc_error(wc, wc.wr_id == kReceiveWrId);
                    }
                    if (wc.wr_id == kProbeWrId) {
                        throw TutorialError(kExitTimeout, waited,
                                            "its QP acknowledged a probe, so the peer's program "
                                            "is alive but stuck (or stopped)");
                    }
                }
            }
        }
        throw TutorialError(kExitTimeout, waited, "is the peer still running?");
    }

    const Resources& resources_;
    const PingPongPlan& plan_;
    const long long signal_every_;
    const long long total_;
    // Receives are re-posted 16 at a time (fewer when -r is small): often enough that one
    // refill is a short pause, and never 250 at once, which shows in the latency's tail.
    static constexpr int kRefillBatch = 16;
    const int refill_batch_;
    long long sent_ = 0;
    long long received_ = 0;
    long long completed_sends_ = 0;
    long long unsignaled_ = 0;
    int posted_receives_;
    long long idle_polls_ = 0;
    Clock::time_point last_progress_;
    std::vector<Clock::time_point> send_times_;
};
//! [pingpong_loop]

//! [run]
void run(const Options& options) {
    const OutputFile latency_file = open_latency_file(options.latency_file);
    install_stop_handlers();
    Resources resources;
    const ibv_device_attr attr = open_and_check(resources, options);
    const QueuePairCaps caps = build_resources(resources, options);
    print_queue_pair(*resources.qp, caps);
    const LocalPort port = query_local_port(resources.context.get(), options, attr.phys_port_cnt);
    // ibv_rc_pingpong posts all its receives before the handshake, and so do we: the peer may
    // send as soon as it has our address.
    post_receives(resources, options.size, options.rx_depth);

    QpEndpointInfo local;
    local.lid = port.attr.lid;
    local.qpn = resources.qp->qp_num;
    local.psn = random_psn();
    local.gid = port.gid;
    connect_to_peer(resources, port, options, local);

    PingPongPlan plan;
    plan.size = options.size;
    plan.iters = options.iters;
    plan.warmup = options.warmup;
    plan.rx_depth = options.rx_depth;
    plan.tx_depth = options.tx_depth;
    plan.inline_send = options.size <= caps.granted.max_inline_data;
    plan.check = options.check;
    plan.client = !options.host.empty();
    plan.timeout = std::chrono::seconds(options.timeout_seconds);
    PingPong pingpong(resources, plan);
    const PingPongResult result = pingpong.run();
    std::printf("%s", rc_pingpong_summary(options.size, options.iters, result.usec).c_str());
    std::printf(
        "%s", latency_table(options.size, options.iters, compute_latency_stats(result.round_trips))
                  .c_str());
    if (latency_file) {
        write_latency_file(latency_file.get(), options.latency_file,
                           latency_file_text(options.size, result.round_trips));
    }
}
//! [run]

}  // namespace tutorial

#ifndef RDMA_TUTORIAL_UNIT_TEST  // the unit tests include this file and bring their own main
//! [main]
int main(int argc, char** argv) {
    using namespace tutorial;
    try {
        const Options options = parse_options(argc, argv);
        if (options.help) {
            std::cout << usage_text();
            return kExitOk;
        }
        run(options);
        return kExitOk;
    } catch (const UsageError& e) {
        std::cerr << kProgram << ": " << e.what() << '\n' << usage_text();
        return kExitUsage;
    } catch (const TutorialError& e) {
        std::cout.flush();
        std::fflush(stdout);
        std::cerr << kProgram << ": " << e.what() << '\n';
        if (!e.hint().empty()) {
            std::cerr << "hint: " << e.hint() << '\n';
        }
        return e.exit_code();
    } catch (const std::system_error& e) {
        std::cout.flush();
        std::fflush(stdout);
        std::cerr << kProgram << ": " << e.what() << '\n';
        return kExitRdma;
    }
}
//! [main]
#endif
