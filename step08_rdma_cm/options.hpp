// The program's name, its options and their parser: step06's, without those rdma_cm decides
// (-d, -i, -g, -m), -v, and the client's spin and rate; with the client's --note.
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

constexpr const char* kProgram = "step08_rdma_cm";

// A buffer larger than this is a typo, not a tutorial exercise.
constexpr long long kMaxBufferSize = 1LL << 30;
constexpr long long kMaxDepth = 1LL << 24;

enum class WaitMode { busy, event };

struct Options {
    std::size_t size = 4096;
    std::uint32_t iters = 1000;
    int rx_depth = 500;
    int tx_depth = 16;
    int tcp_port = 7471;  // rdma-core's examples' port
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
    bool busy_poll = false;  // poll every CQ on every pass instead of sleeping (benchmarks)
    // client
    WaitMode mode = WaitMode::busy;
    std::string note;  // a label for the server's log, in the connect request's private data
    int tos = -1;      // -T: the id's type of service (RDMA_OPTION_ID_TOS); -1: not set
    // --trace: each librdmacm call and CM event, with the QP's state, on stderr
    bool trace = false;
};

[[nodiscard]] inline std::string usage_text() {
    return R"(usage: step08_rdma_cm [options]            start a server (many clients, one thread)
       step08_rdma_cm [options] HOST       start a client and ping-pong with HOST

  -s, --size=BYTES       message size (default 4096)
  -n, --iters=N          messages per client (default 1000)
  -r, --rx-depth=N       receives kept posted (default 500)
  -t, --tx-depth=N       send queue depth (default 16)
  -p, --port=PORT        rdma_cm port (default 7471, as rdma-core's examples)
      --bind=ADDR        server: listen on ADDR (default: all)
      --timeout=S        handshake and wait timeout in seconds (default 10)
      --trace            print each librdmacm call and CM event, the QP state and the time
                         (as tcpdump -tt prints it; a call: when it began), on stderr
      --check            fill every message with a pattern and verify it (both sides)
  -h, --help             print this help
  server:
      --exit-after=N     exit after N connections ended (default: run until SIGINT/SIGTERM)
      --safety-ms=MS     epoll_wait timeout; the safety-net CQ poll runs then (default 100)
      --busy-poll        never sleep: poll every client's CQ on every pass (one core at 100%)
  client:
  -e, --events           sleep on completion events instead of busy polling
      --note=TEXT        a label for the server's log, sent in the connection's private data
  -T, --tos=N            the IP TOS byte, DSCP << 2 | ECN, 0-255, as perftest's -T; the server's
                         packets take the client's (default: rdma_cm's, 0 unless configured)
)";
}

enum LongOnlyOption : int {
    kOptBind = 256,
    kOptTimeout,
    kOptCheck,
    kOptExitAfter,
    kOptSafetyMs,
    kOptBusyPoll,
    kOptNote,
    kOptTrace
};

inline const option kLongOptions[] = {{"size", required_argument, nullptr, 's'},
                                      {"iters", required_argument, nullptr, 'n'},
                                      {"rx-depth", required_argument, nullptr, 'r'},
                                      {"tx-depth", required_argument, nullptr, 't'},
                                      {"port", required_argument, nullptr, 'p'},
                                      {"bind", required_argument, nullptr, kOptBind},
                                      {"timeout", required_argument, nullptr, kOptTimeout},
                                      {"check", no_argument, nullptr, kOptCheck},
                                      {"trace", no_argument, nullptr, kOptTrace},
                                      {"exit-after", required_argument, nullptr, kOptExitAfter},
                                      {"safety-ms", required_argument, nullptr, kOptSafetyMs},
                                      {"busy-poll", no_argument, nullptr, kOptBusyPoll},
                                      {"events", no_argument, nullptr, 'e'},
                                      {"note", required_argument, nullptr, kOptNote},
                                      {"tos", required_argument, nullptr, 'T'},
                                      {"help", no_argument, nullptr, 'h'},
                                      {nullptr, 0, nullptr, 0}};

// One option that getopt_long returned, stored in o; a bad value is a UsageError.
inline void apply_option(Options& o, int c, std::string_view arg) {
    switch (c) {
        case 's':
            o.size = static_cast<std::size_t>(parse_number(arg, "--size", 1, kMaxBufferSize));
            break;
        case 'n':
            o.iters = static_cast<std::uint32_t>(parse_number(arg, "--iters", 1, 100'000'000));
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
        case kOptTrace: o.trace = true; break;
        case kOptExitAfter:
            o.exit_after =
                static_cast<std::uint32_t>(parse_number(arg, "--exit-after", 1, 1'000'000));
            break;
        case kOptSafetyMs:
            o.safety_ms = static_cast<int>(parse_number(arg, "--safety-ms", 1, 60'000));
            break;
        case kOptBusyPoll: o.busy_poll = true; break;
        case 'e': o.mode = WaitMode::event; break;
        case kOptNote:  // it travels in PrivateData::note, 28 bytes with the final '\0'
            if (arg.size() > 27) {
                throw UsageError("--note of " + std::to_string(arg.size()) +
                                 " characters does not fit the connect request's private data: "
                                 "at most 27");
            }
            o.note = arg;
            break;
        case 'T': o.tos = static_cast<int>(parse_number(arg, "--tos", 0, 255)); break;
        case 'h': o.help = true; break;
    }
}

/// The options that only a server, or only a client, takes.
inline void check_option_combinations(Options& o) {
    if (o.host.empty() && (o.mode != WaitMode::busy || !o.note.empty() || o.tos >= 0)) {
        throw UsageError("-e, --note and --tos are client options (give a HOST)");
    }
    if (!o.host.empty() && (o.exit_after > 0 || !o.bind_address.empty() || o.busy_poll)) {
        throw UsageError("--exit-after, --bind and --busy-poll are server options (drop the HOST)");
    }
}

inline Options parse_options(int argc, char** argv) {
    Options o;
    const auto operands =
        parse_command_line(argc, argv, ":s:n:r:t:p:T:eh", kLongOptions, 1,
                           [&](int c, std::string_view arg) { apply_option(o, c, arg); });
    if (!operands.empty()) { o.host = operands[0]; }
    check_option_combinations(o);
    return o;
}

}  // namespace tutorial
