// Step 04: the data path. A plain ping-pong first, then the optimised loop (fast_loop.hpp).
#include "check.hpp"
#include "connect.hpp"
#include "device.hpp"
#include "enum_text.hpp"
#include "errors.hpp"
#include "fast_loop.hpp"
#include "gid.hpp"
#include "latency_file.hpp"
#include "local_port.hpp"
#include "options.hpp"
#include "pingpong.hpp"
#include "qp_masks.hpp"
#include "qp_transitions.hpp"
#include "resources.hpp"
#include "stats.hpp"
#include "tcp.hpp"
#include "verbs_raii.hpp"
#include "wc_status.hpp"
#include "wire_format.hpp"

#include <infiniband/verbs.h>

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

[[nodiscard]] PingPongResult plain_pingpong(const Resources& resources, const PingPongPlan& plan);

//! [run]
void run(const Options& options) {
    const OutputFile latency_file = open_latency_file(options.latency_file);
    install_stop_handlers();
    Resources resources;
    const OpenedDevice opened = open_and_check(resources.device_list, resources.context,
                                               options.device_name, options.ib_port);
    print_opened_device(resources.context.get(), opened, options.ib_port);
    check_limits(options, opened.attr);
    check_pkey_index(opened.port_attr, options.ib_port, options.pkey_index);
    const QueuePairCaps caps = build_resources(resources, options);
    print_resources(resources, options);
    print_queue_pair(*resources.qp, caps);
    // ibv_rc_pingpong posts all its receives before the handshake, and so do we: the peer may
    // send as soon as it has our address.
    post_receives(resources, options.size, options.rx_depth);
    connect_to_peer(resources, opened, options);

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
    const PingPongResult result =
        options.plain ? plain_pingpong(resources, plan) : PingPong(resources, plan).run();
    std::printf("%s", rc_pingpong_summary(options.size, options.iters, result.usec).c_str());
    std::printf(
        "%s", latency_table(options.size, options.iters, compute_latency_stats(result.round_trips))
                  .c_str());
    if (latency_file) {
        write_latency_file(latency_file.get(), options.latency_file,
                           latency_file_text(kLatencyLabel, options.size, result.round_trips));
    }
}
//! [run]

//! [plain_loop]
// One send of the whole buffer, signaled: its completion tells us the peer's QP has it.
void post_plain_send(const Resources& resources, const PingPongPlan& plan, long long index,
                     long long total) {
    ibv_sge sge{};  // a scatter/gather element: where the message is, and its memory's lkey
    sge.addr = reinterpret_cast<std::uintptr_t>(resources.buffer.get());
    sge.length = static_cast<std::uint32_t>(plan.size);
    sge.lkey = resources.mr->lkey;
    ibv_send_wr wr{};
    wr.wr_id = static_cast<std::uint64_t>(index);  // comes back in the work completion
    wr.sg_list = &sge;
    wr.num_sge = 1;
    mark_if_last(wr, index, total);  // IBV_WR_SEND; with immediate data for the last one
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    if (const int rc = ibv_post_send(resources.qp.get(), &wr, &bad); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_post_send");
    }
}

// Polls the CQ, one completion per call, until one comes; a failed one throws, naming it.
[[nodiscard]] ibv_wc wait_for_completion(const Resources& resources, const PingPongPlan& plan,
                                         long long received, long long total) {
    const Clock::time_point deadline = Clock::now() + plan.timeout;
    for (long long polls = 1;; ++polls) {
        ibv_wc wc{};
        const int n = ibv_poll_cq(resources.cq.get(), 1, &wc);
        if (n < 0) { throw std::system_error(EIO, std::generic_category(), "ibv_poll_cq"); }
        if (n == 1) {
            if (wc.status != IBV_WC_SUCCESS) { throw_wc_error(wc, wc.wr_id == kReceiveWrId); }
            return wc;
        }
        if (polls % 4096 == 0) {  // now and then: the clock is not free
            throw_if_stopped();
            if (Clock::now() >= deadline) {
                throw TutorialError(kExitTimeout,
                                    "nothing from the peer for " +
                                        std::to_string(plan.timeout.count()) + " s (after " +
                                        std::to_string(received) + " of " + std::to_string(total) +
                                        " messages)",
                                    "is the peer still running?");
            }
        }
    }
}

// ibv_rc_pingpong's traffic, one message at a time. A side sends its next message once the
// peer's message has arrived (the client starts) and its own previous send has completed.
PingPongResult plain_pingpong(const Resources& resources, const PingPongPlan& plan) {
    const long long total = plan.warmup + plan.iters;
    long long end = total;  // fewer when the peer's last message comes first
    long long sent = 0, received = 0, completed = 0;
    std::vector<Clock::time_point> send_times;
    send_times.reserve(static_cast<std::size_t>(plan.iters));
    const auto send = [&] {
        if (sent >= plan.warmup) { send_times.push_back(Clock::now()); }
        if (plan.check) {
            fill_pattern(std::span(resources.buffer.get(), plan.size),
                         pattern_id(sent, plan.client));
        }
        post_plain_send(resources, plan, sent++, total);
    };
    // Our message k answers the peer's message k (server) or k - 1 (client, who sends first).
    const long long answers = plan.client ? 0 : 1;
    if (plan.client) { send(); }
    while (received < end || completed < end) {
        const ibv_wc wc = wait_for_completion(resources, plan, received, total);
        if (wc.wr_id != kReceiveWrId) {
            ++completed;  // our send: the peer's QP has acknowledged it
        } else {
            check_received(resources, plan, wc, received);
            post_receives(resources, plan.size, 1);  // replace the receive just used
            if (++received < total && is_last_message(wc)) {
                end = received;  // the peer has sent its last message
            }
        }
        if (sent < end && completed == sent && received >= sent + answers) { send(); }
    }
    if (end < total) { throw peer_ended_early(plan.client, end, total); }
    return result_from(send_times);
}
//! [plain_loop]

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
        if (!e.hint().empty()) { std::cerr << "hint: " << e.hint() << '\n'; }
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
