// The program's name, its options and their parser: step05's ping-pong options plus the
// server's (--exit-after, --safety-ms, the shared resources' sizes) and the client's ways to wait.
#pragma once

#include "errors.hpp"
#include "option_parser.hpp"

#include <getopt.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tutorial {

constexpr const char* kProgram = "step10_srq";

// A buffer larger than this is a typo, not a tutorial exercise.
constexpr long long kMaxBufferSize = 1LL << 30;
constexpr long long kMaxDepth = 1LL << 24;

enum class WaitMode { busy, event, spin };

struct Options {
    std::string device_name;  // empty: the first device
    int ib_port = 1;
    int gid_index = -1;
    int service_level = 0;  // -l/--sl: the SL in the address vector
    int traffic_class = 0;  // --tclass: the GRH's traffic class (DSCP and ECN bits)
    int pkey_index = 0;     // --pkey-index: the P_Key table entry at INIT
    std::size_t size = 4096;
    std::uint32_t iters = 1000;
    int mtu = 1024;
    int rx_depth = 500;
    int tx_depth = 16;
    int tcp_port = 18515;
    bool verbose = false;
    bool help = false;
    int timeout_seconds = 10;
    bool check = false;
    std::string host;  // empty: server
    std::string bind_address;
    // server
    std::uint32_t exit_after = 0;  // 0: serve until SIGINT/SIGTERM
    // epoll_wait's timeout, a backstop and not the wake-up path: completion events wake the
    // loop, and the timeout bounds how long a completion whose event never comes goes unseen.
    int safety_ms = 100;
    std::uint32_t srq_limit = 0;      // 0: refill after each completion pass; else on the event
    std::uint32_t max_clients = 128;  // the shared CQ holds this many clients' sends
    bool srq_compat = false;          // --srq-pingpong-compat: one ibv_srq_pingpong client
    // client
    std::uint32_t connections = 1;  // QPs (and TCP connections) from this one process
    WaitMode mode = WaitMode::busy;
    std::uint32_t spin_us = 0;
    std::uint32_t rate = 0;  // messages per second; 0: as fast as possible
};

[[nodiscard]] inline std::string usage_text() {
    return R"(usage: step10_srq [options]            start a server (many clients, one thread)
       step10_srq [options] HOST       start a client and ping-pong with HOST

  -d, --ib-dev=DEV       use RDMA device DEV (default: the first one)
  -i, --ib-port=PORT     use port PORT of the device (default 1)
  -g, --gid-idx=IDX      use GID index IDX (default: chosen automatically)
  -l, --sl=N             service level, 0-15 (default 0)
      --tclass=N         traffic class, 0-255: DSCP << 2 | ECN (default 0)
      --pkey-index=N     P_Key table index (default 0)
  -s, --size=BYTES       message size (default 4096)
  -n, --iters=N          messages per client (default 1000)
  -m, --mtu=MTU          path MTU: 256, 512, 1024, 2048 or 4096 (default 1024)
  -r, --rx-depth=N       receives kept posted on the shared receive queue (default 500)
      --srq-depth=N      the same as -r
  -t, --tx-depth=N       send queue depth (default 16)
  -p, --port=PORT        TCP port (default 18515)
      --bind=ADDR        server: listen on ADDR (default: all)
      --timeout=S        handshake and wait timeout in seconds (default 10)
      --check            fill every message with a pattern and verify it (both sides)
  -v, --verbose          print more
  -h, --help             print this help
  server:
      --exit-after=N     exit after N connections ended (default: run until SIGINT/SIGTERM)
      --safety-ms=MS     epoll_wait timeout; the safety-net CQ poll runs then (default 100)
      --max-clients=N    clients served at once; the shared CQ is sized for them (default 128)
      --srq-limit=N      refill the receives when fewer than N are posted (the SRQ's limit
                         event), instead of after each completion pass (default 0: off)
      --srq-pingpong-compat
                         serve one ibv_srq_pingpong client (rdma-core's), then exit: its QPs
                         (-q) on the shared CQ and SRQ; -n counts all of them together
  client:
      --connections=N    open N connections from this process, one QP each (default 1)
  -e, --events           sleep on completion events instead of busy polling
      --spin-us=N        poll for up to N microseconds, then arm the CQ and sleep (as rsocket)
  for the benchmarks under bench/ (client only):
      --rate=N           pace the client to N messages per second
)";
}

//! [options]
enum LongOnlyOption : int {
    kOptBind = 256,
    kOptTimeout,
    kOptCheck,
    kOptExitAfter,
    kOptSafetyMs,
    kOptSpinUs,
    kOptRate,
    kOptTclass,
    kOptMaxClients,
    kOptSrqLimit,
    kOptConnections,
    kOptSrqCompat,
    kOptPkeyIndex
};

inline const option kLongOptions[] = {{"ib-dev", required_argument, nullptr, 'd'},
                                      {"ib-port", required_argument, nullptr, 'i'},
                                      {"gid-idx", required_argument, nullptr, 'g'},
                                      {"sl", required_argument, nullptr, 'l'},
                                      {"tclass", required_argument, nullptr, kOptTclass},
                                      {"pkey-index", required_argument, nullptr, kOptPkeyIndex},
                                      {"size", required_argument, nullptr, 's'},
                                      {"iters", required_argument, nullptr, 'n'},
                                      {"mtu", required_argument, nullptr, 'm'},
                                      {"rx-depth", required_argument, nullptr, 'r'},
                                      {"srq-depth", required_argument, nullptr, 'r'},
                                      {"max-clients", required_argument, nullptr, kOptMaxClients},
                                      {"srq-limit", required_argument, nullptr, kOptSrqLimit},
                                      {"connections", required_argument, nullptr, kOptConnections},
                                      {"srq-pingpong-compat", no_argument, nullptr, kOptSrqCompat},
                                      {"tx-depth", required_argument, nullptr, 't'},
                                      {"port", required_argument, nullptr, 'p'},
                                      {"bind", required_argument, nullptr, kOptBind},
                                      {"timeout", required_argument, nullptr, kOptTimeout},
                                      {"check", no_argument, nullptr, kOptCheck},
                                      {"exit-after", required_argument, nullptr, kOptExitAfter},
                                      {"safety-ms", required_argument, nullptr, kOptSafetyMs},
                                      {"events", no_argument, nullptr, 'e'},
                                      {"spin-us", required_argument, nullptr, kOptSpinUs},
                                      {"rate", required_argument, nullptr, kOptRate},
                                      {"verbose", no_argument, nullptr, 'v'},
                                      {"help", no_argument, nullptr, 'h'},
                                      {nullptr, 0, nullptr, 0}};

// One option that getopt_long returned, stored in o; a bad value is a UsageError.
inline void apply_option(Options& o, int c, std::string_view arg) {
    switch (c) {
        case 'd': o.device_name = arg; break;
        case 'i': o.ib_port = static_cast<int>(parse_number(arg, "--ib-port", 1, 255)); break;
        case 'g': o.gid_index = static_cast<int>(parse_number(arg, "--gid-idx", 0, 255)); break;
        case 'l': o.service_level = static_cast<int>(parse_number(arg, "--sl", 0, 15)); break;
        case kOptTclass:
            o.traffic_class = static_cast<int>(parse_number(arg, "--tclass", 0, 255));
            break;
        case kOptPkeyIndex:
            o.pkey_index = static_cast<int>(parse_number(arg, "--pkey-index", 0, 65535));
            break;
        case 's':
            o.size = static_cast<std::size_t>(parse_number(arg, "--size", 1, kMaxBufferSize));
            break;
        case 'n':
            o.iters = static_cast<std::uint32_t>(parse_number(arg, "--iters", 1, 100'000'000));
            break;
        case 'm':
            o.mtu = static_cast<int>(parse_number(arg, "--mtu", 256, 4096));
            if (o.mtu != 256 && o.mtu != 512 && o.mtu != 1024 && o.mtu != 2048 && o.mtu != 4096) {
                throw UsageError("--mtu must be 256, 512, 1024, 2048 or 4096 (got '" +
                                 std::string(arg) + "')");
            }
            break;
        case 'r':
            o.rx_depth = static_cast<int>(parse_number(arg, "--rx-depth", 1, kMaxDepth));
            break;
        case 't':
            o.tx_depth = static_cast<int>(parse_number(arg, "--tx-depth", 1, kMaxDepth));
            break;
        case 'p': o.tcp_port = static_cast<int>(parse_number(arg, "--port", 1, 65535)); break;
        case kOptBind: o.bind_address = arg; break;
        case kOptTimeout:
            o.timeout_seconds = static_cast<int>(parse_number(arg, "--timeout", 1, 3600));
            break;
        case kOptCheck: o.check = true; break;
        case kOptExitAfter:
            o.exit_after =
                static_cast<std::uint32_t>(parse_number(arg, "--exit-after", 1, 1'000'000));
            break;
        case kOptSafetyMs:
            o.safety_ms = static_cast<int>(parse_number(arg, "--safety-ms", 1, 60'000));
            break;
        case 'e': o.mode = WaitMode::event; break;
        case kOptSpinUs:
            o.spin_us = static_cast<std::uint32_t>(parse_number(arg, "--spin-us", 0, 10'000'000));
            break;
        case kOptRate:
            o.rate = static_cast<std::uint32_t>(parse_number(arg, "--rate", 1, 10'000'000));
            break;
        case kOptMaxClients:
            o.max_clients =
                static_cast<std::uint32_t>(parse_number(arg, "--max-clients", 1, 1'000'000));
            break;
        case kOptSrqLimit:
            o.srq_limit =
                static_cast<std::uint32_t>(parse_number(arg, "--srq-limit", 0, kMaxDepth));
            break;
        case kOptConnections:
            o.connections =
                static_cast<std::uint32_t>(parse_number(arg, "--connections", 1, 100'000));
            break;
        case kOptSrqCompat: o.srq_compat = true; break;
        case 'v': o.verbose = true; break;
        case 'h': o.help = true; break;
    }
}

/// The options that only a server, or only a client, takes; --spin-us sets the spin mode.
inline void check_option_combinations(Options& o) {
    if (o.spin_us > 0) { o.mode = WaitMode::spin; }
    if (o.host.empty() && (o.mode != WaitMode::busy || o.rate > 0)) {
        throw UsageError("-e, --spin-us and --rate are client options (give a HOST)");
    }
    if (!o.host.empty() && (o.exit_after > 0 || !o.bind_address.empty() || o.srq_compat)) {
        throw UsageError(
            "--exit-after, --bind and --srq-pingpong-compat are server options (drop the HOST)");
    }
    if (o.host.empty() && o.connections > 1) {
        throw UsageError("--connections is a client option (give a HOST)");
    }
    // mlx5 refuses a limit at or over the SRQ's size: the rule that holds on every device.
    if (o.srq_limit >= static_cast<std::uint32_t>(o.rx_depth)) {
        throw UsageError("--srq-limit " + std::to_string(o.srq_limit) +
                         " must be below --srq-depth " + std::to_string(o.rx_depth) +
                         " (the SRQ fires when its receives drop below the limit)");
    }
}

inline Options parse_options(int argc, char** argv) {
    Options o;
    const auto operands =
        parse_command_line(argc, argv, ":d:i:g:l:s:n:m:r:t:p:evh", kLongOptions, 1,
                           [&](int c, std::string_view arg) { apply_option(o, c, arg); });
    if (!operands.empty()) { o.host = operands[0]; }
    check_option_combinations(o);
    return o;
}
//! [options]

}  // namespace tutorial
