// Step 06: epoll-driven completions, done right: one thread serves many ping-pong clients.
#include <arpa/inet.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "cq_events.hpp"
#include "rdma_endpoint.hpp"

namespace tutorial {

constexpr const char* kProgram = "step06_epoll";

class UsageError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// ------------------------------------------------------------------ options

enum class WaitMode { busy, event, spin };

struct Options {
    std::string device;
    int ib_port = 1;
    int gid_index = -1;
    std::size_t size = 4096;
    std::uint32_t iters = 1000;
    int mtu = 1024;
    std::uint32_t rx_depth = 500;
    std::uint32_t tx_depth = 16;
    std::uint32_t cq_depth = 0;  // 0: rx-depth + tx-depth
    std::uint16_t tcp_port = 18515;
    bool verbose = false;
    bool help = false;
    int timeout_s = 10;
    bool check = false;
    std::string host;  // empty: server
    std::string bind_address;
    // server
    std::uint32_t exit_after = 0;  // 0: serve until SIGINT/SIGTERM
    std::uint32_t ack_batch = 16;
    int safety_ms = 100;
    // client
    WaitMode mode = WaitMode::busy;
    std::uint32_t spin_us = 0;
    std::uint32_t rate = 0;    // messages per second; 0: as fast as possible
    std::string latency_file;  // empty: none
};

constexpr const char* kUsage =
    R"(usage: step06_epoll [options]            start a server (many clients, one thread)
       step06_epoll [options] HOST       start a client and ping-pong with HOST

  -d, --ib-dev=DEV       use RDMA device DEV (default: the first one)
  -i, --ib-port=PORT     use port PORT of the device (default 1)
  -g, --gid-idx=IDX      use GID index IDX (default: chosen automatically)
  -s, --size=BYTES       message size (default 4096)
  -n, --iters=N          messages per client (default 1000)
  -m, --mtu=MTU          path MTU: 256, 512, 1024, 2048 or 4096 (default 1024)
  -r, --rx-depth=N       receives kept posted (default 500)
  -t, --tx-depth=N       send queue depth (default 16)
  -c, --cq-depth=N       CQ entries (default rx-depth + tx-depth)
  -p, --port=PORT        TCP port (default 18515)
      --bind=ADDR        server: listen on ADDR (default: all)
      --timeout=S        handshake and wait timeout in seconds (default 10)
      --check            fill every message with a pattern and verify it (both sides)
      --spin-us=N        poll for up to N microseconds before sleeping (as rsocket): the client
                         then arms its CQ and sleeps; the server polls its connected clients'
                         CQs, restarting the window whenever it finds work (costs a core)
  server:
      --exit-after=N     exit after N connections ended (default: run until SIGINT/SIGTERM)
      --ack-batch=N      acknowledge CQ events at least every N events (default 16)
      --safety-ms=MS     epoll_wait timeout; the safety-net CQ poll runs then (default 100)
  client:
  -e, --events           sleep on completion events instead of busy polling
      --rate=N           pace the client to N messages per second
      --latency-file=PATH
                         write every iteration's one-way latency (usec, round trip / 2) to
                         PATH, one per line after '# ' comment lines (for plotting)
  -v, --verbose          print more
  -h, --help             print this help
)";

template <typename T>
T parse_number(std::string_view text, const char* option, T min, T max) {
    long long value = 0;
    const auto* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ec != std::errc{} || ptr != end || value < static_cast<long long>(min) ||
        value > static_cast<long long>(max)) {
        throw UsageError("invalid value '" + std::string(text) + "' for " + option + " (expected " +
                         std::to_string(static_cast<long long>(min)) + ".." +
                         std::to_string(static_cast<long long>(max)) + ")");
    }
    return static_cast<T>(value);
}

//! [options]
Options parse_options(int argc, char** argv) {
    enum : int {
        kBind = 1000,
        kTimeout,
        kCheck,
        kExitAfter,
        kAckBatch,
        kSafetyMs,
        kSpinUs,
        kRate,
        kLatencyFile
    };
    static const option long_options[] = {
        {"ib-dev", required_argument, nullptr, 'd'},
        {"ib-port", required_argument, nullptr, 'i'},
        {"gid-idx", required_argument, nullptr, 'g'},
        {"size", required_argument, nullptr, 's'},
        {"iters", required_argument, nullptr, 'n'},
        {"mtu", required_argument, nullptr, 'm'},
        {"rx-depth", required_argument, nullptr, 'r'},
        {"tx-depth", required_argument, nullptr, 't'},
        {"cq-depth", required_argument, nullptr, 'c'},
        {"port", required_argument, nullptr, 'p'},
        {"bind", required_argument, nullptr, kBind},
        {"timeout", required_argument, nullptr, kTimeout},
        {"check", no_argument, nullptr, kCheck},
        {"exit-after", required_argument, nullptr, kExitAfter},
        {"ack-batch", required_argument, nullptr, kAckBatch},
        {"safety-ms", required_argument, nullptr, kSafetyMs},
        {"events", no_argument, nullptr, 'e'},
        {"spin-us", required_argument, nullptr, kSpinUs},
        {"rate", required_argument, nullptr, kRate},
        {"latency-file", required_argument, nullptr, kLatencyFile},
        {"verbose", no_argument, nullptr, 'v'},
        {"help", no_argument, nullptr, 'h'},
        {nullptr, 0, nullptr, 0}};
    Options o;
    bool events = false;
    optind = 0;  // 0, not 1: glibc then fully restarts the scan (the unit tests parse many times)
    opterr = 0;
    for (;;) {
        const int c = getopt_long(argc, argv, ":d:i:g:s:n:m:r:t:c:p:evh", long_options, nullptr);
        if (c == -1) {
            break;
        }
        const std::string_view arg = optarg ? optarg : "";
        switch (c) {
            case 'd':
                o.device = arg;
                break;
            case 'i':
                o.ib_port = parse_number<int>(arg, "--ib-port", 1, 255);
                break;
            case 'g':
                o.gid_index = parse_number<int>(arg, "--gid-idx", 0, 255);
                break;
            case 's':
                o.size = parse_number<std::size_t>(arg, "--size", 1, 1 << 30);
                break;
            case 'n':
                o.iters = parse_number<std::uint32_t>(arg, "--iters", 1, 1'000'000'000);
                break;
            case 'm':
                o.mtu = parse_number<int>(arg, "--mtu", 256, 4096);
                if (o.mtu != 256 && o.mtu != 512 && o.mtu != 1024 && o.mtu != 2048 &&
                    o.mtu != 4096) {
                    throw UsageError("invalid value '" + std::string(arg) +
                                     "' for --mtu (expected 256, 512, 1024, 2048 or 4096)");
                }
                break;
            case 'r':
                o.rx_depth = parse_number<std::uint32_t>(arg, "--rx-depth", 1, 1 << 20);
                break;
            case 't':
                o.tx_depth = parse_number<std::uint32_t>(arg, "--tx-depth", 1, 1 << 20);
                break;
            case 'c':
                o.cq_depth = parse_number<std::uint32_t>(arg, "--cq-depth", 4, 1 << 22);
                break;
            case 'p':
                o.tcp_port = parse_number<std::uint16_t>(arg, "--port", 1, 65535);
                break;
            case kBind:
                o.bind_address = arg;
                break;
            case kTimeout:
                o.timeout_s = parse_number<int>(arg, "--timeout", 1, 3600);
                break;
            case kCheck:
                o.check = true;
                break;
            case kExitAfter:
                o.exit_after = parse_number<std::uint32_t>(arg, "--exit-after", 1, 1'000'000);
                break;
            case kAckBatch:
                o.ack_batch = parse_number<std::uint32_t>(arg, "--ack-batch", 1, 1 << 20);
                break;
            case kSafetyMs:
                o.safety_ms = parse_number<int>(arg, "--safety-ms", 1, 60'000);
                break;
            case 'e':
                events = true;
                break;
            case kSpinUs:
                o.spin_us = parse_number<std::uint32_t>(arg, "--spin-us", 0, 10'000'000);
                break;
            case kLatencyFile:
                if (arg.empty()) {
                    throw UsageError("--latency-file needs a file name");
                }
                o.latency_file = arg;
                break;
            case kRate:
                o.rate = parse_number<std::uint32_t>(arg, "--rate", 1, 10'000'000);
                break;
            case 'v':
                o.verbose = true;
                break;
            case 'h':
                o.help = true;
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
    if (optind < argc) {
        o.host = argv[optind++];
    }
    if (optind < argc) {
        throw UsageError(std::string("unexpected argument '") + argv[optind] + "'");
    }
    o.mode = o.spin_us > 0 ? WaitMode::spin : (events ? WaitMode::event : WaitMode::busy);
    if (o.host.empty() && (events || o.rate > 0 || !o.latency_file.empty())) {
        throw UsageError("-e, --rate and --latency-file are client options (give a HOST)");
    }
    if (!o.host.empty() && (o.exit_after > 0 || !o.bind_address.empty())) {
        throw UsageError("--exit-after and --bind are server options (drop the HOST)");
    }
    if (o.cq_depth != 0 && o.cq_depth < 4) {
        throw UsageError("--cq-depth must be at least 4");
    }
    return o;
}
//! [options]

ibv_mtu to_ibv_mtu(int mtu) {
    switch (mtu) {
        case 256:
            return IBV_MTU_256;
        case 512:
            return IBV_MTU_512;
        case 2048:
            return IBV_MTU_2048;
        case 4096:
            return IBV_MTU_4096;
        default:
            return IBV_MTU_1024;
    }
}

// ------------------------------- the handshakes (step05's v3 and ibv_rc_pingpong's format)

/// The client speaks step05's handshake v3, which carries -s and -n. The server also speaks
/// ibv_rc_pingpong's (step05's format_rc_pingpong and parse_rc_pingpong), so that
/// ibv_rc_pingpong itself can be one of its clients.
constexpr std::size_t kWireSize = kRcPingpongMessageSize;

//! [detect_handshake]
/// Which handshake a client speaks, from its first 4 bytes: handshake v3's magic "RDMA"
/// (0x52444d41, big-endian), or anything else, which must then be ibv_rc_pingpong's hex LID.
[[nodiscard]] HandshakeFormat detect_handshake(std::span<const char, 4> first) {
    std::uint32_t magic = 0;
    for (const char c : first) {
        magic = magic << 8 | static_cast<unsigned char>(c);
    }
    return magic == kHandshakeMagic ? HandshakeFormat::v3 : HandshakeFormat::rc_pingpong;
}
//! [detect_handshake]

/// Printable form of what a peer sent, for log lines.
std::string printable(std::span<const char> bytes) {
    std::string out;
    for (char c : bytes.first(std::min<std::size_t>(bytes.size(), 60))) {
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            out += c;
        } else {
            char esc[8];
            std::snprintf(esc, sizeof esc, "\\x%02x", static_cast<unsigned char>(c));
            out += esc;
        }
    }
    return bytes.size() > 60 ? out + "..." : out;
}

void print_address(const char* which, const PeerInfo& info) {
    std::printf("  %s address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", which, info.lid,
                info.qpn, info.psn, gid_to_string(info.gid).c_str());
}

/// The owner of a socket, epoll or signalfd descriptor.
class FileDescriptor {
  public:
    FileDescriptor() = default;
    explicit FileDescriptor(int fd) : fd_(fd) {}
    ~FileDescriptor() { reset(); }
    FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
    FileDescriptor& operator=(FileDescriptor&& other) noexcept {
        if (this != &other) {
            reset(std::exchange(other.fd_, -1));
        }
        return *this;
    }
    FileDescriptor(const FileDescriptor&) = delete;
    FileDescriptor& operator=(const FileDescriptor&) = delete;
    [[nodiscard]] int get() const { return fd_; }
    [[nodiscard]] explicit operator bool() const { return fd_ >= 0; }
    void reset(int fd = -1) {
        if (fd_ >= 0) {
            ::close(fd_);
        }
        fd_ = fd;
    }

  private:
    int fd_ = -1;
};

// ------------------------------------------------------------ payload check

/// The --check pattern of message `iter` sent by `side` (0 client, 1 server): the
/// iteration number in the first bytes, then bytes derived from it.
void fill_payload(std::span<std::byte> message, std::uint32_t iter, int side) {
    for (std::size_t k = 0; k < message.size(); ++k) {
        const std::uint32_t v = k < 4
                                    ? (iter >> (8 * k))
                                    : (iter * 2654435761u + static_cast<std::uint32_t>(k) * 40503u +
                                       static_cast<std::uint32_t>(side) * 97u) >>
                                          13;
        message[k] = static_cast<std::byte>(v & 0xff);
    }
}

[[nodiscard]] bool payload_ok(std::span<const std::byte> message, std::uint32_t iter, int side) {
    std::vector<std::byte> expected(message.size());
    fill_payload(expected, iter, side);
    return std::equal(message.begin(), message.end(), expected.begin());
}

// --------------------------------------------------------------- statistics

struct LatencyStats {
    double min = 0, max = 0, typical = 0, average = 0, stdev = 0, p99 = 0, p999 = 0;
};

/// One-way latencies (half round trips) in microseconds, as ib_send_lat
/// reports them: typical is the median; percentiles by nearest rank.
LatencyStats compute_stats(std::vector<double> samples) {
    LatencyStats s;
    if (samples.empty()) {
        return s;
    }
    std::sort(samples.begin(), samples.end());
    const std::size_t n = samples.size();
    auto rank = [&](double p) {
        const auto r = static_cast<std::size_t>(std::ceil(p * static_cast<double>(n)));
        return samples[std::min(n - 1, r == 0 ? 0 : r - 1)];
    };
    s.min = samples.front();
    s.max = samples.back();
    s.typical = samples[n / 2];
    double sum = 0;
    for (double v : samples) {
        sum += v;
    }
    s.average = sum / static_cast<double>(n);
    double sq = 0;
    for (double v : samples) {
        sq += (v - s.average) * (v - s.average);
    }
    s.stdev = std::sqrt(sq / static_cast<double>(n));
    s.p99 = rank(0.99);
    s.p999 = rank(0.999);
    return s;
}

void print_latency_table(std::size_t size, std::size_t iters, const LatencyStats& s) {
    std::printf(
        " #bytes #iterations t_min[usec] t_max[usec] t_typical[usec] t_avg[usec] "
        "t_stdev[usec] 99%% percentile[usec] 99.9%% percentile[usec]\n");
    std::printf(" %-6zu %-11zu %-11.2f %-11.2f %-15.2f %-11.2f %-13.2f %-19.2f %.2f\n", size, iters,
                s.min, s.max, s.typical, s.average, s.stdev, s.p99, s.p999);
}

// ------------------------------------------------------------- --latency-file

//! [latency_file]
/// The curve's name for --latency-file: "busy poll", "event mode" or "spin N us".
std::string mode_label(const Options& o) {
    switch (o.mode) {
        case WaitMode::event:
            return "event mode";
        case WaitMode::spin:
            return "spin " + std::to_string(o.spin_us) + " us";
        case WaitMode::busy:
            break;
    }
    return "busy poll";
}

/// The text of a --latency-file, the format steps 04 to 06 share: '# ' comment
/// lines, then one measured iteration per line, one-way microseconds with 3
/// decimals (the samples the latency table summarises, in the order measured).
std::string format_latency_file(const std::string& mode, std::size_t size,
                                std::span<const double> one_way_us) {
    std::string text = "# label: step06 " + mode + "\n# program: " + kProgram +
                       "\n# size: " + std::to_string(size) +
                       "\n# iterations: " + std::to_string(one_way_us.size()) +
                       "\n# unit: usec one-way (round trip / 2)\n";
    char line[64];
    for (const double us : one_way_us) {
        const int n = std::snprintf(line, sizeof line, "%.3f\n", us);
        text.append(line, static_cast<std::size_t>(std::clamp(n, 0, int{sizeof line} - 1)));
    }
    return text;
}

struct FileCloser {
    void operator()(std::FILE* file) const noexcept { std::fclose(file); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

/// Opens --latency-file for writing; a path that cannot be opened is a usage
/// error, found before any RDMA resource exists.
File open_latency_file(const std::string& path) {
    File file(std::fopen(path.c_str(), "w"));
    if (!file) {
        throw UsageError("cannot open --latency-file '" + path + "': " + std::strerror(errno));
    }
    return file;
}

void write_latency_file(File file, const std::string& text) {
    const bool written = std::fwrite(text.data(), 1, text.size(), file.get()) == text.size();
    if (!written || std::fclose(file.release()) != 0) {
        throw std::system_error(errno, std::generic_category(), "writing --latency-file");
    }
}
//! [latency_file]

struct CpuUsage {
    double user_s = 0, system_s = 0;
    long voluntary = 0, involuntary = 0;
};

CpuUsage cpu_usage() {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    CpuUsage c;
    c.user_s = static_cast<double>(usage.ru_utime.tv_sec) +
               static_cast<double>(usage.ru_utime.tv_usec) / 1e6;
    c.system_s = static_cast<double>(usage.ru_stime.tv_sec) +
                 static_cast<double>(usage.ru_stime.tv_usec) / 1e6;
    c.voluntary = usage.ru_nvcsw;
    c.involuntary = usage.ru_nivcsw;
    return c;
}

using Clock = std::chrono::steady_clock;

// ------------------------------------------------------- the ping-pong engine

// A send's wr_id is its index (0, 1, ...); every receive has this one.
constexpr std::uint64_t kRecvWrId = ~std::uint64_t{0};
constexpr int kClientSide = 0, kServerSide = 1;

//! [pingpong]
/// One side of step04's ping-pong over an endpoint whose buffer holds
/// [receive slot | send slot]. As in step04, each side sends its next message
/// as soon as the peer's has arrived, and only every tx_depth/2-th send (and the
/// last) asks for a completion: so a waiting side is woken once per message, by
/// the peer's message, not a second time by its own send's completion. Reusing
/// the send slot is safe for the same reason as in step04: the peer answers
/// only what has arrived.
class PingPong {
  public:
    PingPong(RDMAEndpoint& endpoint, const Options& options, int side)
        : ep_(endpoint),
          size_(options.size),
          iters_(options.iters),
          rx_depth_(options.rx_depth),
          tx_depth_(options.tx_depth),
          signal_every_(std::max(1U, options.tx_depth / 2)),
          refill_batch_(std::max(1U, std::min(16U, options.rx_depth / 2))),
          check_(options.check),
          side_(side) {}

    void post_initial_receives() { refill_receives(); }

    /// Handles one work completion; throws WorkCompletionError on a failed one
    /// and TutorialError(kExitPeer) on a payload that fails the check.
    void on_completion(const ibv_wc& wc) {
        if (wc.status != IBV_WC_SUCCESS) {
            throw WorkCompletionError(wc);
        }
        if (wc.wr_id < sent_) {
            // A signaled send: it and every unsignaled send before it are done.
            completed_sends_ = static_cast<std::uint32_t>(wc.wr_id) + 1;
        } else if (wc.wr_id == kRecvWrId) {
            if (wc.byte_len != size_) {
                throw TutorialError(kExitPeer, "message " + std::to_string(received_) + " has " +
                                                   std::to_string(wc.byte_len) +
                                                   " bytes, expected " + std::to_string(size_) +
                                                   " (same -s on both sides?)");
            }
            if (check_) {
                if (!payload_ok(ep_.buffer().first(size_), received_, 1 - side_)) {
                    throw TutorialError(kExitPeer, "message " + std::to_string(received_) +
                                                       " failed the --check pattern");
                }
                ++verified_;
            }
            ++received_;
            --posted_receives_;
            awaiting_receive_ = false;
            last_receive_ = Clock::now();
            if (posted_receives_ <= rx_depth_ - refill_batch_ &&
                received_ + posted_receives_ < iters_) {
                refill_receives();
            }
        } else {
            throw std::logic_error("unexpected wr_id " + std::to_string(wc.wr_id));
        }
    }

    /// Posts the next message when the ping-pong allows it; true if it did.
    bool maybe_send() {
        if (!ready_to_send()) {
            return false;
        }
        // The server answers message i; the client sends message i after reply i-1.
        if (side_ == kServerSide && sent_ >= received_) {
            return false;
        }
        auto slot = ep_.buffer().subspan(size_, size_);
        if (check_) {
            fill_payload(slot, sent_, side_);
        }
        last_send_ = Clock::now();
        const bool signaled = (sent_ + 1) % signal_every_ == 0 || sent_ + 1 == iters_;
        ep_.post_send(sent_, size_, size_, signaled);
        ++sent_;
        awaiting_receive_ = side_ == kClientSide;
        return true;
    }

    [[nodiscard]] bool complete() const {
        return received_ == iters_ && completed_sends_ == iters_;
    }
    [[nodiscard]] bool ready_to_send() const {
        // Room in the send queue: its unsignaled sends are freed only by a later
        // signaled one, so never more than tx_depth outstanding.
        return !awaiting_receive_ && sent_ < iters_ && sent_ - completed_sends_ < tx_depth_;
    }
    [[nodiscard]] std::uint32_t received() const { return received_; }
    [[nodiscard]] std::uint32_t sent() const { return sent_; }
    [[nodiscard]] std::uint32_t verified() const { return verified_; }
    [[nodiscard]] std::uint32_t iters() const { return iters_; }
    [[nodiscard]] Clock::time_point last_send() const { return last_send_; }
    [[nodiscard]] Clock::time_point last_receive() const { return last_receive_; }

  private:
    void refill_receives() {
        const std::uint32_t wanted = std::min(rx_depth_, iters_ - received_) - posted_receives_;
        ep_.post_recv_batch(kRecvWrId, 0, size_, wanted);
        posted_receives_ += wanted;
    }

    RDMAEndpoint& ep_;
    std::size_t size_;
    std::uint32_t iters_;
    std::uint32_t rx_depth_;
    std::uint32_t tx_depth_;
    std::uint32_t signal_every_;
    std::uint32_t refill_batch_;  // as step04: re-post receives 16 at a time (fewer for a small -r)
    bool check_;
    int side_;
    std::uint32_t sent_ = 0, received_ = 0, completed_sends_ = 0, verified_ = 0;
    std::uint32_t posted_receives_ = 0;
    bool awaiting_receive_ = false;
    Clock::time_point last_send_{}, last_receive_{};
};
//! [pingpong]

/// Takes the events already queued on the channel, just before the final ack: an
/// event that arrived after the last message then counts as late, not as lost.
void take_queued_events(RDMAEndpoint& ep) noexcept {
    if (ep.channel_fd() < 0) {
        return;
    }
    try {
        while (ep.get_event()) {
            ep.events().on_event();
        }
    } catch (const std::exception&) {
        return;  // only the statistics lose: the final ack and destroy still run
    }
}

EndpointConfig endpoint_config(const Options& o, bool channel) {
    EndpointConfig c;
    c.device_name = o.device;
    c.port = static_cast<std::uint8_t>(o.ib_port);
    c.gid_index = o.gid_index;
    c.buffer_size = 2 * o.size;  // [receive slot | send slot]
    c.tx_depth = o.tx_depth;
    c.rx_depth = o.rx_depth;
    c.mtu = to_ibv_mtu(o.mtu);
    c.handshake = HandshakeFormat::v3;  // the client's; the server detects each client's
    c.message_size = static_cast<std::uint32_t>(o.size);  // v3 carries -s and -n: a mismatch is
    c.iterations = o.iters;                               // an error at connect time
    c.timeout = std::chrono::seconds(o.timeout_s);
    c.cq_depth = o.cq_depth;
    c.completion_channel = channel;
    c.ack_batch = o.ack_batch;
    return c;
}

// ------------------------------------------------------------ sockets

std::string peer_name(const sockaddr_storage& addr) {
    char host[NI_MAXHOST] = "?", port[NI_MAXSERV] = "?";
    ::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), sizeof addr, host, sizeof host, port,
                  sizeof port, NI_NUMERICHOST | NI_NUMERICSERV);
    return std::string(host) + ":" + port;
}

FileDescriptor listen_on(const Options& o) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(o.tcp_port);
    if (const int rc = ::getaddrinfo(o.bind_address.empty() ? nullptr : o.bind_address.c_str(),
                                     port.c_str(), &hints, &found);
        rc != 0) {
        throw TutorialError(kExitUsage,
                            "cannot resolve --bind " + o.bind_address + ": " + ::gai_strerror(rc));
    }
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, ::freeaddrinfo);
    int last_errno = 0;
    for (addrinfo* a = found; a; a = a->ai_next) {
        FileDescriptor fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        if (!fd) {
            last_errno = errno;
            continue;
        }
        const int one = 1;
        ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd.get(), 64) == 0) {
            return fd;
        }
        last_errno = errno;
    }
    throw TutorialError(kExitPeer,
                        "cannot listen on TCP port " + port + ": " + std::strerror(last_errno));
}

/// Waits until fd is ready for `events`, up to deadline; false on timeout.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
    for (;;) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) {
            return false;
        }
        pollfd p{fd, events, 0};
        const int rc = ::poll(&p, 1, static_cast<int>(left.count()));
        if (rc > 0) {
            return true;
        }
        if (rc < 0 && errno != EINTR) {
            throw std::system_error(errno, std::generic_category(), "poll");
        }
    }
}

void write_all(int fd, std::span<const char> bytes, Clock::time_point deadline) {
    std::size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
        if (n >= 0) {
            done += static_cast<std::size_t>(n);
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (!wait_fd(fd, POLLOUT, deadline)) {
                throw TutorialError(kExitTimeout, "timed out writing to the peer");
            }
        } else if (errno == EPIPE || errno == ECONNRESET) {
            throw TutorialError(kExitPeer, "peer closed the connection during the handshake");
        } else if (errno != EINTR) {
            throw std::system_error(errno, std::generic_category(), "send");
        }
    }
}

// ================================================================== server

//! [session]
/// One client of the server: its handshake socket, its endpoint (QP, CQ,
/// completion channel) and its ping-pong.
struct ClientSession {
    enum class State { handshake, await_done, running };
    std::uint64_t id = 0;
    std::string peer;
    FileDescriptor socket;
    State state = State::handshake;
    std::optional<HandshakeFormat> format;  // known from the first 4 bytes
    std::vector<char> inbox;
    Clock::time_point handshake_deadline;
    Clock::time_point last_progress;
    std::unique_ptr<RDMAEndpoint> endpoint;
    std::unique_ptr<PingPong> pingpong;
};
//! [session]

struct ServerTotals {
    std::uint32_t connected = 0, complete = 0, failed = 0, rejected = 0, aborted = 0;
    std::uint64_t events = 0, acked = 0, empty_drains = 0, safety_net_finds = 0, messages = 0;
    std::uint64_t late_events = 0, lost_wakeups = 0;
    std::uint64_t completions = 0, spin_completions = 0;
};

class Server {
  public:
    explicit Server(const Options& options) : o_(options) {}
    int run();

  private:
    enum Kind : std::uint64_t { kListen = 0, kSignal = 1, kSocket = 2, kChannel = 3 };
    static std::uint64_t tag(std::uint64_t id, Kind kind) { return id << 2 | kind; }

    void watch(int fd, std::uint64_t data);
    void accept_clients();
    void on_signal();
    void on_socket(ClientSession& s);
    void on_channel(ClientSession& s);
    std::string start_rdma(ClientSession& s, PeerInfo remote);
    void progress(ClientSession& s, std::span<const ibv_wc> completions);
    void safety_net_sweep(bool timed_out);
    int wait_for_work(std::span<epoll_event> ready, bool& timed_out);
    std::uint64_t spin_poll(std::size_t& connected);
    void finish(std::uint64_t id, const std::string& outcome, std::uint32_t ServerTotals::*counter);

    const Options& o_;
    FileDescriptor epoll_;
    FileDescriptor listen_;
    FileDescriptor signal_fd_;
    std::map<std::uint64_t, ClientSession> sessions_;
    std::uint64_t next_id_ = 1;
    bool stopping_ = false;
    std::uint32_t ended_ = 0;
    ServerTotals totals_;
};

void Server::watch(int fd, std::uint64_t data) {
    epoll_event ev{};
    ev.events = EPOLLIN;  // level-triggered: see the chapter
    ev.data.u64 = data;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
        throw std::system_error(errno, std::generic_category(), "epoll_ctl(ADD)");
    }
}

void Server::accept_clients() {
    for (;;) {
        sockaddr_storage addr{};
        socklen_t len = sizeof addr;
        FileDescriptor fd(::accept4(listen_.get(), reinterpret_cast<sockaddr*>(&addr), &len,
                                    SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (!fd) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED) {
                return;
            }
            if (errno == EINTR) {
                continue;
            }
            throw std::system_error(errno, std::generic_category(), "accept4");
        }
        const int one = 1;
        ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        const std::uint64_t id = next_id_++;
        ClientSession& s = sessions_[id];
        s.id = id;
        s.peer = peer_name(addr);
        s.socket = std::move(fd);
        s.handshake_deadline = Clock::now() + std::chrono::seconds(o_.timeout_s);
        s.last_progress = Clock::now();
        watch(s.socket.get(), tag(id, kSocket));
        if (o_.verbose) {
            std::printf("server: client %llu (%s): connected\n",
                        static_cast<unsigned long long>(id), s.peer.c_str());
        }
    }
}

void Server::on_signal() {
    signalfd_siginfo info{};
    while (::read(signal_fd_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        if (!stopping_) {
            std::printf("server: %s received: stop accepting, abort %zu in-flight client(s)\n",
                        info.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM", sessions_.size());
        }
        stopping_ = true;
    }
}

//! [start_rdma]
/// Returns the -s/-n mismatch with a v3 client (answered first, so that the client says it too),
/// or an empty string once the client's QP is connected and answered.
std::string Server::start_rdma(ClientSession& s, PeerInfo remote) {
    s.endpoint = std::make_unique<RDMAEndpoint>(endpoint_config(o_, true));
    RDMAEndpoint& ep = *s.endpoint;
    const bool v3 = s.format == HandshakeFormat::v3;
    const auto deadline = Clock::now() + std::chrono::seconds(o_.timeout_s);
    const auto answer = [&] {
        if (v3) {
            const HandshakeV3Message reply = encode_handshake_v3(ep.local_info());
            write_all(s.socket.get(), {reinterpret_cast<const char*>(reply.data()), reply.size()},
                      deadline);
        } else {
            write_all(s.socket.get(), format_rc_pingpong(ep.local_info()), deadline);
        }
    };
    if (v3) {
        if (std::string mismatch = describe_run_mismatch(ep.local_info(), remote, true);
            !mismatch.empty()) {
            try {
                answer();
            } catch (const std::exception&) {  // the mismatch is the news, not a closed socket
            }
            s.endpoint.reset();
            return mismatch;
        }
    }
    s.pingpong = std::make_unique<PingPong>(ep, o_, kServerSide);
    // Arm BEFORE the first post: a completion that lands before the first
    // ibv_req_notify_cq() raises no event at all.
    ep.request_notify();
    s.pingpong->post_initial_receives();
    if (!v3) {
        remote.mtu = ep.path_mtu();  // not on rc_pingpong's wire: both sides are given -m
    }
    ep.connect(remote);
    watch(ep.channel_fd(), tag(s.id, kChannel));
    answer();
    if (o_.verbose) {
        print_address("local", ep.local_info());
        print_address("remote", remote);
    }
    return {};
}
//! [start_rdma]

void Server::on_socket(ClientSession& s) {
    char chunk[256];
    const ssize_t n = ::read(s.socket.get(), chunk, sizeof chunk);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
            return;
        }
        if (errno != ECONNRESET) {
            throw std::system_error(errno, std::generic_category(), "read");
        }
    }
    const std::size_t wire_size =
        s.format == HandshakeFormat::v3 ? kHandshakeV3Size : kRcPingpongMessageSize;
    if (n <= 0) {  // EOF or reset
        if (s.state == ClientSession::State::handshake) {
            finish(s.id,
                   "rejected: peer closed after " + std::to_string(s.inbox.size()) + " of " +
                       std::to_string(wire_size) + " handshake bytes ('" + printable(s.inbox) +
                       "')",
                   &ServerTotals::rejected);
            return;
        }
        if (s.state == ClientSession::State::await_done) {
            finish(s.id, "rejected: peer closed before sending \"done\"", &ServerTotals::rejected);
            return;
        }
        // ibv_rc_pingpong (and step05's class) close the TCP connection after the
        // handshake: from here on only the QP tells whether the client is alive.
        ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, s.socket.get(), nullptr);
        s.socket.reset();
        return;
    }
    s.inbox.insert(s.inbox.end(), chunk, chunk + n);
    if (!s.format && s.inbox.size() >= 4) {
        s.format = detect_handshake(std::span<const char, 4>(s.inbox.data(), 4));
    }
    const std::size_t size =
        s.format == HandshakeFormat::v3 ? kHandshakeV3Size : kRcPingpongMessageSize;
    if (s.state == ClientSession::State::handshake && s.format && s.inbox.size() >= size) {
        const std::vector<char> message(s.inbox.begin(), s.inbox.begin() + size);
        s.inbox.erase(s.inbox.begin(), s.inbox.begin() + size);
        PeerInfo remote;
        try {
            remote = s.format == HandshakeFormat::v3
                         ? decode_handshake_v3(std::as_bytes(std::span(message)))
                         : parse_rc_pingpong(message);
        } catch (const TutorialError& e) {
            finish(s.id, std::string("rejected: ") + e.what(), &ServerTotals::rejected);
            return;
        }
        try {
            if (std::string mismatch = start_rdma(s, remote); !mismatch.empty()) {
                finish(s.id, "rejected: " + mismatch, &ServerTotals::rejected);
                return;
            }
        } catch (const std::exception& e) {
            finish(s.id, std::string("failed: ") + e.what(), &ServerTotals::failed);
            return;
        }
        ++totals_.connected;
        s.state = ClientSession::State::await_done;
        s.last_progress = Clock::now();
    }
    if (s.state == ClientSession::State::await_done && s.inbox.size() >= kRcPingpongDone.size()) {
        if (!std::equal(kRcPingpongDone.begin(), kRcPingpongDone.end(), s.inbox.begin())) {
            finish(s.id,
                   "rejected: expected \"done\" after the handshake, got '" +
                       printable(std::span<const char>(s.inbox).first(kRcPingpongDone.size())) +
                       "'",
                   &ServerTotals::rejected);
            return;
        }
        s.inbox.erase(s.inbox.begin(), s.inbox.begin() + kRcPingpongDone.size());
        s.state = ClientSession::State::running;
    }
    if (s.state == ClientSession::State::running && !s.inbox.empty()) {
        finish(s.id, "failed: unexpected bytes after the handshake ('" + printable(s.inbox) + "')",
               &ServerTotals::failed);
    }
}

//! [on_channel]
void Server::on_channel(ClientSession& s) {
    std::array<ibv_wc, 16> batch{};
    std::vector<ibv_wc> completions;
    try {
        tutorial::service_channel(*s.endpoint, s.endpoint->events(), std::span<ibv_wc>(batch),
                                  [&](const ibv_wc& wc) { completions.push_back(wc); });
    } catch (const std::exception& e) {  // a failed completion (try_poll throws it)
        progress(s, completions);
        if (sessions_.count(s.id) != 0) {
            finish(s.id, std::string("failed: ") + e.what(), &ServerTotals::failed);
        }
        return;
    }
    progress(s, completions);
}
//! [on_channel]

void Server::progress(ClientSession& s, std::span<const ibv_wc> completions) {
    try {
        for (const ibv_wc& wc : completions) {
            s.pingpong->on_completion(wc);
            s.pingpong->maybe_send();
            s.last_progress = Clock::now();
        }
    } catch (const WorkCompletionError& e) {
        finish(s.id, std::string("failed: ") + e.what() + "; " + e.hint(), &ServerTotals::failed);
        return;
    } catch (const std::exception& e) {  // a payload check, or a post on a broken QP
        finish(s.id, std::string("failed: ") + e.what(), &ServerTotals::failed);
        return;
    }
    if (s.pingpong->complete()) {
        finish(s.id, "complete", &ServerTotals::complete);
    }
}

//! [safety_net]
/// The safety net: when epoll_wait timed out, or a client made no progress for
/// --safety-ms, poll its CQ anyway. Events should have woken us; a completion
/// found here is counted, and told late or lost by whether its event follows.
void Server::safety_net_sweep(bool timed_out) {
    const auto now = Clock::now();
    const auto idle = std::chrono::milliseconds(o_.safety_ms);
    std::vector<std::uint64_t> ids;
    for (auto& [id, s] : sessions_) {
        if (s.endpoint && (timed_out || now - s.last_progress >= idle)) {
            ids.push_back(id);
        }
    }
    for (const std::uint64_t id : ids) {
        auto it = sessions_.find(id);
        if (it == sessions_.end()) {
            continue;
        }
        ClientSession& s = it->second;
        on_channel(s);  // first, any event that is queued but not yet seen
        if (sessions_.count(id) == 0) {
            continue;
        }
        std::array<ibv_wc, 16> batch{};
        std::vector<ibv_wc> found;
        try {
            tutorial::safety_net_poll(*s.endpoint, s.endpoint->events(), std::span<ibv_wc>(batch),
                                      [&](const ibv_wc& wc) { found.push_back(wc); });
        } catch (const std::exception& e) {
            finish(id, std::string("failed: ") + e.what(), &ServerTotals::failed);
            continue;
        }
        if (!found.empty() && o_.verbose) {
            std::printf(
                "server: client %llu (%s): safety net found %zu completion(s) without an event\n",
                static_cast<unsigned long long>(id), s.peer.c_str(), found.size());
        }
        if (!found.empty()) {
            progress(s, found);
        }
    }
}
//! [safety_net]

//! [server_spin]
/// One pass of the server's spin: polls every connected client's CQ once and
/// handles what it finds. The protocol left each CQ armed, so the first
/// completion this takes raises one event, which also disarms the CQ: the
/// completions after it raise none while the spin goes on (see wait_for_work).
/// That event's drain, when the spin ends, may find the CQ empty: legal, and
/// counted as an empty drain.
std::uint64_t Server::spin_poll(std::size_t& connected) {
    std::array<ibv_wc, 16> batch{};
    std::uint64_t found = 0;
    connected = 0;
    for (auto it = sessions_.begin(); it != sessions_.end();) {
        ClientSession& s = (it++)->second;  // progress() may end this session, never another
        if (!s.pingpong) {
            continue;
        }
        ++connected;
        int n = 0;
        try {
            n = s.endpoint->poll(batch);
        } catch (const std::exception& e) {  // a failed completion
            finish(s.id, std::string("failed: ") + e.what(), &ServerTotals::failed);
            continue;
        }
        if (n > 0) {
            found += static_cast<std::uint64_t>(n);
            s.endpoint->events().on_spin_poll(static_cast<std::uint64_t>(n));
            progress(s, std::span<const ibv_wc>(batch.data(), static_cast<std::size_t>(n)));
        }
    }
    return found;
}

/// epoll_wait, with --spin-us spinning first while any client is connected (as
/// busy-poll sockets do): work found restarts the window; only N us with
/// nothing found lets the thread sleep. Every 20 us the spin asks epoll_wait
/// (timeout 0) whether anything is ready, and returns for the listening
/// socket, the signalfd or a handshake socket. A ready completion channel does
/// not end the spin: its one event was raised by a completion that the spin
/// takes anyway, and it disarmed the CQ, so the spin runs on without events,
/// like rsocket's lazy arming. The sleeping epoll_wait then returns that event
/// at once, and its service re-arms and drains as the protocol says. A spin
/// never outlasts one safety period, so that the housekeeping runs.
/// timed_out: the sleeping epoll_wait returned with nothing ready.
int Server::wait_for_work(std::span<epoll_event> ready, bool& timed_out) {
    timed_out = false;
    const int capacity = static_cast<int>(ready.size());
    if (o_.spin_us > 0) {
        const auto window = std::chrono::microseconds(o_.spin_us);
        constexpr auto kEpollCheck = std::chrono::microseconds(20);
        const auto start = Clock::now();
        auto quiet_until = start + window;
        auto next_check = start;
        for (;;) {
            std::size_t connected = 0;
            const std::uint32_t ended_before = ended_;
            if (spin_poll(connected) > 0) {
                quiet_until = Clock::now() + window;
            }
            if (ended_ != ended_before) {
                return 0;  // a client ended: the loop checks --exit-after
            }
            if (connected == 0) {
                break;  // nobody to spin for
            }
            const auto now = Clock::now();
            if (now >= next_check) {
                next_check = now + kEpollCheck;
                const int n = ::epoll_wait(epoll_.get(), ready.data(), capacity, 0);
                const auto is_channel = [](const epoll_event& e) {
                    return static_cast<Kind>(e.data.u64 & 3) == kChannel;
                };
                if (n < 0 ||
                    !std::all_of(ready.begin(), ready.begin() + std::max(n, 0), is_channel)) {
                    return n;  // an error, or a socket or signal to handle now
                }
            }
            if (now >= quiet_until) {
                break;  // quiet for N us: sleep (a pending event returns at once)
            }
            if (now - start >= std::chrono::milliseconds(o_.safety_ms)) {
                return 0;
            }
        }
    }
    // Always a timeout: a lost completion event must not hang the server.
    const int n = ::epoll_wait(epoll_.get(), ready.data(), capacity, o_.safety_ms);
    timed_out = n == 0;
    return n;
}
//! [server_spin]

//! [finish]
void Server::finish(std::uint64_t id, const std::string& outcome,
                    std::uint32_t ServerTotals::*counter) {
    auto it = sessions_.find(id);
    if (it == sessions_.end()) {
        return;
    }
    ClientSession& s = it->second;
    std::string line = "server: client " + std::to_string(id) + " (" + s.peer + "): " + outcome;
    if (s.endpoint) {
        RDMAEndpoint& ep = *s.endpoint;
        // Leave the epoll set, then ack every event: ibv_destroy_cq waits for that.
        ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, ep.channel_fd(), nullptr);
        take_queued_events(ep);
        ack_all_before_destroy(ep, ep.events());
        const CqEventTracker& ev = ep.events();
        char stats[320];
        std::snprintf(stats, sizeof stats,
                      "; %u received, %u sent, %u verified; events %llu, acked %llu, empty drains "
                      "%llu, safety-net finds %llu (late events %llu, lost wake-ups %llu)",
                      s.pingpong->received(), s.pingpong->sent(), s.pingpong->verified(),
                      static_cast<unsigned long long>(ev.received()),
                      static_cast<unsigned long long>(ev.acked()),
                      static_cast<unsigned long long>(ev.empty_drains()),
                      static_cast<unsigned long long>(ev.safety_net_finds()),
                      static_cast<unsigned long long>(ev.late_events()),
                      static_cast<unsigned long long>(ev.lost_wakeups()));
        line += stats;
        totals_.events += ev.received();
        totals_.acked += ev.acked();
        totals_.empty_drains += ev.empty_drains();
        totals_.safety_net_finds += ev.safety_net_finds();
        totals_.late_events += ev.late_events();
        totals_.lost_wakeups += ev.lost_wakeups();
        totals_.completions += ev.completions();
        totals_.spin_completions += ev.spin_completions();
        totals_.messages += s.pingpong->received();
    }
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    totals_.*counter += 1;
    ++ended_;
    sessions_.erase(it);  // PingPong, then the endpoint (QP, CQ, MR, PD, channel, context)
}
//! [finish]

//! [server_loop]
int Server::run() {
    epoll_ = FileDescriptor(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_) {
        throw std::system_error(errno, std::generic_category(), "epoll_create1");
    }
    // SIGINT and SIGTERM arrive as readable data on a signalfd, in the same epoll set.
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    // A shell starts background jobs with SIGINT ignored; an ignored signal is
    // discarded, never queued, so restore the default before blocking it.
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    if (::sigprocmask(SIG_BLOCK, &mask, nullptr) != 0) {
        throw std::system_error(errno, std::generic_category(), "sigprocmask");
    }
    signal_fd_ = FileDescriptor(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
    if (!signal_fd_) {
        throw std::system_error(errno, std::generic_category(), "signalfd");
    }
    watch(signal_fd_.get(), tag(0, kSignal));
    listen_ = listen_on(o_);
    watch(listen_.get(), tag(0, kListen));
    const std::string spin = o_.spin_us == 0
                                 ? std::string()
                                 : "; spins " + std::to_string(o_.spin_us) +
                                       " us before sleeping while a client is connected";
    std::printf("server: listening on TCP port %u; one thread, level-triggered epoll%s\n",
                static_cast<unsigned>(o_.tcp_port), spin.c_str());
    std::fflush(stdout);

    std::array<epoll_event, 64> ready{};
    auto next_sweep = Clock::now() + std::chrono::milliseconds(o_.safety_ms);
    while (!stopping_ && (o_.exit_after == 0 || ended_ < o_.exit_after)) {
        bool timed_out = false;
        const int n = wait_for_work(ready, timed_out);  // epoll_wait, spinning first with --spin-us
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            throw std::system_error(errno, std::generic_category(), "epoll_wait");
        }
        for (int i = 0; i < n; ++i) {
            const std::uint64_t data = ready[static_cast<std::size_t>(i)].data.u64;
            const auto kind = static_cast<Kind>(data & 3);
            const std::uint64_t id = data >> 2;
            if (kind == kListen) {
                accept_clients();
                continue;
            }
            if (kind == kSignal) {
                on_signal();
                continue;
            }
            auto it = sessions_.find(id);
            if (it == sessions_.end()) {
                continue;  // ended earlier in this batch
            }
            if (kind == kSocket) {
                on_socket(it->second);
            } else {
                on_channel(it->second);
            }
        }
        const auto now = Clock::now();
        for (auto it = sessions_.begin(); it != sessions_.end();) {
            const auto id = (it++)->first;
            ClientSession& s = sessions_.at(id);
            if (s.pingpong && now - s.last_progress > std::chrono::seconds(o_.timeout_s) &&
                s.format == HandshakeFormat::rc_pingpong && s.pingpong->received() > 0 &&
                s.pingpong->received() == s.pingpong->sent()) {
                // ibv_rc_pingpong's handshake cannot carry -n: a client started with a smaller
                // -n took its last answer and ended, as if killed. Name the likelier cause.
                finish(id,
                       "failed: the client ended the session after " +
                           std::to_string(s.pingpong->received()) +
                           " messages; both sides must use the same -n (this server uses -n " +
                           std::to_string(o_.iters) +
                           "; ibv_rc_pingpong's handshake cannot carry -n to compare it)",
                       &ServerTotals::failed);
                continue;
            }
            if (s.pingpong && now - s.last_progress > std::chrono::seconds(o_.timeout_s)) {
                // A client killed while we wait for its next message leaves no trace
                // but silence (with a reply in flight, IBV_WC_RETRY_EXC_ERR comes first).
                finish(id,
                       "failed: no message for " + std::to_string(o_.timeout_s) + " s after " +
                           std::to_string(s.pingpong->received()) + " of " +
                           std::to_string(o_.iters) +
                           " (client killed or stalled); its resources are freed",
                       &ServerTotals::failed);
                continue;
            }
            if (s.state == ClientSession::State::handshake && now > s.handshake_deadline) {
                finish(id,
                       "rejected: no handshake within " + std::to_string(o_.timeout_s) + " s (" +
                           std::to_string(s.inbox.size()) + " bytes received)",
                       &ServerTotals::rejected);
            }
        }
        if (timed_out || now >= next_sweep) {
            safety_net_sweep(timed_out);
            next_sweep = now + std::chrono::milliseconds(o_.safety_ms);
        }
    }
    // Shutdown: no more accepts, then every client is ended and its events acked.
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listen_.get(), nullptr);
    listen_.reset();
    while (!sessions_.empty()) {
        auto& [id, s] = *sessions_.begin();
        finish(id,
               s.pingpong ? "aborted by shutdown after " + std::to_string(s.pingpong->received()) +
                                " of " + std::to_string(o_.iters) + " messages"
                          : std::string("aborted by shutdown during the handshake"),
               &ServerTotals::aborted);
    }
    const CpuUsage cpu = cpu_usage();
    std::printf("server: clients: %u connected, %u complete, %u failed, %u rejected, %u aborted\n",
                totals_.connected, totals_.complete, totals_.failed, totals_.rejected,
                totals_.aborted);
    std::printf("server: messages received: %llu\n",
                static_cast<unsigned long long>(totals_.messages));
    std::printf(
        "server: CQ events: received %llu, acked %llu, empty drains %llu, safety-net finds "
        "%llu (late events %llu, lost wake-ups %llu)\n",
        static_cast<unsigned long long>(totals_.events),
        static_cast<unsigned long long>(totals_.acked),
        static_cast<unsigned long long>(totals_.empty_drains),
        static_cast<unsigned long long>(totals_.safety_net_finds),
        static_cast<unsigned long long>(totals_.late_events),
        static_cast<unsigned long long>(totals_.lost_wakeups));
    if (o_.spin_us > 0) {
        std::printf("server: spin: --spin-us %u took %llu of %llu completions before sleeping\n",
                    o_.spin_us, static_cast<unsigned long long>(totals_.spin_completions),
                    static_cast<unsigned long long>(totals_.completions));
    }
    std::printf(
        "server: cpu: user %.3f s, system %.3f s; context switches: %ld voluntary, %ld "
        "involuntary\n",
        cpu.user_s, cpu.system_s, cpu.voluntary, cpu.involuntary);
    assert(totals_.events == totals_.acked);
    return kExitOk;  // a server stopped by SIGINT/SIGTERM has done its job
}
//! [server_loop]

// ================================================================== client

volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void on_interrupt(int) {
    g_interrupted = 1;
}

void check_interrupted() {
    if (g_interrupted) {
        throw TutorialError(kExitInterrupted, "interrupted");
    }
}

/// The client's three ways to reap completions.
class CompletionWaiter {
  public:
    CompletionWaiter(RDMAEndpoint& ep, const Options& o) : ep_(ep), o_(o) {}

    /// Calls `handle(wc)` for at least one completion (or returns at `wake_at`
    /// when that comes first). Throws on timeout or interruption.
    template <typename Handle>
    void wait(Handle&& handle, std::optional<Clock::time_point> wake_at = std::nullopt) {
        const auto deadline = Clock::now() + std::chrono::seconds(o_.timeout_s);
        switch (o_.mode) {
            case WaitMode::busy:
                wait_busy(handle, deadline, wake_at);
                break;
            case WaitMode::event:
                wait_event(handle, deadline, wake_at);
                break;
            case WaitMode::spin:
                wait_spin(handle, deadline, wake_at);
                break;
        }
    }
    [[nodiscard]] std::uint64_t lost_wakeups() const { return ep_.events().safety_net_finds(); }

  private:
    template <typename Handle>
    int poll_once(Handle& handle) {
        const int n = ep_.poll(batch_);
        for (int i = 0; i < n; ++i) {
            handle(batch_[static_cast<std::size_t>(i)]);
        }
        return n;
    }

    static void check_deadline(Clock::time_point deadline, const char* mode) {
        if (Clock::now() > deadline) {
            throw TutorialError(kExitTimeout,
                                std::string("no completion within --timeout (") + mode + " mode)");
        }
    }

    //! [busy]
    template <typename Handle>
    void wait_busy(Handle& handle, Clock::time_point deadline,
                   std::optional<Clock::time_point> wake_at) {
        for (std::uint32_t spins = 0;; ++spins) {
            if (poll_once(handle) > 0) {
                return;
            }
            if ((spins & 1023) == 0) {
                check_interrupted();
                const auto now = Clock::now();
                if (wake_at && now >= *wake_at) {
                    return;
                }
                check_deadline(deadline, "busy");
            } else if (wake_at && Clock::now() >= *wake_at) {
                return;
            }
        }
    }
    //! [busy]

    /// Sleeps on the channel fd until readable, wake_at, or --safety-ms.
    bool sleep_on_channel(Clock::time_point deadline, std::optional<Clock::time_point> wake_at) {
        auto until = Clock::now() + std::chrono::milliseconds(o_.safety_ms);
        if (wake_at && *wake_at < until) {
            until = *wake_at;
        }
        until = std::min(until, deadline + std::chrono::milliseconds(1));
        const auto ns = std::max<long long>(
            0, std::chrono::duration_cast<std::chrono::nanoseconds>(until - Clock::now()).count());
        timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
        pollfd p{ep_.channel_fd(), POLLIN, 0};
        const int rc = ::ppoll(&p, 1, &ts, nullptr);
        if (rc < 0 && errno != EINTR) {
            throw std::system_error(errno, std::generic_category(), "ppoll");
        }
        check_interrupted();
        return rc > 0;
    }

    //! [event]
    template <typename Handle>
    void wait_event(Handle& handle, Clock::time_point deadline,
                    std::optional<Clock::time_point> wake_at) {
        for (;;) {
            if (sleep_on_channel(deadline, wake_at)) {
                const ChannelPass pass =
                    service_channel(ep_, ep_.events(), std::span<ibv_wc>(batch_), handle);
                if (pass.completions > 0) {
                    return;
                }
                continue;  // an event whose CQE an earlier drain took: legal
            }
            if (wake_at && Clock::now() >= *wake_at) {
                return;
            }
            // Timed out: the safety net. A completion here had no event (yet).
            if (safety_net_poll(ep_, ep_.events(), std::span<ibv_wc>(batch_), handle) > 0) {
                return;
            }
            check_deadline(deadline, "event");
        }
    }
    //! [event]

    //! [spin]
    /// rsocket's way: poll for up to --spin-us; only then arm the CQ, poll once
    /// more (a CQE may have landed before the arm), and sleep.
    template <typename Handle>
    void wait_spin(Handle& handle, Clock::time_point deadline,
                   std::optional<Clock::time_point> wake_at) {
        const auto spin_until = Clock::now() + std::chrono::microseconds(o_.spin_us);
        for (;;) {
            if (poll_once(handle) > 0) {
                return;
            }
            const auto now = Clock::now();
            if (wake_at && now >= *wake_at) {
                return;
            }
            if (now < spin_until) {
                continue;
            }
            if (!armed_) {
                ep_.request_notify();
                ep_.events().on_rearm();
                armed_ = true;
                continue;  // poll once more after arming
            }
            if (sleep_on_channel(deadline, wake_at)) {
                while (ep_.get_event()) {
                    ep_.events().on_event();
                    armed_ = false;  // the event used up the one-shot request
                }
                if (const std::uint32_t due = ep_.events().acks_due(); due > 0) {
                    ep_.ack(due);
                    ep_.events().on_acked(due);
                }
                continue;
            }
            if (wake_at && Clock::now() >= *wake_at) {
                return;
            }
            // The safety net; it re-arms too when an earlier find's event never came
            // (armed_ stays true: the CQ is armed again).
            if (safety_net_poll(ep_, ep_.events(), std::span<ibv_wc>(batch_), handle) > 0) {
                return;
            }
            check_deadline(deadline, "spin");
        }
    }
    //! [spin]

    RDMAEndpoint& ep_;
    const Options& o_;
    std::array<ibv_wc, 16> batch_{};
    bool armed_ = false;
};

int run_client(const Options& o) {
    File latency_file;
    if (!o.latency_file.empty()) {
        latency_file = open_latency_file(o.latency_file);  // before any RDMA resource
    }
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);

    EndpointConfig config = endpoint_config(o, o.mode != WaitMode::busy);
    config.stop_flag = &g_interrupted;
    RDMAEndpoint ep(config);
    PingPong pingpong(ep, o, kClientSide);
    if (o.mode == WaitMode::event) {
        ep.request_notify();  // armed before the first post
    }
    pingpong.post_initial_receives();

    // step05's client handshake, in rc_pingpong's format: TCP, exchange, "done", RTR, RTS.
    ep.connect_to_peer(o.host, o.tcp_port);
    const PeerInfo remote = *ep.remote_info();
    print_address("local", ep.local_info());
    print_address("remote", remote);
    std::fflush(stdout);

    CompletionWaiter waiter(ep, o);
    std::vector<double> one_way_us;
    one_way_us.reserve(o.iters);
    const CpuUsage cpu_before = cpu_usage();
    const auto start = Clock::now();
    auto on_wc = [&](const ibv_wc& wc) {
        pingpong.on_completion(wc);
        if (wc.wr_id == kRecvWrId) {
            const std::chrono::duration<double, std::micro> rtt =
                pingpong.last_receive() - pingpong.last_send();
            one_way_us.push_back(rtt.count() / 2);
        }
    };
    //! [client_loop]
    while (!pingpong.complete()) {
        check_interrupted();
        if (pingpong.ready_to_send()) {
            if (o.rate > 0) {
                const auto slot =
                    start + std::chrono::nanoseconds(1'000'000'000LL * pingpong.sent() / o.rate);
                if (Clock::now() < slot) {
                    waiter.wait(on_wc, slot);  // busy mode spins here; event modes sleep
                    continue;
                }
            }
            pingpong.maybe_send();
        }
        waiter.wait(on_wc);
    }
    //! [client_loop]
    const std::chrono::duration<double> elapsed = Clock::now() - start;
    const CpuUsage cpu_after = cpu_usage();

    const double seconds = elapsed.count();
    const long long bytes = static_cast<long long>(o.size) * o.iters * 2;
    std::printf("%lld bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, seconds,
                static_cast<double>(bytes) * 8.0 / seconds / 1e6);
    std::printf("%u iters in %.2f seconds = %.2f usec/iter\n", o.iters, seconds,
                seconds * 1e6 / o.iters);
    print_latency_table(o.size, one_way_us.size(), compute_stats(one_way_us));
    if (latency_file) {
        write_latency_file(std::move(latency_file),
                           format_latency_file(mode_label(o), o.size, one_way_us));
    }
    const char* mode_name = o.mode == WaitMode::busy    ? "busy"
                            : o.mode == WaitMode::event ? "event"
                                                        : "spin";
    take_queued_events(ep);
    ack_all_before_destroy(ep, ep.events());
    const CqEventTracker& ev = ep.events();
    std::printf(
        "client: mode %s, events %llu, acked %llu, empty drains %llu, safety-net finds %llu (late "
        "events %llu, lost wake-ups %llu)\n",
        mode_name, static_cast<unsigned long long>(ev.received()),
        static_cast<unsigned long long>(ev.acked()),
        static_cast<unsigned long long>(ev.empty_drains()),
        static_cast<unsigned long long>(ev.safety_net_finds()),
        static_cast<unsigned long long>(ev.late_events()),
        static_cast<unsigned long long>(ev.lost_wakeups()));
    const double cpu_s =
        (cpu_after.user_s - cpu_before.user_s) + (cpu_after.system_s - cpu_before.system_s);
    std::printf(
        "client: cpu: %.3f s user, %.3f s system = %.1f%% of one core; context switches: %ld "
        "voluntary, %ld involuntary\n",
        cpu_after.user_s - cpu_before.user_s, cpu_after.system_s - cpu_before.system_s,
        100.0 * cpu_s / seconds, cpu_after.voluntary - cpu_before.voluntary,
        cpu_after.involuntary - cpu_before.involuntary);
    if (o.check) {
        std::printf("client: verified %u of %u replies\n", pingpong.verified(), o.iters);
    }
    return kExitOk;
}

}  // namespace tutorial

#ifndef RDMA_TUTORIAL_UNIT_TEST  // the unit tests include this file and bring their own main
int main(int argc, char** argv) {
    using namespace tutorial;
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    std::optional<Options> options;
    try {
        options = parse_options(argc, argv);
        if (options->help) {
            std::fputs(kUsage, stdout);
            return kExitOk;
        }
        if (options->host.empty()) {
            Server server(*options);
            return server.run();
        }
        return run_client(*options);
    } catch (const UsageError& e) {
        std::fprintf(stderr, "%s: %s\n%s", kProgram, e.what(), kUsage);
        return kExitUsage;
    } catch (const TutorialError& e) {
        std::fprintf(stderr, "%s: %s\n", kProgram, e.what());
        if (!e.hint().empty()) {
            std::fprintf(stderr, "hint: %s\n", e.hint().c_str());
        }
        return e.exit_code();
    } catch (const std::system_error& e) {
        if (e.code().value() == ENOMEM && std::string_view(e.what()).starts_with("ibv_reg_mr") &&
            options) {
            const std::size_t bytes = 2 * options->size;
            rlimit limit{};
            ::getrlimit(RLIMIT_MEMLOCK, &limit);
            const std::string now = limit.rlim_cur == RLIM_INFINITY
                                        ? std::string("unlimited")
                                        : std::to_string(limit.rlim_cur / 1024);
            std::fprintf(stderr, "%s: ibv_reg_mr: %s (registering %zu bytes)\n", kProgram,
                         std::strerror(ENOMEM), bytes);
            std::fprintf(stderr,
                         "hint: the memlock limit (ulimit -l, now %s KiB) is too low to pin %zu "
                         "bytes: raise it with ulimit -l unlimited or in "
                         "/etc/security/limits.conf\n",
                         now.c_str(), bytes);
        } else {
            std::fprintf(stderr, "%s: %s\n", kProgram, e.what());
        }
        return kExitRdma;
    } catch (const std::exception& e) {  // a programming error, e.g. a range check in the class
        std::fprintf(stderr, "%s: %s\n", kProgram, e.what());
        return kExitRdma;
    }
}
#endif
