// The program's name, its options and their parser.
#pragma once

#include "errors.hpp"
#include "option_parser.hpp"

#include <getopt.h>
#include <infiniband/verbs.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace tutorial {

constexpr const char* kProgram = "step04_pingpong";
constexpr const char* kLatencyLabel = "step04 busy poll";  // --latency-file's "# label: "

//! [parse_options]
// A buffer larger than this is a typo, not a tutorial exercise.
constexpr long long kMaxBufferSize = 1LL << 30;
constexpr long long kMaxDepth = 1LL << 24;

struct Options {
    std::string device_name;  // empty: the first device
    int ib_port = 1;
    std::size_t size = 4096;
    int rx_depth = 500;
    int tx_depth = 16;
    int gid_index = -1;     // -1: by the TCP connection's address
    int service_level = 0;  // -l/--sl: the SL in the address vector
    int traffic_class = 0;  // --tclass: the GRH's traffic class (DSCP and ECN bits)
    int pkey_index = 0;     // --pkey-index: the P_Key table entry at INIT
    int mtu = 1024;         // as ibv_rc_pingpong; 0 would mean the port's active MTU
    int tcp_port = 18515;
    std::string bind_address;  // server: empty means every address
    int timeout_seconds = 10;
    std::string host;  // empty: we are the server
    long long iters = 1000;
    long long warmup = 0;
    bool check = false;
    bool plain = false;        // the plain loop, not the optimised one
    std::string latency_file;  // empty: none
    bool help = false;
};

[[nodiscard]] inline std::string usage_text() {
    return std::string("usage: ") + kProgram +
           " [options]        start a server, wait for a client\n" + "       " + kProgram +
           " [options] HOST   connect to the server on HOST\n" +
           "Ping-pong over one RC QP, compatible with ibv_rc_pingpong (same handshake, traffic\n"
           "and defaults); prints its summary lines and an ib_send_lat-style latency table.\n"
           "  -d, --ib-dev=NAME    use this device (default: the first one found)\n"
           "  -i, --ib-port=N      use this port, 1-255 (default 1)\n"
           "  -g, --gid-idx=N      use this GID index (default: the one that holds the TCP\n"
           "                       connection's local address, else chosen as in step 01)\n"
           "  -l, --sl=N           service level, 0-15 (default 0)\n"
           "      --tclass=N       traffic class, 0-255: DSCP << 2 | ECN (default 0)\n"
           "      --pkey-index=N   P_Key table index (default 0)\n"
           "  -s, --size=BYTES     message size, 1-1073741824 (default 4096)\n"
           "  -n, --iters=N        measured iterations, 1-100000000 (default 1000)\n"
           "  -r, --rx-depth=N     receive queue depth, 1-16777216 (default 500)\n"
           "  -t, --tx-depth=N     send queue depth, 1-16777216 (default 16)\n"
           "  -m, --mtu=BYTES      path MTU 256, 512, 1024, 2048 or 4096 (default 1024); both\n"
           "                       sides must use the same\n"
           "  -p, --port=N         TCP port of the handshake (default 18515)\n"
           "      --bind=ADDR      server: listen on ADDR only (default: every address)\n"
           "      --timeout=SEC    limit for connect, accept, every read and every wait, 1-3600\n"
           "                       (default 10)\n"
           "      --check          fill each message with a pattern and verify it; both sides\n"
           "                       need --check (ibv_rc_pingpong has none)\n"
           "  -h, --help           print this help and exit\n"
           "  for the benchmarks under bench/:\n"
           "      --warmup=N       N more iterations first, left out of the figures; the peer\n"
           "                       must run as many in all (default 0)\n"
           "      --plain          run the plain loop: one message at a time, every send\n"
           "                       signaled, no inline data (same traffic and output)\n"
           "      --latency-file=PATH\n"
           "                       write each measured one-way latency in usec to PATH, one per\n"
           "                       line after a few '# ' header lines (for plotting)\n"
           "exit status: 0 ok, 1 RDMA error, 2 usage, 3 no device, 4 no provider,\n"
           "5 no such device or port, 6 peer or protocol error, 7 timeout, 130 interrupted\n";
}

enum LongOnlyOption {
    kOptBind = 256,
    kOptTimeout,
    kOptWarmup,
    kOptCheck,
    kOptLatency,
    kOptPlain,
    kOptTclass,
    kOptPkeyIndex
};

// One option that getopt_long returned, stored in options; a bad value is a UsageError.
inline void apply_option(Options& options, int c, std::string_view value) {
    switch (c) {
        case 'd': options.device_name = value; break;
        case 'i':
            options.ib_port = static_cast<int>(parse_number(value, "--ib-port", 1, 255));
            break;
        case 's':
            options.size =
                static_cast<std::size_t>(parse_number(value, "--size", 1, kMaxBufferSize));
            break;
        case 'r':
            options.rx_depth = static_cast<int>(parse_number(value, "--rx-depth", 1, kMaxDepth));
            break;
        case 't':
            options.tx_depth = static_cast<int>(parse_number(value, "--tx-depth", 1, kMaxDepth));
            break;
        case 'g':
            options.gid_index = static_cast<int>(parse_number(value, "--gid-idx", 0, 255));
            break;
        case 'l':
            options.service_level = static_cast<int>(parse_number(value, "--sl", 0, 15));
            break;
        case kOptTclass:
            options.traffic_class = static_cast<int>(parse_number(value, "--tclass", 0, 255));
            break;
        case kOptPkeyIndex:
            options.pkey_index = static_cast<int>(parse_number(value, "--pkey-index", 0, 65535));
            break;
        case 'm':
            options.mtu = static_cast<int>(parse_number(value, "--mtu", 256, 4096));
            if ((options.mtu & (options.mtu - 1)) != 0) {  // a power of two from 256 to 4096
                throw UsageError("--mtu must be 256, 512, 1024, 2048 or 4096 (got '" +
                                 std::string(value) + "')");
            }
            break;
        case 'p':
            options.tcp_port = static_cast<int>(parse_number(value, "--port", 1, 65535));
            break;
        case kOptBind: options.bind_address = value; break;
        case kOptTimeout:
            options.timeout_seconds = static_cast<int>(parse_number(value, "--timeout", 1, 3600));
            break;
        case 'n': options.iters = parse_number(value, "--iters", 1, 100000000); break;
        case kOptWarmup: options.warmup = parse_number(value, "--warmup", 0, 100000000); break;
        case kOptCheck: options.check = true; break;
        case kOptPlain: options.plain = true; break;
        case kOptLatency:
            if (value.empty()) { throw UsageError("--latency-file needs a path"); }
            options.latency_file = value;
            break;
        case 'h': options.help = true; break;
    }
}

[[nodiscard]] inline Options parse_options(int argc, char** argv) {
    static const option long_options[] = {{"ib-dev", required_argument, nullptr, 'd'},
                                          {"ib-port", required_argument, nullptr, 'i'},
                                          {"size", required_argument, nullptr, 's'},
                                          {"rx-depth", required_argument, nullptr, 'r'},
                                          {"tx-depth", required_argument, nullptr, 't'},
                                          {"gid-idx", required_argument, nullptr, 'g'},
                                          {"sl", required_argument, nullptr, 'l'},
                                          {"tclass", required_argument, nullptr, kOptTclass},
                                          {"pkey-index", required_argument, nullptr, kOptPkeyIndex},
                                          {"mtu", required_argument, nullptr, 'm'},
                                          {"port", required_argument, nullptr, 'p'},
                                          {"bind", required_argument, nullptr, kOptBind},
                                          {"timeout", required_argument, nullptr, kOptTimeout},
                                          {"iters", required_argument, nullptr, 'n'},
                                          {"warmup", required_argument, nullptr, kOptWarmup},
                                          {"check", no_argument, nullptr, kOptCheck},
                                          {"plain", no_argument, nullptr, kOptPlain},
                                          {"latency-file", required_argument, nullptr, kOptLatency},
                                          {"help", no_argument, nullptr, 'h'},
                                          {nullptr, 0, nullptr, 0}};
    Options options;
    const auto operands =
        parse_command_line(argc, argv, ":d:i:s:r:t:g:l:m:p:n:h", long_options, 1,
                           [&](int c, std::string_view value) { apply_option(options, c, value); });
    if (!operands.empty()) { options.host = operands[0]; }
    if (!options.host.empty() && !options.bind_address.empty()) {
        throw UsageError("--bind is for the server; a client (HOST given) does not listen");
    }
    return options;
}
//! [parse_options]

}  // namespace tutorial
