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

constexpr const char* kProgram = "step03_connect";

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
    int mtu = 0;            // 0: the port's active MTU
    int tcp_port = 18515;
    std::string bind_address;  // server: empty means every address
    int timeout_seconds = 10;
    std::string host;  // empty: we are the server
    bool help = false;
};

[[nodiscard]] inline std::string usage_text() {
    return std::string("usage: ") + kProgram +
           " [options]        start a server, wait for a client\n" + "       " + kProgram +
           " [options] HOST   connect to the server on HOST\n" +
           "Connects one RC QP to a peer's over a TCP handshake in ibv_rc_pingpong's format,\n"
           "walks it RESET->INIT->RTR->RTS, and exchanges one \"hello\" each way.\n"
           "  -d, --ib-dev=NAME    use this device (default: the first one found)\n"
           "  -i, --ib-port=N      use this port, 1-255 (default 1)\n"
           "  -g, --gid-idx=N      use this GID index (default: the one that holds the TCP\n"
           "                       connection's local address, else chosen as in step 01)\n"
           "  -l, --sl=N           service level, 0-15 (default 0)\n"
           "      --tclass=N       traffic class, 0-255: DSCP << 2 | ECN (default 0)\n"
           "      --pkey-index=N   P_Key table index (default 0)\n"
           "  -s, --size=BYTES     buffer and MR size, 64-1073741824 (default 4096)\n"
           "  -r, --rx-depth=N     receive queue depth, 1-16777216 (default 500)\n"
           "  -t, --tx-depth=N     send queue depth, 1-16777216 (default 16)\n"
           "  -m, --mtu=BYTES      path MTU 256, 512, 1024, 2048 or 4096 (default: the port's\n"
           "                       active MTU); both sides must use the same\n"
           "  -p, --port=N         TCP port of the handshake (default 18515)\n"
           "      --bind=ADDR      server: listen on ADDR only (default: every address)\n"
           "      --timeout=SEC    limit for connect, accept, every read and every wait, 1-3600\n"
           "                       (default 10)\n"
           "  -h, --help           print this help and exit\n"
           "exit status: 0 ok, 1 RDMA error, 2 usage, 3 no device, 4 no provider,\n"
           "5 no such device or port, 6 peer or protocol error, 7 timeout, 130 interrupted\n";
}

enum LongOnlyOption { kOptBind = 256, kOptTimeout, kOptTclass, kOptPkeyIndex };

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
                                          {"help", no_argument, nullptr, 'h'},
                                          {nullptr, 0, nullptr, 0}};
    Options options;
    const auto operands =
        parse_command_line(argc, argv, ":d:i:s:r:t:g:l:m:p:h", long_options, 1,
                           [&](int c, std::string_view value) { apply_option(options, c, value); });
    if (!operands.empty()) { options.host = operands[0]; }
    if (!options.host.empty() && !options.bind_address.empty()) {
        throw UsageError("--bind is for the server; a client (HOST given) does not listen");
    }
    if (options.size < 64) {
        throw UsageError("--size must be at least 64 here: the hello messages share the buffer");
    }
    return options;
}
//! [parse_options]

}  // namespace tutorial
