// Step 05: the ping-pong rewritten on RDMAEndpoint, plus one-sided RDMA WRITE and READ (--op).
#include <arpa/inet.h>
#include <getopt.h>
#include <unistd.h>

#include <sys/resource.h>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "rdma_endpoint.hpp"

namespace tutorial {

class UsageError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

constexpr const char* kProgram = "step05_endpoint";

enum class Operation { pingpong, write, read };

struct Options {
    std::string device;
    int port = 1;
    int gid_index = -1;
    std::size_t size = 4096;
    int iters = 1000;
    int warmup = 0;
    ibv_mtu mtu = IBV_MTU_1024;
    std::uint32_t rx_depth = 500;
    std::uint32_t tx_depth = 16;
    std::uint16_t tcp_port = 18515;
    std::string bind_address;
    int timeout_seconds = 10;
    Operation op = Operation::pingpong;
    bool rc_pingpong_compat = false;
    bool check = false;
    std::string latency_file;  // empty: none
    bool verbose = false;
    bool help = false;
    std::string host;  // empty: server
};

const char* usage_text() {
    return "usage: step05_endpoint [options]          start a server and wait for a client\n"
           "       step05_endpoint [options] HOST     connect to the server on HOST\n"
           "\n"
           "options:\n"
           "  -d, --ib-dev=DEV        use RDMA device DEV (default: the first one)\n"
           "  -i, --ib-port=PORT      use port PORT of the device (default 1)\n"
           "  -g, --gid-idx=INDEX     use GID INDEX (default: chosen automatically)\n"
           "  -s, --size=BYTES        message size (default 4096)\n"
           "  -n, --iters=N           number of iterations (default 1000)\n"
           "  -m, --mtu=MTU           path MTU: 256, 512, 1024, 2048 or 4096 (default 1024)\n"
           "  -r, --rx-depth=N        receives to keep posted (default 500)\n"
           "  -t, --tx-depth=N        send queue depth (default 16)\n"
           "  -p, --port=PORT         TCP port of the handshake (default 18515)\n"
           "      --bind=ADDR         server: listen on ADDR only (default: any)\n"
           "      --timeout=SECONDS   limit for connecting, the handshake and every wait (default "
           "10)\n"
           "      --warmup=N          N more iterations first, left out of the figures (default "
           "0)\n"
           "      --check             ping-pong: fill each message with a pattern and verify it;\n"
           "                          both sides need --check (ibv_rc_pingpong has none)\n"
           "      --latency-file=PATH ping-pong: write each measured one-way latency in usec to\n"
           "                          PATH, one per line after a few '# ' header lines (for\n"
           "                          plotting)\n"
           "      --op=OP             pingpong (default), write (one-sided RDMA WRITE) or read\n"
           "      --rc-pingpong-compat  speak ibv_rc_pingpong's handshake (ping-pong only)\n"
           "  -v, --verbose           say more\n"
           "  -h, --help              print this help and exit\n"
           "\n"
           "exit status: 0 ok, 1 RDMA error, 2 usage, 3 no device, 4 no provider,\n"
           "5 no such device or port, 6 peer or protocol error, 7 timeout, 130 interrupted\n";
}

// Parses the whole of text as a number in [min, max], or throws UsageError naming the option.
template <typename T>
T parse_number(const char* text, const char* option, long long min, long long max) {
    long long value = 0;
    const char* end = text + std::strlen(text);
    const auto [ptr, ec] = std::from_chars(text, end, value);
    if (ec != std::errc() || ptr != end || text == end || value < min || value > max) {
        throw UsageError(std::string("invalid value '") + text + "' for " + option +
                         " (expected a whole number from " + std::to_string(min) + " to " +
                         std::to_string(max) + ")");
    }
    return static_cast<T>(value);
}

ibv_mtu parse_mtu(const char* text) {
    switch (parse_number<int>(text, "--mtu", 256, 4096)) {
        case 256:
            return IBV_MTU_256;
        case 512:
            return IBV_MTU_512;
        case 1024:
            return IBV_MTU_1024;
        case 2048:
            return IBV_MTU_2048;
        case 4096:
            return IBV_MTU_4096;
        default:
            throw UsageError(std::string("invalid value '") + text +
                             "' for --mtu (expected 256, 512, 1024, 2048 or 4096)");
    }
}

//! [options]
Options parse_options(int argc, char** argv) {
    enum { kBind = 1000, kTimeout, kWarmup, kOp, kCompat, kCheck, kLatency };
    static const option long_options[] = {{"ib-dev", required_argument, nullptr, 'd'},
                                          {"ib-port", required_argument, nullptr, 'i'},
                                          {"gid-idx", required_argument, nullptr, 'g'},
                                          {"size", required_argument, nullptr, 's'},
                                          {"iters", required_argument, nullptr, 'n'},
                                          {"mtu", required_argument, nullptr, 'm'},
                                          {"rx-depth", required_argument, nullptr, 'r'},
                                          {"tx-depth", required_argument, nullptr, 't'},
                                          {"port", required_argument, nullptr, 'p'},
                                          {"bind", required_argument, nullptr, kBind},
                                          {"timeout", required_argument, nullptr, kTimeout},
                                          {"warmup", required_argument, nullptr, kWarmup},
                                          {"op", required_argument, nullptr, kOp},
                                          {"rc-pingpong-compat", no_argument, nullptr, kCompat},
                                          {"check", no_argument, nullptr, kCheck},
                                          {"latency-file", required_argument, nullptr, kLatency},
                                          {"verbose", no_argument, nullptr, 'v'},
                                          {"help", no_argument, nullptr, 'h'},
                                          {nullptr, 0, nullptr, 0}};
    Options options;
    optind = 0;  // getopt_long starts afresh (the unit tests parse many command lines)
    opterr = 0;
    for (;;) {
        const int c = getopt_long(argc, argv, ":d:i:g:s:n:m:r:t:p:vh", long_options, nullptr);
        if (c == -1)
            break;
        switch (c) {
            case 'd':
                options.device = optarg;
                break;
            case 'i':
                options.port = parse_number<int>(optarg, "--ib-port", 1, 255);
                break;
            case 'g':
                options.gid_index = parse_number<int>(optarg, "--gid-idx", 0, 255);
                break;
            case 's':
                options.size = parse_number<std::size_t>(optarg, "--size", 1, 1 << 30);
                break;
            case 'n':
                options.iters = parse_number<int>(optarg, "--iters", 1, 100000000);
                break;
            case 'm':
                options.mtu = parse_mtu(optarg);
                break;
            case 'r':
                options.rx_depth = parse_number<std::uint32_t>(optarg, "--rx-depth", 2, 1 << 24);
                break;
            case 't':
                options.tx_depth = parse_number<std::uint32_t>(optarg, "--tx-depth", 1, 1 << 24);
                break;
            case 'p':
                options.tcp_port = parse_number<std::uint16_t>(optarg, "--port", 1, 65535);
                break;
            case kBind:
                options.bind_address = optarg;
                break;
            case kTimeout:
                options.timeout_seconds = parse_number<int>(optarg, "--timeout", 1, 3600);
                break;
            case kWarmup:
                options.warmup = parse_number<int>(optarg, "--warmup", 0, 1000000);
                break;
            case kOp:
                if (std::strcmp(optarg, "pingpong") == 0) {
                    options.op = Operation::pingpong;
                } else if (std::strcmp(optarg, "write") == 0) {
                    options.op = Operation::write;
                } else if (std::strcmp(optarg, "read") == 0) {
                    options.op = Operation::read;
                } else {
                    throw UsageError(std::string("invalid value '") + optarg +
                                     "' for --op (expected pingpong, write or read)");
                }
                break;
            case kCompat:
                options.rc_pingpong_compat = true;
                break;
            case kCheck:
                options.check = true;
                break;
            case kLatency:
                if (*optarg == '\0')
                    throw UsageError("--latency-file needs a path");
                options.latency_file = optarg;
                break;
            case 'v':
                options.verbose = true;
                break;
            case 'h':
                options.help = true;
                break;
            case ':':
                throw UsageError(std::string("option '") + argv[optind - 1] + "' needs a value");
            default:  // optopt: the short option, or 0 for a long one (whose argv is then done)
                throw UsageError(optopt > 0 && optopt < 0x80
                                     ? std::string("unknown option '-") +
                                           static_cast<char>(optopt) + "'"
                                     : std::string("unknown option '") + argv[optind - 1] + "'");
        }
    }
    if (optind < argc)
        options.host = argv[optind++];
    if (optind < argc)
        throw UsageError(std::string("unexpected argument '") + argv[optind] + "'");
    if (!options.host.empty() && !options.bind_address.empty())
        throw UsageError("--bind is for the server; a client (HOST given) does not listen");
    if (options.rc_pingpong_compat && options.op != Operation::pingpong) {
        throw UsageError(
            "--rc-pingpong-compat carries no buffer address or rkey: it works with "
            "--op pingpong only");
    }
    if (options.check && options.op != Operation::pingpong)
        throw UsageError("--check is for --op pingpong (write and read always verify the data)");
    if (!options.latency_file.empty() && options.op != Operation::pingpong)
        throw UsageError("--latency-file is for --op pingpong");
    return options;
}
//! [options]

// ------------------------------------------------------------------ statistics

//! [stats]
// Copied from step04: perftest's latency figures (ib_send_lat, print_report_lat), reproduced:
//  - one sample per iteration: the time between two consecutive sends, a full round trip;
//  - sorted, then the 2 largest samples are dropped (LAT_MEASURE_TAIL) from the count m;
//  - every figure is halved (a send latency test reports one way: rtt_factor 2);
//  - t_typical is the median of the first m samples;
//  - t_max is sample[m], 99% is sample[ceil(m * 0.99)], 99.9% is sample[ceil(m * 0.999)]:
//    indexes one past the nearest-rank position, as perftest does;
//  - t_stdev is the population standard deviation of the first m samples.
struct LatencyStats {
    std::size_t samples = 0;  // m
    double t_min = 0, t_max = 0, t_typical = 0, t_avg = 0, t_stdev = 0, p99 = 0, p999 = 0;
};

inline constexpr std::size_t kLatencyMeasureTail = 2;

[[nodiscard]] LatencyStats compute_latency_stats(std::vector<double> round_trips_usec) {
    LatencyStats stats;
    if (round_trips_usec.empty()) {
        return stats;
    }
    std::sort(round_trips_usec.begin(), round_trips_usec.end());
    const std::size_t count = round_trips_usec.size();
    const std::size_t m = count > kLatencyMeasureTail ? count - kLatencyMeasureTail : count;
    const auto at = [&](std::size_t index) {
        return round_trips_usec[std::min(index, count - 1)] / 2;  // halved: one way
    };
    stats.samples = m;
    stats.t_min = at(0);
    stats.t_max = at(m);
    stats.t_typical = m % 2 == 0 ? (at(m / 2) + at(m / 2 - 1)) / 2 : at(m / 2);
    double sum = 0;
    for (std::size_t i = 0; i < m; ++i) {
        sum += at(i);
    }
    stats.t_avg = sum / static_cast<double>(m);
    double squares = 0;
    for (std::size_t i = 0; i < m; ++i) {
        squares += (at(i) - stats.t_avg) * (at(i) - stats.t_avg);
    }
    stats.t_stdev = std::sqrt(squares / static_cast<double>(m));
    stats.p99 = at(static_cast<std::size_t>(std::ceil(static_cast<double>(m) * 0.99)));
    stats.p999 = at(static_cast<std::size_t>(std::ceil(static_cast<double>(m) * 0.999)));
    return stats;
}

// ibv_rc_pingpong's two summary lines: both directions' bytes, and the full round trip per iter.
[[nodiscard]] std::string rc_pingpong_summary(std::size_t size, long long iters, double usec) {
    const long long bytes = static_cast<long long>(size) * iters * 2;
    char text[160];
    std::snprintf(text, sizeof text,
                  "%lld bytes in %.2f seconds = %.2f Mbit/sec\n"
                  "%lld iters in %.2f seconds = %.2f usec/iter\n",
                  bytes, usec / 1000000., static_cast<double>(bytes) * 8. / usec, iters,
                  usec / 1000000., usec / static_cast<double>(iters));
    return text;
}

inline constexpr char kResultLine[] =
    "---------------------------------------------------------------------------------------\n";

// The table ib_send_lat prints, with its header and row formats.
[[nodiscard]] std::string latency_table(std::size_t size, long long iters,
                                        const LatencyStats& stats) {
    char row[256];
    std::snprintf(row, sizeof row,
                  " %-7zu %lld          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     "
                  "\t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
                  size, iters, stats.t_min, stats.t_max, stats.t_typical, stats.t_avg,
                  stats.t_stdev, stats.p99, stats.p999);
    return std::string(kResultLine) +
           " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
           "t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n" +
           row + kResultLine;
}
//! [stats]

//! [latency-file]
// Copied from step04: --latency-file, the samples behind the table, for plotting. A few "# " lines
// say what they are; then one line per sample, in the order they were taken: one way (round
// trip / 2) in usec. A sample is the time from one send to the next, so -n iterations give -n - 1
// lines, the count that "# iterations" gives.
[[nodiscard]] std::string latency_file_text(std::size_t size,
                                            std::span<const double> round_trips_usec) {
    std::string text = std::string("# label: step05 busy poll\n# program: ") + kProgram +
                       "\n# size: " + std::to_string(size) +
                       "\n# iterations: " + std::to_string(round_trips_usec.size()) +
                       "\n# unit: usec one-way (round trip / 2)\n";
    char line[32];
    for (const double round_trip : round_trips_usec) {
        std::snprintf(line, sizeof line, "%.3f\n", round_trip / 2);
        text += line;
    }
    return text;
}

struct FileCloser {
    void operator()(std::FILE* file) const noexcept { std::fclose(file); }
};
using OutputFile = std::unique_ptr<std::FILE, FileCloser>;

// Opened before any RDMA resource exists: a path that cannot be written is a usage error, found
// before the run rather than lost after it.
[[nodiscard]] OutputFile open_latency_file(const std::string& path) {
    if (path.empty())
        return nullptr;
    OutputFile file(std::fopen(path.c_str(), "w"));
    if (!file)
        throw UsageError("cannot open --latency-file '" + path + "': " + std::strerror(errno));
    return file;
}

void write_latency_file(std::FILE* file, const std::string& path, const std::string& text) {
    if (std::fputs(text.c_str(), file) == EOF || std::fflush(file) != 0)
        throw std::system_error(errno, std::generic_category(), "writing --latency-file " + path);
}
//! [latency-file]

// ------------------------------------------------------------------ payload patterns

std::uint8_t pattern_byte(std::uint64_t seed, std::size_t i) {
    return static_cast<std::uint8_t>((i * 131 + seed * 7 + (i >> 8) + 1) & 0xff);
}

void fill_pattern(std::span<std::byte> buffer, std::uint64_t seed) {
    for (std::size_t i = 0; i < buffer.size(); ++i)
        buffer[i] = std::byte{pattern_byte(seed, i)};
}

// The offset of the first byte that breaks the pattern, or nothing.
std::optional<std::size_t> find_pattern_mismatch(std::span<const std::byte> buffer,
                                                 std::uint64_t seed) {
    for (std::size_t i = 0; i < buffer.size(); ++i) {
        if (std::to_integer<unsigned>(buffer[i]) != pattern_byte(seed, i))
            return i;
    }
    return std::nullopt;
}

// Throws TutorialError naming the first byte that differs.
void verify_pattern(std::span<const std::byte> buffer, std::uint64_t seed, const char* what) {
    if (const auto i = find_pattern_mismatch(buffer, seed)) {
        char text[160];
        std::snprintf(text, sizeof text, "%s: byte %zu is 0x%02x, expected 0x%02x", what, *i,
                      std::to_integer<unsigned>(buffer[*i]),
                      static_cast<unsigned>(pattern_byte(seed, *i)));
        throw TutorialError(kExitRdma, text);
    }
}

// --check in the ping-pong: message i of the client and message i of the server carry
// different patterns, so a peer that only echoes what it received does not pass.
std::uint64_t pingpong_seed(long long iteration, bool from_client) {
    return static_cast<std::uint64_t>(iteration) * 2 + (from_client ? 0 : 1);
}

void check_pingpong_message(std::span<const std::byte> message, long long iteration,
                            bool from_client) {
    if (const auto i = find_pattern_mismatch(message, pingpong_seed(iteration, from_client))) {
        throw TutorialError(kExitPeer,
                            "--check: message " + std::to_string(iteration) + " is wrong at byte " +
                                std::to_string(*i),
                            "start both sides with --check (ibv_rc_pingpong has none)");
    }
}

// ------------------------------------------------------------------ running

volatile std::sig_atomic_t g_stop = 0;

extern "C" void on_stop_signal(int) {
    g_stop = 1;
}

void print_address(const char* label, const PeerInfo& info) {
    std::printf("  %s LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", label, info.lid, info.qpn,
                info.psn, gid_to_string(info.gid).c_str());
}

constexpr std::uint64_t kRecvWrId = ~std::uint64_t{0}, kSendWrId = ~std::uint64_t{0} - 1,
                        kProbeWrId = ~std::uint64_t{0} - 2;

//! [probe]
// Nothing for --timeout seconds. RC has no "peer gone" event: a side that only waits for a
// receive would wait for ever. So, as step04, probe with one more send: a dead peer's QP does not
// acknowledge it, and after the retries it fails with IBV_WC_RETRY_EXC_ERR (a
// WorkCompletionError); an acknowledged probe means the peer's program is alive but stuck.
[[noreturn]] void probe_idle_peer(RDMAEndpoint& endpoint, const std::string& waited) {
    std::fprintf(stderr, "%s: %s; probing its QP\n", kProgram, waited.c_str());
    try {
        endpoint.post_send(kProbeWrId, 0, 0);
        (void)endpoint.poll_completion(kProbeWrId, std::chrono::seconds(5));
    } catch (const WorkCompletionError&) {
        throw;  // its status says what happened to the peer
    } catch (const TutorialError& e) {
        if (e.exit_code() != kExitTimeout)
            throw;  // interrupted
        throw TutorialError(kExitTimeout, waited, "is the peer still running?");
    } catch (const std::system_error&) {  // the send queue is full: no room for a probe
        throw TutorialError(kExitTimeout, waited, "is the peer still running?");
    }
    throw TutorialError(kExitTimeout, waited,
                        "its QP acknowledged a probe, so the peer's program is alive but stuck "
                        "(or stopped)");
}
//! [probe]

//! [ended-early]
// ibv_rc_pingpong's handshake cannot carry -n (handshake v3 compares it at connect time). A peer
// started with a smaller -n ends its session and destroys its QP: this side's next send is then
// never acknowledged (IBV_WC_RETRY_EXC_ERR). Name that, rather than blame a dead peer. Called in a
// catch block: anything else is rethrown as it is.
[[noreturn]] void rethrow_ended_early(const WorkCompletionError& e, const Options& options,
                                      long long received) {
    if (options.rc_pingpong_compat && e.status() == IBV_WC_RETRY_EXC_ERR && received > 0) {
        const bool client = !options.host.empty();
        throw TutorialError(kExitPeer,
                            std::string("the ") + (client ? "server" : "client") +
                                " ended the session after " + std::to_string(received) +
                                " messages; both sides must use the same -n",
                            std::string("this ") + (client ? "client" : "server") + " uses -n " +
                                std::to_string(options.iters) +
                                "; ibv_rc_pingpong's handshake cannot carry -n to compare it");
    }
    throw;
}
//! [ended-early]

//! [pingpong]
// step04's traffic, on the class: the client sends first; each side sends its next message as
// soon as the peer's arrives. Sends are signaled every tx_depth / 2 (and the last one), so one
// completion frees the queue slots of the unsignaled sends before it; wr_id = send index.
void run_pingpong(RDMAEndpoint& endpoint, const Options& options, std::FILE* latency_file) {
    using Clock = std::chrono::steady_clock;
    const bool client = !options.host.empty();
    const long long total = options.iters + options.warmup;
    const long long signal_every = std::max<long long>(1, options.tx_depth / 2);
    long long sent = 0, received = 0, completed_sends = 0, unsignaled = 0;
    std::uint32_t posted_receives = options.rx_depth;
    // As step04: receives are re-posted 16 at a time (fewer when -r is small).
    const std::uint32_t refill_batch = std::max(1U, std::min(16U, options.rx_depth / 2));
    std::vector<Clock::time_point> send_times;
    send_times.reserve(static_cast<std::size_t>(options.iters));
    std::array<ibv_wc, 16> completions{};
    const auto limit = std::chrono::seconds(options.timeout_seconds);
    auto last_progress = Clock::now();
    unsigned idle = 0;
    const std::span<std::byte> message = endpoint.buffer().first(options.size);
    const auto check_idle = [&] {
        if (g_stop)
            throw TutorialError(kExitInterrupted, "interrupted");
        if (Clock::now() - last_progress > limit) {
            probe_idle_peer(endpoint, "no completion for " +
                                          std::to_string(options.timeout_seconds) + " s after " +
                                          std::to_string(received) + " of " +
                                          std::to_string(total) + " messages");
        }
    };
    const auto send_completed = [&](std::uint64_t wr_id) {
        completed_sends = static_cast<long long>(wr_id) + 1;
        unsignaled = sent - completed_sends;
    };
    const auto send_next = [&] {
        if (sent >= options.warmup)
            send_times.push_back(Clock::now());
        if (options.check)
            fill_pattern(message, pingpong_seed(sent, client));
        // Keep the send queue from overflowing: wait for a signaled completion first.
        while (unsignaled >= static_cast<long long>(options.tx_depth)) {
            ibv_wc wc{};
            if (endpoint.try_poll(std::span(&wc, 1)) == 1) {
                if (wc.wr_id == kRecvWrId)
                    throw TutorialError(kExitPeer, "the peer sent too early");
                send_completed(wc.wr_id);
            } else if (++idle % 4096 == 0) {
                check_idle();
            }
        }
        const bool signaled = (sent + 1) % signal_every == 0 || sent + 1 == total;
        endpoint.post_send(static_cast<std::uint64_t>(sent), 0, options.size, signaled);
        ++sent;
        ++unsignaled;
    };
    if (client)
        send_next();
    try {
        while (received < total || completed_sends < total) {
            const std::size_t n = endpoint.try_poll(completions);
            if (n == 0) {
                if (++idle % 4096 == 0)
                    check_idle();
                continue;
            }
            idle = 0;
            last_progress = Clock::now();
            // Send completions first, as in step04: the CQ may hold the peer's answer before
            // the completion of the send it answers, and the reply may need the room it frees.
            for (std::size_t i = 0; i < n; ++i) {
                if (completions[i].wr_id != kRecvWrId)
                    send_completed(completions[i].wr_id);
            }
            for (std::size_t i = 0; i < n; ++i) {
                const ibv_wc& wc = completions[i];
                if (wc.wr_id != kRecvWrId)
                    continue;
                if (wc.byte_len != options.size) {
                    throw TutorialError(kExitPeer,
                                        "received a " + std::to_string(wc.byte_len) +
                                            "-byte message, but -s is " +
                                            std::to_string(options.size),
                                        "both sides must use the same -s");
                }
                if (options.check)
                    check_pingpong_message(message, received, !client);
                ++received;
                if (--posted_receives <= options.rx_depth - refill_batch) {
                    endpoint.post_recv_batch(kRecvWrId, 0, options.size,
                                             options.rx_depth - posted_receives);
                    posted_receives = options.rx_depth;
                }
                if (sent < total)
                    send_next();
            }
        }
    } catch (const WorkCompletionError& e) {
        rethrow_ended_early(e, options, received);
    }
    const Clock::time_point end = Clock::now();
    std::vector<double> round_trips;
    double usec = 0;
    if (!send_times.empty()) {
        usec = std::chrono::duration<double, std::micro>(end - send_times.front()).count();
    }
    for (std::size_t i = 0; i + 1 < send_times.size(); ++i) {
        round_trips.push_back(
            std::chrono::duration<double, std::micro>(send_times[i + 1] - send_times[i]).count());
    }
    std::fputs(rc_pingpong_summary(options.size, options.iters, usec).c_str(), stdout);
    std::fputs(
        latency_table(options.size, options.iters, compute_latency_stats(round_trips)).c_str(),
        stdout);
    if (latency_file != nullptr) {
        write_latency_file(latency_file, options.latency_file,
                           latency_file_text(options.size, round_trips));
    }
}
//! [pingpong]

//! [write]
// The client writes message i into the server's buffer, iters times, then a zero-length
// write-with-immediate carrying iters. The server sees one completion: that last one.
void run_write(RDMAEndpoint& endpoint, const Options& options) {
    const auto server_wait = std::chrono::seconds(options.timeout_seconds) +
                             std::chrono::milliseconds(10) * options.iters;
    if (options.host.empty()) {
        const ibv_wc wc = endpoint.poll_recv_completion(server_wait);
        if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc.wc_flags & IBV_WC_WITH_IMM)) {
            throw TutorialError(kExitPeer,
                                "expected a write-with-immediate, got completion opcode " +
                                    std::to_string(wc.opcode));
        }
        const std::uint32_t count = ntohl(wc.imm_data);
        verify_pattern(endpoint.buffer().first(options.size), count - 1, "the written buffer");
        std::printf(
            "server: %u RDMA WRITEs landed with no completion here; the write-with-immediate "
            "said so; %zu bytes verified\n",
            count, options.size);
        return;
    }
    std::vector<double> samples;
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    for (int i = 0; i < options.iters; ++i) {
        fill_pattern(endpoint.buffer().first(options.size), static_cast<std::uint64_t>(i));
        const auto posted = Clock::now();
        endpoint.post_write(static_cast<std::uint64_t>(i), 0, 0, options.size);
        (void)endpoint.poll_completion(static_cast<std::uint64_t>(i));
        samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - posted).count());
    }
    const std::chrono::duration<double> elapsed = Clock::now() - start;
    endpoint.post_write_with_imm(kSendWrId, 0, 0, 0, static_cast<std::uint32_t>(options.iters));
    (void)endpoint.poll_completion(kSendWrId);
    std::printf("client: %d RDMA WRITEs of %zu bytes, then a write-with-immediate (%d)\n",
                options.iters, options.size, options.iters);
    std::printf("%lld bytes in %.2f seconds = %.2f Mbit/sec\n",
                static_cast<long long>(options.size) * options.iters, elapsed.count(),
                static_cast<double>(options.size) * options.iters * 8 / (elapsed.count() * 1e6));
    std::printf("RDMA WRITE latency (post to completion, halved as perftest does):\n");
    std::fputs(latency_table(options.size, options.iters, compute_latency_stats(std::move(samples)))
                   .c_str(),
               stdout);
}
//! [write]

//! [read]
// The server fills its buffer and waits for the client's final send; the client reads the
// buffer iters times, verifies it, and sends that zero-length message.
void run_read(RDMAEndpoint& endpoint, const Options& options) {
    constexpr std::uint64_t kSeed = 0x5eed;
    const auto server_wait = std::chrono::seconds(options.timeout_seconds) +
                             std::chrono::milliseconds(10) * options.iters;
    if (options.host.empty()) {
        (void)endpoint.poll_recv_completion(server_wait);
        std::printf(
            "server: the client read %zu bytes %d times with no completion here; its "
            "final send said so\n",
            options.size, options.iters);
        return;
    }
    std::vector<double> samples;
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    for (int i = 0; i < options.iters; ++i) {
        const auto posted = Clock::now();
        endpoint.post_read(static_cast<std::uint64_t>(i), 0, 0, options.size);
        (void)endpoint.poll_completion(static_cast<std::uint64_t>(i));
        samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - posted).count());
    }
    const std::chrono::duration<double> elapsed = Clock::now() - start;
    verify_pattern(endpoint.buffer().first(options.size), kSeed, "the buffer read from the server");
    endpoint.post_send(kSendWrId, 0, 0);
    (void)endpoint.poll_completion(kSendWrId);
    std::printf("client: %d RDMA READs of %zu bytes; the last one verified\n", options.iters,
                options.size);
    std::printf("%lld bytes in %.2f seconds = %.2f Mbit/sec\n",
                static_cast<long long>(options.size) * options.iters, elapsed.count(),
                static_cast<double>(options.size) * options.iters * 8 / (elapsed.count() * 1e6));
    std::printf("RDMA READ latency (post to completion, halved as perftest does):\n");
    std::fputs(latency_table(options.size, options.iters, compute_latency_stats(std::move(samples)))
                   .c_str(),
               stdout);
}
//! [read]

//! [setup]
EndpointConfig endpoint_config(const Options& options) {
    EndpointConfig config;
    config.device_name = options.device;
    config.port = static_cast<std::uint8_t>(options.port);
    config.gid_index = options.gid_index;
    config.buffer_size = options.size;
    // Handshake v3 carries -s and -n: the other side compares them at connect time.
    config.message_size = static_cast<std::uint32_t>(options.size);
    config.iterations = static_cast<std::uint32_t>(options.iters);
    config.tx_depth = options.tx_depth;
    config.rx_depth = options.rx_depth;
    config.mtu = options.mtu;
    config.timeout = std::chrono::seconds(options.timeout_seconds);
    config.handshake =
        options.rc_pingpong_compat ? HandshakeFormat::rc_pingpong : HandshakeFormat::v3;
    config.stop_flag = &g_stop;
    // Hand out remote access only where the peer needs it, and only on the server's buffer.
    const bool server = options.host.empty();
    config.access = IBV_ACCESS_LOCAL_WRITE;
    if (server && options.op == Operation::write)
        config.access |= IBV_ACCESS_REMOTE_WRITE;
    if (server && options.op == Operation::read)
        config.access |= IBV_ACCESS_REMOTE_READ;
    return config;
}

void run(const Options& options) {
    const OutputFile latency_file = open_latency_file(options.latency_file);
    RDMAEndpoint endpoint(endpoint_config(options));
    if (options.verbose) {
        std::printf("device %s, port %d, GID index %d, max inline %u bytes\n",
                    endpoint.device_name().c_str(), options.port, endpoint.gid_index(),
                    endpoint.max_inline_data());
    }
    // Receives are posted in INIT, before the peer can send anything.
    if (options.op == Operation::pingpong) {
        endpoint.post_recv_batch(kRecvWrId, 0, options.size, options.rx_depth);
    } else if (options.host.empty()) {
        endpoint.post_recv(kRecvWrId, 0, 0);  // for the final write-with-immediate or send
    }
    if (options.op == Operation::read && options.host.empty()) {
        fill_pattern(endpoint.buffer(), 0x5eed);
    }
    if (options.host.empty()) {
        endpoint.accept_peer(options.tcp_port, options.bind_address);
    } else {
        endpoint.connect_to_peer(options.host, options.tcp_port);
    }
    print_address("local address: ", endpoint.local_info());
    print_address("remote address:", *endpoint.remote_info());
    std::fflush(stdout);  // the tests wait for these lines before they disturb a run
    if (options.op != Operation::pingpong && options.verbose) {
        const PeerInfo& remote = *endpoint.remote_info();
        std::printf("  remote buffer:  addr 0x%" PRIx64 ", rkey 0x%08x, %" PRIu64 " bytes\n",
                    remote.addr, remote.rkey, remote.length);
    }
    switch (options.op) {
        case Operation::pingpong:
            run_pingpong(endpoint, options, latency_file.get());
            break;
        case Operation::write:
            run_write(endpoint, options);
            break;
        case Operation::read:
            run_read(endpoint, options);
            break;
    }
}
//! [setup]

void print_error(const std::string& message, const std::string& hint = {}) {
    std::fprintf(stderr, "%s: %s\n", kProgram, message.c_str());
    if (!hint.empty())
        std::fprintf(stderr, "hint: %s\n", hint.c_str());
}

std::string memlock_hint(std::size_t bytes) {
    rlimit limit{};
    ::getrlimit(RLIMIT_MEMLOCK, &limit);
    const std::string now = limit.rlim_cur == RLIM_INFINITY ? std::string("unlimited")
                                                            : std::to_string(limit.rlim_cur / 1024);
    return "the memlock limit (ulimit -l, now " + now + " KiB) is too low to pin " +
           std::to_string(bytes) +
           " bytes: raise it with ulimit -l unlimited or in /etc/security/limits.conf";
}

}  // namespace tutorial

#ifndef RDMA_TUTORIAL_UNIT_TEST  // the unit tests include this file and bring their own main
//! [main]
int main(int argc, char** argv) {
    using namespace tutorial;
    std::optional<Options> options;
    try {
        options = parse_options(argc, argv);
        if (options->help) {
            std::fputs(usage_text(), stdout);
            return kExitOk;
        }
        struct sigaction action {};
        action.sa_handler = on_stop_signal;
        sigaction(SIGINT, &action, nullptr);
        sigaction(SIGTERM, &action, nullptr);
        run(*options);
        return kExitOk;
    } catch (const UsageError& e) {
        print_error(e.what());
        std::fputs(usage_text(), stderr);
        return kExitUsage;
    } catch (const TutorialError& e) {
        print_error(e.what(), e.hint());
        return e.exit_code();
    } catch (const std::system_error& e) {
        const bool reg_mr = std::strncmp(e.what(), "ibv_reg_mr", 10) == 0;
        if (reg_mr && (e.code().value() == ENOMEM || e.code().value() == EPERM)) {
            print_error(std::string(e.what()) + " (registering " + std::to_string(options->size) +
                            " bytes)",
                        memlock_hint(options->size));
        } else {
            print_error(e.what());
        }
        return kExitRdma;
    } catch (const std::exception& e) {  // a programming error, e.g. a range check in the class
        print_error(e.what());
        return kExitRdma;
    }
}
//! [main]
#endif
