// The program's name, its options and their parser.
#pragma once

#include "errors.hpp"
#include "option_parser.hpp"

#include <getopt.h>
#include <infiniband/verbs.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

namespace tutorial {

constexpr const char* kProgram = "step05_endpoint";

//! [parse_options]
// A buffer larger than this is a typo, not a tutorial exercise.
constexpr long long kMaxBufferSize = 1LL << 30;
constexpr long long kMaxDepth = 1LL << 24;

// What the program does once connected: step04's ping-pong, or one-sided WRITEs or READs.
enum class Operation { pingpong, write, read };

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
    int mtu = 1024;         // as ibv_rc_pingpong
    int tcp_port = 18515;
    std::string bind_address;  // server: empty means every address
    int timeout_seconds = 10;
    std::string host;  // empty: we are the server
    long long iters = 1000;
    bool check = false;
    bool help = false;
    Operation op = Operation::pingpong;
    bool rc_pingpong_compat = false;
    bool verbose = false;
};

[[nodiscard]] inline std::string usage_text() {
    return R"(usage: step05_endpoint [options]          start a server and wait for a client
       step05_endpoint [options] HOST     connect to the server on HOST

options:
  -d, --ib-dev=DEV        use RDMA device DEV (default: the first one)
  -i, --ib-port=PORT      use port PORT of the device (default 1)
  -g, --gid-idx=INDEX     use GID INDEX (default: chosen automatically)
  -l, --sl=N              service level, 0-15 (default 0)
      --tclass=N          traffic class, 0-255: DSCP << 2 | ECN (default 0)
      --pkey-index=N      P_Key table index (default 0)
  -s, --size=BYTES        message size (default 4096)
  -n, --iters=N           number of iterations (default 1000)
  -m, --mtu=MTU           path MTU: 256, 512, 1024, 2048 or 4096 (default 1024)
  -r, --rx-depth=N        receives to keep posted (default 500)
  -t, --tx-depth=N        send queue depth (default 16)
  -p, --port=PORT         TCP port of the handshake (default 18515)
      --bind=ADDR         server: listen on ADDR only (default: any)
      --timeout=SECONDS   limit for connecting, the handshake and every wait (default 10)
      --check             ping-pong: fill each message with a pattern and verify it;
                          both sides need --check (ibv_rc_pingpong has none)
      --op=OP             pingpong (default), write (one-sided RDMA WRITE) or read
      --rc-pingpong-compat  speak ibv_rc_pingpong's handshake (ping-pong only)
  -v, --verbose           say more
  -h, --help              print this help and exit

exit status: 0 ok, 1 RDMA error, 2 usage, 3 no device, 4 no provider,
5 no such device or port, 6 peer or protocol error, 7 timeout, 130 interrupted
)";
}

enum LongOnlyOption {
    kOptBind = 256,
    kOptTimeout,
    kOptCheck,
    kOptOp,
    kOptCompat,
    kOptTclass,
    kOptPkeyIndex
};

[[nodiscard]] inline Operation parse_operation(std::string_view text) {
    for (const auto& [name, op] :
         {std::pair{"pingpong", Operation::pingpong}, std::pair{"write", Operation::write},
          std::pair{"read", Operation::read}}) {
        if (text == name) { return op; }
    }
    throw UsageError("--op must be pingpong, write or read (got '" + std::string(text) + "')");
}

// The options step05 adds to step04's: --op and --rc-pingpong-compat, each for some modes only.
inline void check_option_combinations(const Options& options) {
    if (!options.host.empty() && !options.bind_address.empty()) {
        throw UsageError("--bind is for the server; a client (HOST given) does not listen");
    }
    if (options.rc_pingpong_compat && options.op != Operation::pingpong) {
        throw UsageError(
            "--rc-pingpong-compat carries no buffer address or rkey: it works with "
            "--op pingpong only");
    }
    if (options.check && options.op != Operation::pingpong) {
        throw UsageError("--check is for --op pingpong (write and read always verify the data)");
    }
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
        case kOptCheck: options.check = true; break;
        case kOptOp: options.op = parse_operation(value); break;
        case kOptCompat: options.rc_pingpong_compat = true; break;
        case 'v': options.verbose = true; break;
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
                                          {"check", no_argument, nullptr, kOptCheck},
                                          {"op", required_argument, nullptr, kOptOp},
                                          {"rc-pingpong-compat", no_argument, nullptr, kOptCompat},
                                          {"verbose", no_argument, nullptr, 'v'},
                                          {"help", no_argument, nullptr, 'h'},
                                          {nullptr, 0, nullptr, 0}};
    Options options;
    const auto operands =
        parse_command_line(argc, argv, ":d:i:s:r:t:g:l:m:p:n:vh", long_options, 1,
                           [&](int c, std::string_view value) { apply_option(options, c, value); });
    if (!operands.empty()) { options.host = operands[0]; }
    check_option_combinations(options);
    return options;
}
//! [parse_options]

}  // namespace tutorial
