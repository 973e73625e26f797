// The program's name, its options and their parser.
#pragma once

#include "errors.hpp"
#include "option_parser.hpp"

#include <getopt.h>
#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace tutorial {

constexpr const char* kProgram = "step12_ud";

//! [parse_options]
// A buffer larger than this is a typo, not a tutorial exercise.
constexpr long long kMaxBufferSize = 1LL << 30;
constexpr long long kMaxDepth = 1LL << 24;
// ibv_ud_pingpong's Q_Key: the default, so that the two programs can talk.
constexpr std::uint32_t kDefaultQkey = 0x11111111;

struct Options {
    std::string device_name;  // empty: the first device
    int ib_port = 1;
    std::size_t size = 1024;  // ibv_ud_pingpong's real default; at most the port's active MTU
    int rx_depth = 500;
    int gid_index = -1;     // -1: by the route to the peer
    int service_level = 0;  // -l/--sl: the SL in the address handle
    int traffic_class = 0;  // --tclass: the GRH's traffic class (DSCP and ECN bits)
    int pkey_index = 0;     // --pkey-index: the P_Key table entry at INIT
    std::uint32_t qkey = kDefaultQkey;
    int tcp_port = 18515;
    std::string bind_address;  // --handshake server: empty means every address
    int timeout_seconds = 10;
    int resend_ms = 100;     // a ping without an answer for this long is sent again
    long long clients = 0;   // server: exit after this many clients said goodbye; 0: run on
    bool handshake = false;  // ibv_ud_pingpong's TCP exchange and traffic
    std::string host;        // empty: we are the server
    std::uint32_t server_qpn = 0;
    long long iters = 1000;
    long long warmup = 0;
    bool help = false;
};

[[nodiscard]] inline std::string usage_text() {
    return std::string("usage: ") + kProgram +
           " [options]             serve every client on one UD QP\n" + "       " + kProgram +
           " [options] HOST QPN    ping the server's QP number QPN on HOST\n" + "       " +
           kProgram + " --handshake [options] [HOST]\n" +
           "                                   ibv_ud_pingpong's exchange over TCP and traffic\n"
           "Ping-pong over unreliable datagrams: the client numbers each message and sends it\n"
           "again when no answer comes; prints ibv_ud_pingpong's summary lines and an\n"
           "ib_send_lat-style latency table.\n"
           "  -d, --ib-dev=NAME    use this device (default: the first one found)\n"
           "  -i, --ib-port=N      use this port, 1-255 (default 1)\n"
           "  -g, --gid-idx=N      use this GID index (default: the one that holds the local\n"
           "                       address of the route to the peer)\n"
           "  -l, --sl=N           service level, 0-15 (default 0)\n"
           "      --tclass=N       traffic class, 0-255: DSCP << 2 | ECN (default 0)\n"
           "      --pkey-index=N   P_Key table index (default 0)\n"
           "      --qkey=N         the Q_Key, 0-2147483647, decimal or 0x hex; both sides\n"
           "                       must use the same (default 0x11111111)\n"
           "  -s, --size=BYTES     message size, 1 to the port's active MTU (default 1024)\n"
           "  -n, --iters=N        measured iterations, 1-100000000 (default 1000)\n"
           "  -r, --rx-depth=N     receives posted, 1-16777216 (default 500)\n"
           "      --resend-ms=MS   client: send a ping again after MS without its answer,\n"
           "                       1-60000 (default 100)\n"
           "      --timeout=SEC    give up after SEC without a message from the peer, 1-3600\n"
           "                       (default 10)\n"
           "      --clients=N      server: exit after N clients have said goodbye (default 0:\n"
           "                       until Ctrl-C)\n"
           "      --handshake      exchange addresses over TCP as ibv_ud_pingpong does, and\n"
           "                       send as it does: no numbers, no resends\n"
           "  -p, --port=N         --handshake: TCP port (default 18515)\n"
           "      --bind=ADDR      --handshake server: listen on ADDR only\n"
           "      --warmup=N       N more iterations first, left out of the figures (default 0)\n"
           "  -h, --help           print this help and exit\n"
           "exit status: 0 ok, 1 RDMA error, 2 usage, 3 no device, 4 no provider,\n"
           "5 no such device or port, 6 peer or protocol error, 7 timeout, 130 interrupted\n";
}

enum LongOnlyOption {
    kOptBind = 256,
    kOptTimeout,
    kOptWarmup,
    kOptTclass,
    kOptPkeyIndex,
    kOptQkey,
    kOptResend,
    kOptClients,
    kOptHandshake
};

// A Q_Key or a QP number, in decimal or 0x hex, from 0 (1 for a QPN) to max.
[[nodiscard]] inline std::uint32_t parse_key(std::string_view value, const char* name,
                                             std::uint32_t min, std::uint32_t max) {
    const bool hex = value.rfind("0x", 0) == 0 || value.rfind("0X", 0) == 0;
    std::uint32_t key = 0;
    const std::string_view digits = hex ? value.substr(2) : value;
    const auto [end, ec] =
        std::from_chars(digits.data(), digits.data() + digits.size(), key, hex ? 16 : 10);
    if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size() || key < min ||
        key > max) {
        char range[64];
        std::snprintf(range, sizeof range, "from %u to %u (0x%x)", min, max, max);
        throw UsageError(std::string(name) + " must be a number " + range +
                         ", decimal or 0x hex (got '" + std::string(value) + "')");
    }
    return key;
}

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
        // The high bit is left out: a Q_Key with it set is privileged.
        case kOptQkey: options.qkey = parse_key(value, "--qkey", 0, 0x7fffffff); break;
        case 'p':
            options.tcp_port = static_cast<int>(parse_number(value, "--port", 1, 65535));
            break;
        case kOptBind: options.bind_address = value; break;
        case kOptTimeout:
            options.timeout_seconds = static_cast<int>(parse_number(value, "--timeout", 1, 3600));
            break;
        case kOptResend:
            options.resend_ms = static_cast<int>(parse_number(value, "--resend-ms", 1, 60000));
            break;
        case kOptClients: options.clients = parse_number(value, "--clients", 0, 100000000); break;
        case kOptHandshake: options.handshake = true; break;
        case 'n': options.iters = parse_number(value, "--iters", 1, 100000000); break;
        case kOptWarmup: options.warmup = parse_number(value, "--warmup", 0, 100000000); break;
        case 'h': options.help = true; break;
    }
}

// The operands: none (server), HOST QPN (client), or HOST alone with --handshake.
inline void apply_operands(Options& options, const std::vector<std::string>& operands) {
    if (operands.empty()) { return; }
    options.host = operands[0];
    if (options.handshake) {
        if (operands.size() > 1) { throw UsageError("--handshake takes HOST alone, no QPN"); }
        return;
    }
    if (operands.size() < 2) {
        throw UsageError("a client needs the server's QP number: " + std::string(kProgram) +
                         " HOST QPN (the server prints it)");
    }
    options.server_qpn = parse_key(operands[1], "QPN", 1, 0xffffff);
}

[[nodiscard]] inline Options parse_options(int argc, char** argv) {
    static const option long_options[] = {{"ib-dev", required_argument, nullptr, 'd'},
                                          {"ib-port", required_argument, nullptr, 'i'},
                                          {"size", required_argument, nullptr, 's'},
                                          {"rx-depth", required_argument, nullptr, 'r'},
                                          {"gid-idx", required_argument, nullptr, 'g'},
                                          {"sl", required_argument, nullptr, 'l'},
                                          {"tclass", required_argument, nullptr, kOptTclass},
                                          {"pkey-index", required_argument, nullptr, kOptPkeyIndex},
                                          {"qkey", required_argument, nullptr, kOptQkey},
                                          {"port", required_argument, nullptr, 'p'},
                                          {"bind", required_argument, nullptr, kOptBind},
                                          {"timeout", required_argument, nullptr, kOptTimeout},
                                          {"resend-ms", required_argument, nullptr, kOptResend},
                                          {"clients", required_argument, nullptr, kOptClients},
                                          {"handshake", no_argument, nullptr, kOptHandshake},
                                          {"iters", required_argument, nullptr, 'n'},
                                          {"warmup", required_argument, nullptr, kOptWarmup},
                                          {"help", no_argument, nullptr, 'h'},
                                          {nullptr, 0, nullptr, 0}};
    Options options;
    const auto operands =
        parse_command_line(argc, argv, ":d:i:s:r:g:l:p:n:h", long_options, 2,
                           [&](int c, std::string_view value) { apply_option(options, c, value); });
    apply_operands(options, operands);
    if (!options.bind_address.empty() && (!options.handshake || !options.host.empty())) {
        throw UsageError("--bind is for the --handshake server");
    }
    if (options.clients != 0 && !options.host.empty()) {
        throw UsageError("--clients is for the server; a client (HOST given) serves no one");
    }
    return options;
}
//! [parse_options]

}  // namespace tutorial
