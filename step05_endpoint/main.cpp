// Step 05: step04's ping-pong on RDMAEndpoint, a reusable class, plus one-sided WRITE and READ.
#include "errors.hpp"
#include "handshake.hpp"
#include "one_sided.hpp"
#include "options.hpp"
#include "pingpong.hpp"
#include "qp_transitions.hpp"
#include "rdma_endpoint.hpp"
#include "stats.hpp"
#include "tcp.hpp"

#include <infiniband/verbs.h>

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <system_error>

namespace tutorial {

DeviceConfig device_config(const Options& options);
EndpointConfig endpoint_config(const Options& options);
HandshakeSettings handshake_settings(const Options& options);
void run_pingpong(RDMAEndpoint& endpoint, const Options& options);

//! [run]
// The whole program: an endpoint, its receives, the peer, then one of the three modes.
void run(const Options& options) {
    install_stop_handlers();
    const Device device(device_config(options));
    RDMAEndpoint endpoint(device, endpoint_config(options));
    if (options.verbose) {
        std::printf("device %s, port %d, max inline %u bytes\n", device.name().c_str(),
                    options.ib_port, endpoint.max_inline_data());
    }
    // Receives are posted in INIT, before the peer can send anything.
    const bool server = options.host.empty();
    if (options.op == Operation::pingpong) {
        endpoint.post_recv(kReceiveWrId, 0, options.size,
                           static_cast<std::size_t>(options.rx_depth));
    } else if (server) {
        endpoint.post_recv(kReceiveWrId, 0,
                           0);  // for the final write-with-immediate or send
    }
    if (options.op == Operation::read && server) { fill_pattern(endpoint.buffer(), kReadSeed); }
    if (server) {
        accept_peer(endpoint, static_cast<std::uint16_t>(options.tcp_port), options.bind_address,
                    handshake_settings(options));
    } else {
        connect_to_peer(endpoint, options.host, static_cast<std::uint16_t>(options.tcp_port),
                        handshake_settings(options));
    }
    std::printf("%s\n", gid_choice_line(endpoint.local_port()).c_str());
    print_address("local address: ", endpoint.local_info());
    print_address("remote address:", *endpoint.remote_info());
    if (options.op != Operation::pingpong && options.verbose) {
        // What the handshake sent and received: a RETH on the wire carries the server's three.
        const auto print_buffer = [](const char* label, const PeerInfo& info) {
            std::printf("  %s addr 0x%" PRIx64 ", rkey 0x%08x, %" PRIu64 " bytes\n", label,
                        info.addr, info.rkey, info.length);
        };
        print_buffer("local buffer:  ", endpoint.local_info());
        print_buffer("remote buffer: ", *endpoint.remote_info());
    }
    switch (options.op) {
        case Operation::pingpong: run_pingpong(endpoint, options); break;
        case Operation::write: run_write(endpoint, options); break;
        case Operation::read: run_read(endpoint, options); break;
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

EndpointConfig endpoint_config(const Options& options) {
    EndpointConfig config;
    config.buffer_size = options.size;
    config.tx_depth = static_cast<std::uint32_t>(options.tx_depth);
    config.rx_depth = static_cast<std::uint32_t>(options.rx_depth);
    config.mtu = *mtu_from_bytes(options.mtu);  // parse_options allows IB MTUs only
    // Hand out remote access only where the peer needs it, and only on the server's buffer.
    const bool server = options.host.empty();
    config.access = IBV_ACCESS_LOCAL_WRITE;
    if (server && options.op == Operation::write) { config.access |= IBV_ACCESS_REMOTE_WRITE; }
    if (server && options.op == Operation::read) { config.access |= IBV_ACCESS_REMOTE_READ; }
    return config;
}

// Handshake v3 carries -s and -n: the other side compares them at connect time.
HandshakeSettings handshake_settings(const Options& options) {
    HandshakeSettings settings;
    settings.message_size = static_cast<std::uint32_t>(options.size);
    settings.iterations = static_cast<std::uint32_t>(options.iters);
    settings.timeout = std::chrono::seconds(options.timeout_seconds);
    settings.format =
        options.rc_pingpong_compat ? HandshakeFormat::rc_pingpong : HandshakeFormat::v3;
    return settings;
}
//! [setup]

//! [pingpong]
// step04's run(), from the plan on: the loop, then rc_pingpong's summary and the latency table.
void run_pingpong(RDMAEndpoint& endpoint, const Options& options) {
    PingPongPlan plan;
    plan.size = options.size;
    plan.iters = options.iters;
    plan.rx_depth = options.rx_depth;
    plan.tx_depth = options.tx_depth;
    plan.check = options.check;
    plan.client = !options.host.empty();
    plan.rc_pingpong_compat = options.rc_pingpong_compat;
    plan.timeout = std::chrono::seconds(options.timeout_seconds);
    PingPong pingpong(endpoint, plan);
    const PingPongResult result = pingpong.run();
    std::printf("%s", rc_pingpong_summary(options.size, options.iters, result.usec).c_str());
    std::printf(
        "%s", latency_table(options.size, options.iters, compute_latency_stats(result.round_trips))
                  .c_str());
}
//! [pingpong]

}  // namespace tutorial

#ifndef RDMA_TUTORIAL_UNIT_TEST  // the unit tests include this file and bring
                                 // their own main
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
    } catch (const std::exception& e) {  // a failing verb, or a range check in the class
        std::cout.flush();
        std::fflush(stdout);
        std::cerr << kProgram << ": " << e.what() << '\n';
        return kExitRdma;
    }
}
//! [main]
#endif
