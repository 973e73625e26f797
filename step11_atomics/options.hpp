// The program's name, its options and their parser: step10's server options, and the client's
// --op (which one-sided verbs act on the server's target), --connections and --window.
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

constexpr const char* kProgram = "step11_atomics";

constexpr long long kMaxDepth = 1LL << 24;

/// What the client does to the server's target (--op).
enum class Op {
    read_write,  ///< READ the counter, add 1, WRITE it back: the lost update
    fetch_add,   ///< FETCH_AND_ADD 1: nothing lost
    cas,         ///< a COMPARE_AND_SWAP lock, a seqlock over a 256-byte record
    window,      ///< WRITE through a memory window, then through an invalidated one
};

struct Options {
    std::string device_name;  // empty: the first device
    int ib_port = 1;
    int gid_index = -1;
    int service_level = 0;  // -l/--sl: the SL in the address vector
    int traffic_class = 0;  // --tclass: the GRH's traffic class (DSCP and ECN bits)
    int pkey_index = 0;     // --pkey-index: the P_Key table entry at INIT
    std::uint32_t iters = 1000;
    int mtu = 1024;
    int tx_depth = 16;
    int tcp_port = 18515;
    bool verbose = false;
    bool help = false;
    int timeout_seconds = 10;
    std::string host;  // empty: server
    std::string bind_address;
    // server
    std::uint32_t exit_after = 0;    // 0: serve until SIGINT/SIGTERM
    int safety_ms = 100;             // epoll_wait's timeout: the safety-net CQ poll runs then
    std::uint32_t max_clients = 16;  // one page of the target per client, for its window
    // client
    Op op = Op::fetch_add;
    std::uint32_t connections = 1;  // QPs (and TCP connections) from this one process
    std::uint32_t window = 1;       // fetch-add: atomics in flight per connection
    std::uint32_t readers = 0;      // cas: connections that read (0: all but one)
    std::uint64_t offset = 0;       // the counter's offset in the target
};

[[nodiscard]] inline std::string usage_text() {
    return R"(usage: step11_atomics [options]          start a server: the target of every client
       step11_atomics [options] HOST     start a client: act on HOST's target

  -d, --ib-dev=DEV       use RDMA device DEV (default: the first one)
  -i, --ib-port=PORT     use port PORT of the device (default 1)
  -g, --gid-idx=IDX      use GID index IDX (default: chosen automatically)
  -l, --sl=N             service level, 0-15 (default 0)
      --tclass=N         traffic class, 0-255: DSCP << 2 | ECN (default 0)
      --pkey-index=N     P_Key table index (default 0)
  -m, --mtu=MTU          path MTU: 256, 512, 1024, 2048 or 4096 (default 1024)
  -t, --tx-depth=N       send queue depth (default 16)
  -p, --port=PORT        TCP port (default 18515)
      --timeout=S        handshake and wait timeout in seconds (default 10)
  -v, --verbose          print more
  -h, --help             print this help
  server:
      --bind=ADDR        listen on ADDR (default: all)
      --exit-after=N     exit after N connections ended (default: run until SIGINT/SIGTERM)
      --safety-ms=MS     epoll_wait timeout; the safety-net CQ poll runs then (default 100)
      --max-clients=N    clients served at once, each with a page of the target (default 16)
  client:
      --op=OP            read-write: READ the counter, add 1, WRITE it (updates are lost)
                         fetch-add:  FETCH_AND_ADD 1 (the default; nothing is lost)
                         cas:        writers take a CAS lock and write a record; readers
                                     read it without a lock (a seqlock)
                         window:     WRITE through a memory window, then after the server
                                     invalidated it
  -n, --iters=N          updates per connection (default 1000)
      --connections=N    open N connections from this process, one QP each (default 1)
      --window=N         fetch-add: atomics in flight per connection (default 1)
      --readers=N        cas: how many of the connections read (default: all but one)
      --offset=BYTES     the counter's offset in the target's first page; fetch-add needs a
                         multiple of 8 (default 0)
)";
}

//! [options]
enum LongOnlyOption : int {
    kOptBind = 256,
    kOptTimeout,
    kOptExitAfter,
    kOptSafetyMs,
    kOptTclass,
    kOptMaxClients,
    kOptConnections,
    kOptPkeyIndex,
    kOptOp,
    kOptWindow,
    kOptReaders,
    kOptOffset
};

inline const option kLongOptions[] = {{"ib-dev", required_argument, nullptr, 'd'},
                                      {"ib-port", required_argument, nullptr, 'i'},
                                      {"gid-idx", required_argument, nullptr, 'g'},
                                      {"sl", required_argument, nullptr, 'l'},
                                      {"tclass", required_argument, nullptr, kOptTclass},
                                      {"pkey-index", required_argument, nullptr, kOptPkeyIndex},
                                      {"iters", required_argument, nullptr, 'n'},
                                      {"mtu", required_argument, nullptr, 'm'},
                                      {"max-clients", required_argument, nullptr, kOptMaxClients},
                                      {"connections", required_argument, nullptr, kOptConnections},
                                      {"tx-depth", required_argument, nullptr, 't'},
                                      {"port", required_argument, nullptr, 'p'},
                                      {"bind", required_argument, nullptr, kOptBind},
                                      {"timeout", required_argument, nullptr, kOptTimeout},
                                      {"exit-after", required_argument, nullptr, kOptExitAfter},
                                      {"safety-ms", required_argument, nullptr, kOptSafetyMs},
                                      {"op", required_argument, nullptr, kOptOp},
                                      {"window", required_argument, nullptr, kOptWindow},
                                      {"readers", required_argument, nullptr, kOptReaders},
                                      {"offset", required_argument, nullptr, kOptOffset},
                                      {"verbose", no_argument, nullptr, 'v'},
                                      {"help", no_argument, nullptr, 'h'},
                                      {nullptr, 0, nullptr, 0}};

[[nodiscard]] inline Op parse_op(std::string_view arg) {
    if (arg == "read-write") return Op::read_write;
    if (arg == "fetch-add") return Op::fetch_add;
    if (arg == "cas") return Op::cas;
    if (arg == "window") return Op::window;
    throw UsageError("--op must be read-write, fetch-add, cas or window (got '" + std::string(arg) +
                     "')");
}

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
        case 't':
            o.tx_depth = static_cast<int>(parse_number(arg, "--tx-depth", 1, kMaxDepth));
            break;
        case 'p': o.tcp_port = static_cast<int>(parse_number(arg, "--port", 1, 65535)); break;
        case kOptBind: o.bind_address = arg; break;
        case kOptTimeout:
            o.timeout_seconds = static_cast<int>(parse_number(arg, "--timeout", 1, 3600));
            break;
        case kOptExitAfter:
            o.exit_after =
                static_cast<std::uint32_t>(parse_number(arg, "--exit-after", 1, 1'000'000));
            break;
        case kOptSafetyMs:
            o.safety_ms = static_cast<int>(parse_number(arg, "--safety-ms", 1, 60'000));
            break;
        case kOptMaxClients:
            o.max_clients = static_cast<std::uint32_t>(parse_number(arg, "--max-clients", 1, 4096));
            break;
        case kOptConnections:
            o.connections = static_cast<std::uint32_t>(parse_number(arg, "--connections", 1, 1024));
            break;
        case kOptOp: o.op = parse_op(arg); break;
        case kOptWindow:
            o.window = static_cast<std::uint32_t>(parse_number(arg, "--window", 1, 255));
            break;
        case kOptReaders:
            o.readers = static_cast<std::uint32_t>(parse_number(arg, "--readers", 1, 1023));
            break;
        case kOptOffset:
            o.offset = static_cast<std::uint64_t>(parse_number(arg, "--offset", 0, 4088));
            break;
        case 'v': o.verbose = true; break;
        case 'h': o.help = true; break;
    }
}

/// The options that only a server, or only a client, takes, and the ones that go with one --op.
inline void check_option_combinations(const Options& o) {
    const bool client_option =
        o.connections > 1 || o.window > 1 || o.readers > 0 || o.offset > 0 || o.op != Op::fetch_add;
    if (o.host.empty() && client_option) {
        throw UsageError(
            "--op, --connections, --window, --readers and --offset are client options (give a "
            "HOST)");
    }
    if (!o.host.empty() && (o.exit_after > 0 || !o.bind_address.empty())) {
        throw UsageError("--exit-after and --bind are server options (drop the HOST)");
    }
    if (o.op == Op::window && o.connections > 1) {
        throw UsageError("--op window uses one connection: drop --connections");
    }
    if (o.window > 1 && o.op != Op::fetch_add) {
        throw UsageError("--window goes with --op fetch-add");
    }
    if (o.readers > 0 && (o.op != Op::cas || o.readers >= o.connections)) {
        throw UsageError(
            "--readers goes with --op cas, and must leave a writer: below --connections");
    }
}

inline Options parse_options(int argc, char** argv) {
    Options o;
    const auto operands =
        parse_command_line(argc, argv, ":d:i:g:l:n:m:t:p:vh", kLongOptions, 1,
                           [&](int c, std::string_view arg) { apply_option(o, c, arg); });
    if (!operands.empty()) { o.host = operands[0]; }
    check_option_combinations(o);
    return o;
}
//! [options]

}  // namespace tutorial
