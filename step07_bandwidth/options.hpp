// The program's name, its options (perftest's letters where they overlap) and their parser.
#pragma once

#include "errors.hpp"
#include "option_parser.hpp"

#include <getopt.h>
#include <infiniband/verbs.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace tutorial {

constexpr const char* kProgram = "step07_bandwidth";

//! [parse_options]
// A buffer larger than this is a typo, not a tutorial exercise.
constexpr long long kMaxBufferSize = 1LL << 30;
constexpr long long kMaxDepth = 1LL << 24;
constexpr std::size_t kMaxSweepSize = std::size_t{8} << 20;  // -a: 2 B .. 8 MiB, as perftest

// What the client posts: one-sided RDMA WRITEs, or SENDs into the server's receives.
enum class Operation { write, send };

struct Options {
    std::string device_name;  // empty: the first device
    int ib_port = 1;
    std::size_t size = 65536;
    bool size_given = false;  // -a: -s, when given, is the sweep's largest size
    long long iters = 5000;   // per QP, as perftest
    int duration = 0;         // -D: seconds; 0: run -n iterations
    int tx_depth = 128;       // -t: outstanding WRs per QP
    int signal_every = 1;     // -Q
    int post_list = 1;        // -l
    int qps = 1;              // -q
    int inline_size = 0;      // -I: 0 = off
    bool all_sizes = false;   // -a
    int gid_index = -1;       // -1: by the TCP connection's address
    int service_level = 0;    // -S/--sl: the SL in the address vector
    int traffic_class = 0;    // --tclass: the GRH's traffic class (DSCP and ECN bits)
    int pkey_index = 0;       // --pkey-index: the P_Key table entry at INIT
    int mtu = 0;              // 0: the port's active MTU, as perftest
    int tcp_port = 18515;
    std::string bind_address;  // server: empty means every address
    int timeout_seconds = 10;
    std::string host;  // empty: we are the server (the target)
    bool help = false;
    Operation op = Operation::write;
};

[[nodiscard]] inline std::string usage_text() {
    return R"(usage: step07_bandwidth [options]          start the target (server) and wait
       step07_bandwidth [options] HOST     write to the target on HOST and print the table

options:
  -d, --ib-dev=DEV        use RDMA device DEV (default: the first one)
  -i, --ib-port=PORT      use port PORT of the device (default 1)
  -g, --gid-idx=INDEX     use GID INDEX (default: chosen automatically)
  -S, --sl=N              service level, 0-15 (default 0)
      --tclass=N          traffic class, 0-255: DSCP << 2 | ECN (default 0)
      --pkey-index=N      P_Key table index (default 0)
  -s, --size=BYTES        message size (default 65536); with -a, the largest size
  -n, --iters=N           messages per QP (default 5000)
  -D, --duration=SECONDS  run for SECONDS instead: the count is measured, not agreed
  -t, --tx-depth=N        outstanding work requests per QP, the window (default 128)
  -Q, --cq-mod=N          signal every N-th work request and the last (default 1)
  -l, --post-list=N       chain N work requests in one ibv_post_send (default 1)
  -q, --qp=N              QPs, posted round-robin (default 1)
  -I, --inline-size=BYTES send messages up to BYTES inline (default 0: off)
  -a, --all               sizes 2 B .. 8 MiB in powers of two (up to -s when given)
      --op=OP             write (RDMA WRITE, default) or send (SEND into posted receives)
  -m, --mtu=MTU           path MTU: 256, 512, 1024, 2048 or 4096 (default: the port's)
  -p, --port=PORT         TCP port of the handshake (default 18515)
      --bind=ADDR         server: listen on ADDR only (default: any)
      --timeout=SECONDS   limit for connecting, the handshake and every wait (default 10)
  -h, --help              print this help and exit
Both sides take the same -s, -n, -D, -t, -q, -a and --op.

exit status: 0 ok, 1 RDMA error, 2 usage, 3 no device, 4 no provider,
5 no such device or port, 6 peer or protocol error, 7 timeout, 130 interrupted
)";
}

enum LongOnlyOption { kOptBind = 256, kOptTimeout, kOptOp, kOptTclass, kOptPkeyIndex };

[[nodiscard]] inline Operation parse_operation(std::string_view text) {
    if (text == "write") return Operation::write;
    if (text == "send") return Operation::send;
    throw UsageError("--op must be write or send (got '" + std::string(text) + "')");
}

// A window the program cannot keep: refused before anything is created.
inline void check_option_combinations(const Options& options) {
    if (!options.host.empty() && !options.bind_address.empty()) {
        throw UsageError("--bind is for the server; a client (HOST given) does not listen");
    }
    if (options.signal_every > options.tx_depth) {
        throw UsageError("-Q " + std::to_string(options.signal_every) + " is larger than -t " +
                         std::to_string(options.tx_depth) +
                         ": the send queue could fill with no signaled work request to retire it");
    }
    if (options.post_list > options.tx_depth) {
        throw UsageError("-l " + std::to_string(options.post_list) + " is larger than -t " +
                         std::to_string(options.tx_depth) +
                         ": a post list must fit in the send queue");
    }
    if (options.all_sizes && options.duration > 0) {
        throw UsageError("-a and -D do not go together: a sweep runs -n messages per size");
    }
}

// One option that getopt_long returned, stored in options; a bad value is a UsageError.
inline void apply_option(Options& options, int c, std::string_view value) {
    const auto number = [&](const char* name, long long low, long long high) {
        return static_cast<int>(parse_number(value, name, low, high));
    };
    switch (c) {
        case 'd': options.device_name = value; break;
        case 'i': options.ib_port = number("--ib-port", 1, 255); break;
        case 's':
            options.size =
                static_cast<std::size_t>(parse_number(value, "--size", 1, kMaxBufferSize));
            options.size_given = true;
            break;
        case 'n': options.iters = parse_number(value, "--iters", 1, 100000000); break;
        case 'D': options.duration = number("--duration", 1, 3600); break;
        case 't': options.tx_depth = number("--tx-depth", 1, kMaxDepth); break;
        case 'Q': options.signal_every = number("--cq-mod", 1, kMaxDepth); break;
        case 'l': options.post_list = number("--post-list", 1, kMaxDepth); break;
        case 'q': options.qps = number("--qp", 1, 64); break;
        case 'I': options.inline_size = number("--inline-size", 0, 4096); break;
        case 'a': options.all_sizes = true; break;
        case 'g': options.gid_index = number("--gid-idx", 0, 255); break;
        case 'S': options.service_level = number("--sl", 0, 15); break;
        case kOptTclass: options.traffic_class = number("--tclass", 0, 255); break;
        case kOptPkeyIndex: options.pkey_index = number("--pkey-index", 0, 65535); break;
        case 'm':
            options.mtu = number("--mtu", 256, 4096);
            if ((options.mtu & (options.mtu - 1)) != 0) {  // a power of two from 256 to 4096
                throw UsageError("--mtu must be 256, 512, 1024, 2048 or 4096 (got '" +
                                 std::string(value) + "')");
            }
            break;
        case 'p': options.tcp_port = number("--port", 1, 65535); break;
        case kOptBind: options.bind_address = value; break;
        case kOptTimeout: options.timeout_seconds = number("--timeout", 1, 3600); break;
        case kOptOp: options.op = parse_operation(value); break;
        case 'h': options.help = true; break;
    }
}

[[nodiscard]] inline Options parse_options(int argc, char** argv) {
    static const option long_options[] = {{"ib-dev", required_argument, nullptr, 'd'},
                                          {"ib-port", required_argument, nullptr, 'i'},
                                          {"gid-idx", required_argument, nullptr, 'g'},
                                          {"sl", required_argument, nullptr, 'S'},
                                          {"tclass", required_argument, nullptr, kOptTclass},
                                          {"pkey-index", required_argument, nullptr, kOptPkeyIndex},
                                          {"size", required_argument, nullptr, 's'},
                                          {"iters", required_argument, nullptr, 'n'},
                                          {"duration", required_argument, nullptr, 'D'},
                                          {"tx-depth", required_argument, nullptr, 't'},
                                          {"cq-mod", required_argument, nullptr, 'Q'},
                                          {"post-list", required_argument, nullptr, 'l'},
                                          {"qp", required_argument, nullptr, 'q'},
                                          {"inline-size", required_argument, nullptr, 'I'},
                                          {"all", no_argument, nullptr, 'a'},
                                          {"op", required_argument, nullptr, kOptOp},
                                          {"mtu", required_argument, nullptr, 'm'},
                                          {"port", required_argument, nullptr, 'p'},
                                          {"bind", required_argument, nullptr, kOptBind},
                                          {"timeout", required_argument, nullptr, kOptTimeout},
                                          {"help", no_argument, nullptr, 'h'},
                                          {nullptr, 0, nullptr, 0}};
    Options options;
    const auto operands =
        parse_command_line(argc, argv, ":d:i:g:S:s:n:D:t:Q:l:q:I:am:p:h", long_options, 1,
                           [&](int c, std::string_view value) { apply_option(options, c, value); });
    if (!operands.empty()) { options.host = operands[0]; }
    check_option_combinations(options);
    return options;
}
//! [parse_options]

}  // namespace tutorial
