// Step 07: step05's endpoint with many WRITEs in flight, measured as ib_write_bw measures: a
// window with credits, selective signaling, post lists, several QPs, inline, one technique each.
#include "bandwidth.hpp"
#include "errors.hpp"
#include "handshake.hpp"
#include "options.hpp"
#include "qp_transitions.hpp"
#include "rdma_endpoint.hpp"
#include "report.hpp"
#include "tcp.hpp"

#include <infiniband/verbs.h>

#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

namespace tutorial {

DeviceConfig device_config(const Options& options);
EndpointConfig endpoint_config(const Options& options);
HandshakeSettings handshake_settings(const Options& options);
std::vector<std::size_t> sizes(const Options& options);
void run_target(std::vector<RDMAEndpoint>& endpoints, const Options& options);
void run_initiator(std::vector<RDMAEndpoint>& endpoints, const Options& options);

//! [run]
// The whole program: -q endpoints on one device, the target's receives, one TCP handshake per
// QP, then the target's wait or the initiator's runs.
void run(const Options& options) {
    install_stop_handlers();
    const Device device(device_config(options));
    const bool server = options.host.empty();
    std::vector<RDMAEndpoint> endpoints;
    endpoints.reserve(static_cast<std::size_t>(options.qps));
    for (int q = 0; q < options.qps; ++q) {
        RDMAEndpoint& endpoint = endpoints.emplace_back(device, endpoint_config(options));
        // -I within what the device granted the QP (it may grant more than was asked).
        if (static_cast<std::uint32_t>(options.inline_size) > endpoint.max_inline_data()) {
            throw TutorialError(kExitUsage, "-I " + std::to_string(options.inline_size) +
                                                " is over the QP's max_inline_data = " +
                                                std::to_string(endpoint.max_inline_data()));
        }
        if (server && options.op == Operation::write) {
            endpoint.post_recv(kReceiveWrId, 0, 0, sizes(options).size());  // the finals only
        } else if (server) {
            endpoint.post_recv(kReceiveWrId, 0, options.size,
                               2 * static_cast<std::size_t>(options.tx_depth));
        }
    }
    // step05's handshake once per QP: one TCP connection each, one after the other.
    if (server) {
        accept_peer(endpoints, static_cast<std::uint16_t>(options.tcp_port), options.bind_address,
                    handshake_settings(options));
    } else {
        for (RDMAEndpoint& endpoint : endpoints) {
            connect_to_peer(endpoint, options.host, static_cast<std::uint16_t>(options.tcp_port),
                            handshake_settings(options));
        }
    }
    for (const RDMAEndpoint& endpoint : endpoints) {  // ib_write_bw prints these lines too
        std::printf("%s\n", gid_choice_line(endpoint.local_port()).c_str());
        print_address("local address: ", endpoint.local_info());
        print_address("remote address:", *endpoint.remote_info());
    }
    if (server) {
        run_target(endpoints, options);
    } else {
        run_initiator(endpoints, options);
    }
}
//! [run]

//! [setup]
DeviceConfig device_config(const Options& options) {
    return {options.device_name,
            static_cast<std::uint8_t>(options.ib_port),
            options.gid_index,
            static_cast<std::uint8_t>(options.service_level),
            static_cast<std::uint8_t>(options.traffic_class),
            static_cast<std::uint16_t>(options.pkey_index)};
}

// The client's send queue holds the window; its CQ (tx + rx entries) holds every signaled one.
// The target sends nothing: its receives are the finals (write) or 2 x -t (send).
EndpointConfig endpoint_config(const Options& options) {
    const bool server = options.host.empty();
    const auto depth = static_cast<std::uint32_t>(options.tx_depth);
    EndpointConfig config;
    config.buffer_size = options.size;  // with -a, the largest size
    config.tx_depth = server ? 1 : depth;
    config.rx_depth = !server ? 1
                      : options.op == Operation::send
                          ? 2 * depth
                          : static_cast<std::uint32_t>(sizes(options).size());
    if (options.mtu != 0) config.mtu = *mtu_from_bytes(options.mtu);  // else the port's active
    config.access = IBV_ACCESS_LOCAL_WRITE;
    if (server && options.op == Operation::write) config.access |= IBV_ACCESS_REMOTE_WRITE;
    return config;
}

// Handshake v3 compares -s (with -a, the largest size) and -n; -D agrees no count (0).
HandshakeSettings handshake_settings(const Options& options) {
    HandshakeSettings settings;
    settings.message_size = static_cast<std::uint32_t>(options.size);
    settings.iterations = options.duration > 0 ? 0 : static_cast<std::uint32_t>(options.iters);
    settings.timeout = std::chrono::seconds(options.timeout_seconds);
    return settings;
}

// -s, or with -a the powers of two from 2 B up to -s (when given) or 8 MiB.
std::vector<std::size_t> sizes(const Options& options) {
    if (!options.all_sizes) return {options.size};
    std::vector<std::size_t> all;
    for (std::size_t size = 2; size <= options.size; size *= 2) all.push_back(size);
    return all;
}
//! [setup]

//! [target]
// The server: wait for every QP's final work request, check its count, print one line.
void run_target(std::vector<RDMAEndpoint>& endpoints, const Options& options) {
    const std::uint64_t iters =
        options.duration > 0 ? 0 : static_cast<std::uint64_t>(options.iters);
    const std::size_t rounds = sizes(options).size();
    std::uint64_t total = 0;
    if (options.op == Operation::send) {
        total = receive_sends(endpoints, options.size, iters, rounds * endpoints.size(),
                              std::chrono::seconds(options.timeout_seconds));
    } else {
        // No completion arrives before the final: wait for the whole run.
        const auto wait = std::chrono::seconds(options.timeout_seconds + options.duration) +
                          std::chrono::milliseconds(10) * options.iters * options.qps;
        for (std::size_t round = 0; round < rounds; ++round)
            total += wait_for_final_writes(endpoints, iters, wait);
    }
    std::printf("server: %" PRIu64 " %s on %zu QP(s) in %zu size(s); every final count matched\n",
                total, options.op == Operation::send ? "SENDs" : "RDMA WRITEs", endpoints.size(),
                rounds);
}
//! [target]

// The target's buffer grants RDMA WRITE in --op write only: its rkey tells the client its mode.
void check_modes_match(const RDMAEndpoint& endpoint, const Options& options) {
    const bool server_writes = endpoint.remote_info()->rkey != 0;
    if (server_writes == (options.op == Operation::write)) return;
    const char* theirs = server_writes ? "write" : "send";
    const char* mine = server_writes ? "send" : "write";
    throw TutorialError(kExitPeer, std::string("the server uses --op ") + theirs +
                                       ", this client --op " + mine +
                                       ": both sides must use the same --op");
}

//! [initiator]
// The client: per size, prebuilt requests on every QP, the run, each QP's final, one row.
void run_initiator(std::vector<RDMAEndpoint>& endpoints, const Options& options) {
    check_modes_match(endpoints.front(), options);
    print_table_header();
    for (const std::size_t size : sizes(options)) {
        Plan plan;
        plan.size = size;
        plan.iters = options.duration > 0 ? 0 : static_cast<std::uint64_t>(options.iters);
        plan.duration = std::chrono::seconds(options.duration);
        plan.depth = static_cast<std::uint32_t>(options.tx_depth);
        plan.signal_every = static_cast<std::uint32_t>(options.signal_every);
        plan.post_list = static_cast<std::uint32_t>(options.post_list);
        plan.inline_size = static_cast<std::uint32_t>(options.inline_size);
        plan.send = options.op == Operation::send;
        plan.timeout = std::chrono::seconds(options.timeout_seconds);
        std::vector<SendQueue> queues;
        queues.reserve(endpoints.size());
        for (RDMAEndpoint& endpoint : endpoints)
            queues.push_back(prebuild_requests(endpoint, plan));
        Timeline timeline;
        timeline.posted.resize(plan.iters * queues.size());  // -D: none, it only counts
        timeline.completed.resize(plan.iters * queues.size());
        if (plan.depth == 1 && queues.size() == 1 && plan.iters > 0) {
            run_one_at_a_time(queues.front(), plan, timeline);
        } else {
            run_window(queues, plan, timeline);
        }
        for (SendQueue& queue : queues) post_final(queue, plan);
        print_table_row(size, timeline, plan.signal_every, plan.post_list);
    }
    print_rule();
}
//! [initiator]

}  // namespace tutorial

//! [main]
int main(int argc, char** argv) {
    using namespace tutorial;
    try {
        Options options = parse_options(argc, argv);
        if (options.help) {
            std::cout << usage_text();
            return kExitOk;
        }
        if (options.all_sizes && !options.size_given) options.size = kMaxSweepSize;
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
    } catch (const std::exception& e) {  // a failing verb, or a range check in the class
        std::cout.flush();
        std::fflush(stdout);
        std::cerr << kProgram << ": " << e.what() << '\n';
        return kExitRdma;
    }
}
//! [main]
