// Step 12: unreliable datagrams. One UD QP serves every client; the client numbers its messages
// and sends one again when no answer comes.
#include "address_handles.hpp"
#include "connect.hpp"
#include "device.hpp"
#include "enum_text.hpp"
#include "errors.hpp"
#include "gid.hpp"
#include "local_port.hpp"
#include "options.hpp"
#include "pingpong.hpp"
#include "qp_masks.hpp"
#include "resources.hpp"
#include "route.hpp"
#include "stats.hpp"
#include "tcp.hpp"
#include "ud_client.hpp"
#include "ud_pingpong_compat.hpp"
#include "ud_qp.hpp"
#include "ud_server.hpp"
#include "verbs_raii.hpp"
#include "wc_status.hpp"
#include "wire_format.hpp"

#include <infiniband/verbs.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <system_error>

namespace tutorial {

void print_figures(const Options& options, const PingPongResult& result) {
    std::printf("%s", rc_pingpong_summary(options.size, options.iters, result.usec).c_str());
    std::printf(
        "%s", latency_table(options.size, options.iters, compute_latency_stats(result.round_trips))
                  .c_str());
}

//! [qkey_violations]
// The port counts the datagrams it dropped for a wrong Q_Key (16 bits, it stops at 65535).
[[nodiscard]] std::uint16_t qkey_violations(ibv_context* context, int ib_port) {
    ibv_port_attr attr{};
    if (const int rc = ibv_query_port(context, static_cast<std::uint8_t>(ib_port), &attr);
        rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_query_port");
    }
    return attr.qkey_viol_cntr;
}
//! [qkey_violations]

void serve(Resources& resources, const Options& options) {
    const std::uint16_t violations_before =
        qkey_violations(resources.context.get(), options.ib_port);
    std::printf("server: UD QP %u (0x%06x), Q_Key 0x%08x; a client: %s HOST %u\n",
                resources.qp->qp_num, resources.qp->qp_num, options.qkey, kProgram,
                resources.qp->qp_num);
    std::fflush(stdout);
    ServerCounts counts;
    std::string stopped;  // Ctrl-C is how a server with --clients 0 ends: the figures still count
    try {
        run_server(resources, options.qkey, options.clients, counts);
    } catch (const TutorialError& e) {
        if (e.exit_code() != kExitInterrupted) { throw; }
        stopped = e.what();
    }
    std::printf(
        "server: %lld messages answered, %lld clients finished, %zu address handles; "
        "%lld refused (no address handle), %lld receives failed\n",
        counts.answered, counts.finished, resources.addresses.size(), counts.refused,
        counts.failed);
    // Port-wide (other programs' drops count too), stuck at 65535; a reset makes it negative.
    const int violations =
        qkey_violations(resources.context.get(), options.ib_port) - violations_before;
    std::printf("port %d: %d datagrams dropped for a wrong Q_Key while we ran (qkey_viol_cntr)\n",
                options.ib_port, violations > 0 ? violations : 0);
    if (!stopped.empty()) { throw TutorialError(kExitInterrupted, stopped); }
}

void ping(Resources& resources, const OpenedDevice& opened, const Options& options,
          const PingPongPlan& plan) {
    const Route route = route_to(options.host);
    LocalPort port = query_local_port(resources.context.get(), options.ib_port, options.gid_index,
                                      opened.attr.phys_port_cnt, local_address_bytes(route.socket));
    if (port.attr.link_layer != IBV_LINK_LAYER_ETHERNET) {
        throw TutorialError(kExitUsage,
                            "on InfiniBand the server's address is its LID, not HOST's IP",
                            "use --handshake, which exchanges it over TCP");
    }
    port.service_level = static_cast<std::uint8_t>(options.service_level);
    port.traffic_class = static_cast<std::uint8_t>(options.traffic_class);
    std::printf("%s\n", gid_choice_line(port).c_str());
    ibv_ah_attr attr = peer_address(port, options.ib_port, route.remote, 0);
    resources.peer.reset(ibv_create_ah(resources.pd.get(), &attr));
    if (!resources.peer) {
        throw std::system_error(errno, std::generic_category(), "ibv_create_ah");
    }
    std::printf("server:  %s, QPN 0x%06x\n", format_gid(route.remote).c_str(), options.server_qpn);
    std::fflush(stdout);
    ClientCounts counts;
    const PingPongResult result =
        run_client(resources, plan, resources.peer.get(), options.server_qpn, options.qkey, counts);
    print_figures(options, result);
    std::printf("%lld pings sent again after %d ms without an answer; %lld late answers dropped\n",
                counts.resent, options.resend_ms, counts.duplicates);
}

//! [run]
void run(const Options& options) {
    install_stop_handlers();
    Resources resources;
    const OpenedDevice opened = open_and_check(resources.device_list, resources.context,
                                               options.device_name, options.ib_port);
    print_opened_device(resources.context.get(), opened, options.ib_port);
    check_limits(options, opened.attr, opened.port_attr, options.ib_port);
    check_pkey_index(opened.port_attr, options.ib_port, options.pkey_index);
    // The server takes any message that fits a packet; the others, their own size.
    const bool server = options.host.empty() && !options.handshake;
    const std::size_t largest =
        server ? static_cast<std::size_t>(mtu_bytes(opened.port_attr.active_mtu)) : options.size;
    const QueuePairCaps caps = build_resources(resources, options, largest);
    print_resources(resources, options);
    print_queue_pair(*resources.qp, caps);
    for (int slot = 0; slot < options.rx_depth; ++slot) { post_receive(resources, slot); }

    PingPongPlan plan;
    plan.size = options.size;
    plan.iters = options.iters;
    plan.warmup = options.warmup;
    plan.client = !options.host.empty();
    plan.timeout = std::chrono::seconds(options.timeout_seconds);
    plan.resend = std::chrono::milliseconds(options.resend_ms);
    if (options.handshake) {
        const std::uint32_t peer_qpn = connect_to_peer(resources, opened, options);
        print_figures(options, run_compat(resources, plan, peer_qpn, options.qkey));
    } else if (server) {
        serve(resources, options);
    } else {
        ping(resources, opened, options, plan);
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
