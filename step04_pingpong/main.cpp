// Step 04: ping-pong that interoperates with ibv_rc_pingpong, with honest latency figures.
#include <arpa/inet.h>
#include <dirent.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace tutorial {

constexpr const char* kProgram = "step04_pingpong";

//! [exit_codes]
constexpr int kExitOk = 0, kExitRdma = 1, kExitUsage = 2, kExitNoDevice = 3, kExitNoProvider = 4,
              kExitNoSuchDevice = 5, kExitPeer = 6, kExitTimeout = 7, kExitInterrupted = 130;
//! [exit_codes]

//! [errors]
// A bad option or value: main() prints it with the usage text and exits with kExitUsage.
class UsageError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// Everything that is not a failing verb: no device, no provider, unknown device or port, ...
class TutorialError : public std::runtime_error {
  public:
    TutorialError(int exit_code, const std::string& message, std::string hint = {})
        : std::runtime_error(message), exit_code_(exit_code), hint_(std::move(hint)) {}
    [[nodiscard]] int exit_code() const noexcept { return exit_code_; }
    [[nodiscard]] const std::string& hint() const noexcept { return hint_; }

  private:
    int exit_code_;
    std::string hint_;
};
//! [errors]

//! [raii]
// When set, every successful destroy prints "teardown: <verb>", so the order can be seen.
inline bool trace_teardown = false;

// One owner shape for every verbs object: a move-only std::unique_ptr whose
// deleter calls the destroy verb and reports, never throws, a failure.
template <typename T, auto Destroy, const char* Verb>
struct VerbsDeleter {
    void operator()(T* object) const noexcept {
        const int rc = Destroy(object);
        if (rc != 0) {
            const int err = rc > 0 ? rc : errno;  // ibv_close_device returns -1 and sets errno
            std::fprintf(stderr, "destroy failed: %s: %s (errno %d)\n", Verb, std::strerror(err),
                         err);
        } else if (trace_teardown) {
            std::printf("teardown: %s\n", Verb);
        }
    }
};
inline constexpr char kFreeDeviceList[] = "ibv_free_device_list";
inline constexpr char kCloseDevice[] = "ibv_close_device";
inline constexpr char kDeallocPd[] = "ibv_dealloc_pd";
inline constexpr char kFree[] = "free";
inline constexpr char kDeregMr[] = "ibv_dereg_mr";
inline constexpr char kDestroyCq[] = "ibv_destroy_cq";
inline constexpr char kDestroyQp[] = "ibv_destroy_qp";
inline int free_device_list(ibv_device** list) {
    ibv_free_device_list(list);
    return 0;
}
inline int free_buffer(std::byte* buffer) {
    std::free(buffer);
    return 0;
}
using DeviceList =
    std::unique_ptr<ibv_device*, VerbsDeleter<ibv_device*, free_device_list, kFreeDeviceList>>;
using Context =
    std::unique_ptr<ibv_context, VerbsDeleter<ibv_context, ibv_close_device, kCloseDevice>>;
using ProtectionDomain = std::unique_ptr<ibv_pd, VerbsDeleter<ibv_pd, ibv_dealloc_pd, kDeallocPd>>;
using Buffer = std::unique_ptr<std::byte, VerbsDeleter<std::byte, free_buffer, kFree>>;
using MemoryRegion = std::unique_ptr<ibv_mr, VerbsDeleter<ibv_mr, ibv_dereg_mr, kDeregMr>>;
using CompletionQueue = std::unique_ptr<ibv_cq, VerbsDeleter<ibv_cq, ibv_destroy_cq, kDestroyCq>>;
using QueuePair = std::unique_ptr<ibv_qp, VerbsDeleter<ibv_qp, ibv_destroy_qp, kDestroyQp>>;
//! [raii]

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
    int gid_index = -1;  // -1: chosen as in step 01
    int mtu = 1024;      // as ibv_rc_pingpong; 0 would mean the port's active MTU
    int tcp_port = 18515;
    std::string bind_address;  // server: empty means every address
    int timeout_seconds = 10;
    std::string host;  // empty: we are the server
    long long iters = 1000;
    long long warmup = 0;
    bool check = false;
    std::string latency_file;  // empty: none
    bool help = false;
};

[[nodiscard]] std::string usage_text() {
    return std::string("usage: ") + kProgram +
           " [options]        start a server, wait for a client\n" + "       " + kProgram +
           " [options] HOST   connect to the server on HOST\n" +
           "Ping-pong over one RC QP, compatible with ibv_rc_pingpong (same handshake, traffic\n"
           "and defaults); prints its summary lines and an ib_send_lat-style latency table.\n"
           "  -d, --ib-dev=NAME    use this device (default: the first one found)\n"
           "  -i, --ib-port=N      use this port, 1-255 (default 1)\n"
           "  -g, --gid-idx=N      use this GID index (default: chosen as in step 01)\n"
           "  -s, --size=BYTES     message size, 1-1073741824 (default 4096)\n"
           "  -n, --iters=N        measured iterations, 2-100000000 (default 1000)\n"
           "  -r, --rx-depth=N     receive queue depth, 1-16777216 (default 500)\n"
           "  -t, --tx-depth=N     send queue depth, 1-16777216 (default 16)\n"
           "  -m, --mtu=BYTES      path MTU 256, 512, 1024, 2048 or 4096 (default 1024); both\n"
           "                       sides must use the same\n"
           "  -p, --port=N         TCP port of the handshake (default 18515)\n"
           "      --bind=ADDR      server: listen on ADDR only (default: every address)\n"
           "      --timeout=SEC    limit for connect, accept, every read and every wait, 1-3600\n"
           "                       (default 10)\n"
           "      --warmup=N       N more iterations first, left out of the figures; the peer\n"
           "                       must run as many in all (default 0)\n"
           "      --check          fill each message with a pattern and verify it; both sides\n"
           "                       need --check (ibv_rc_pingpong has none)\n"
           "      --latency-file=PATH\n"
           "                       write each measured one-way latency in usec to PATH, one per\n"
           "                       line after a few '# ' header lines (for plotting)\n"
           "  -h, --help           print this help and exit\n"
           "exit status: 0 ok, 1 RDMA error, 2 usage, 3 no device, 4 no provider,\n"
           "5 no such device or port, 6 peer or protocol error, 7 timeout, 130 interrupted\n";
}

// Parses a whole decimal number in [min, max]; anything else is a UsageError naming the option.
[[nodiscard]] long long parse_number(std::string_view text, const char* option, long long min,
                                     long long max) {
    long long value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || value < min ||
        value > max) {
        throw UsageError(std::string(option) + " must be a whole number from " +
                         std::to_string(min) + " to " + std::to_string(max) + " (got '" +
                         std::string(text) + "')");
    }
    return value;
}

enum LongOnlyOption { kOptBind = 256, kOptTimeout, kOptWarmup, kOptCheck, kOptLatency };

[[nodiscard]] Options parse_options(int argc, char** argv) {
    static const option long_options[] = {{"ib-dev", required_argument, nullptr, 'd'},
                                          {"ib-port", required_argument, nullptr, 'i'},
                                          {"size", required_argument, nullptr, 's'},
                                          {"rx-depth", required_argument, nullptr, 'r'},
                                          {"tx-depth", required_argument, nullptr, 't'},
                                          {"gid-idx", required_argument, nullptr, 'g'},
                                          {"mtu", required_argument, nullptr, 'm'},
                                          {"port", required_argument, nullptr, 'p'},
                                          {"bind", required_argument, nullptr, kOptBind},
                                          {"timeout", required_argument, nullptr, kOptTimeout},
                                          {"iters", required_argument, nullptr, 'n'},
                                          {"warmup", required_argument, nullptr, kOptWarmup},
                                          {"check", no_argument, nullptr, kOptCheck},
                                          {"latency-file", required_argument, nullptr, kOptLatency},
                                          {"help", no_argument, nullptr, 'h'},
                                          {nullptr, 0, nullptr, 0}};
    Options options;
    opterr = 0;  // we print our own messages
    optind = 0;  // 0, not 1: glibc then fully restarts the scan (the unit tests parse many times)
    for (;;) {
        const int c = getopt_long(argc, argv, ":d:i:s:r:t:g:m:p:n:h", long_options, nullptr);
        if (c == -1) {
            break;
        }
        switch (c) {
            case 'd':
                options.device_name = optarg;
                break;
            case 'i':
                options.ib_port = static_cast<int>(parse_number(optarg, "--ib-port", 1, 255));
                break;
            case 's':
                options.size =
                    static_cast<std::size_t>(parse_number(optarg, "--size", 1, kMaxBufferSize));
                break;
            case 'r':
                options.rx_depth =
                    static_cast<int>(parse_number(optarg, "--rx-depth", 1, kMaxDepth));
                break;
            case 't':
                options.tx_depth =
                    static_cast<int>(parse_number(optarg, "--tx-depth", 1, kMaxDepth));
                break;
            case 'g':
                options.gid_index = static_cast<int>(parse_number(optarg, "--gid-idx", 0, 255));
                break;
            case 'm':
                options.mtu = static_cast<int>(parse_number(optarg, "--mtu", 256, 4096));
                if ((options.mtu & (options.mtu - 1)) != 0) {  // a power of two from 256 to 4096
                    throw UsageError("--mtu must be 256, 512, 1024, 2048 or 4096 (got '" +
                                     std::string(optarg) + "')");
                }
                break;
            case 'p':
                options.tcp_port = static_cast<int>(parse_number(optarg, "--port", 1, 65535));
                break;
            case kOptBind:
                options.bind_address = optarg;
                break;
            case kOptTimeout:
                options.timeout_seconds =
                    static_cast<int>(parse_number(optarg, "--timeout", 1, 3600));
                break;
            case 'n':
                options.iters = parse_number(optarg, "--iters", 2, 100000000);
                break;
            case kOptWarmup:
                options.warmup = parse_number(optarg, "--warmup", 0, 100000000);
                break;
            case kOptCheck:
                options.check = true;
                break;
            case kOptLatency:
                if (*optarg == '\0') {
                    throw UsageError("--latency-file needs a path");
                }
                options.latency_file = optarg;
                break;
            case 'h':
                options.help = true;
                break;
            case ':':
                throw UsageError(std::string("option '") + argv[optind - 1] + "' needs a value");
            default:
                throw UsageError(
                    optopt != 0 ? std::string("unknown option '-") + static_cast<char>(optopt) + "'"
                                : std::string("unknown option '") + argv[optind - 1] + "'");
        }
    }
    if (optind < argc) {
        options.host = argv[optind++];
    }
    if (optind < argc) {
        throw UsageError(std::string("unexpected argument '") + argv[optind] + "'");
    }
    if (!options.host.empty() && !options.bind_address.empty()) {
        throw UsageError("--bind is for the server; a client (HOST given) does not listen");
    }
    return options;
}
//! [parse_options]

//! [enum_text]
[[nodiscard]] const char* port_state_text(ibv_port_state state) {
    switch (state) {
        case IBV_PORT_NOP:
            return "PORT_NOP";
        case IBV_PORT_DOWN:
            return "PORT_DOWN";
        case IBV_PORT_INIT:
            return "PORT_INIT";
        case IBV_PORT_ARMED:
            return "PORT_ARMED";
        case IBV_PORT_ACTIVE:
            return "PORT_ACTIVE";
        case IBV_PORT_ACTIVE_DEFER:
            return "PORT_ACTIVE_DEFER";
        default:
            return "unknown";
    }
}

[[nodiscard]] const char* link_layer_text(std::uint8_t link_layer) {
    switch (link_layer) {
        case IBV_LINK_LAYER_UNSPECIFIED:  // old kernels report 0 for InfiniBand
        case IBV_LINK_LAYER_INFINIBAND:
            return "InfiniBand";
        case IBV_LINK_LAYER_ETHERNET:
            return "Ethernet";
        default:
            return "unknown";
    }
}

// The MTU enum is not the MTU: IBV_MTU_1024 is 3. Returns 0 for an unknown value.
[[nodiscard]] int mtu_bytes(ibv_mtu mtu) {
    switch (mtu) {
        case IBV_MTU_256:
            return 256;
        case IBV_MTU_512:
            return 512;
        case IBV_MTU_1024:
            return 1024;
        case IBV_MTU_2048:
            return 2048;
        case IBV_MTU_4096:
            return 4096;
        default:
            return 0;
    }
}

[[nodiscard]] const char* gid_type_text(ibv_gid_type type) {
    switch (type) {
        case IBV_GID_TYPE_IB:
            return "IB";
        case IBV_GID_TYPE_ROCE_V1:
            return "RoCE v1";
        case IBV_GID_TYPE_ROCE_V2:
            return "RoCE v2";
        default:
            return "unknown";
    }
}

[[nodiscard]] const char* qp_state_text(ibv_qp_state state) {
    switch (state) {
        case IBV_QPS_RESET:
            return "RESET";
        case IBV_QPS_INIT:
            return "INIT";
        case IBV_QPS_RTR:
            return "RTR";
        case IBV_QPS_RTS:
            return "RTS";
        case IBV_QPS_SQD:
            return "SQD";
        case IBV_QPS_SQE:
            return "SQE";
        case IBV_QPS_ERR:
            return "ERR";
        default:
            return "unknown";
    }
}
//! [enum_text]

//! [gid_format]
using GidBytes = std::array<std::uint8_t, 16>;

// One row of a port's GID table, as the GID choice sees it.
struct GidEntry {
    std::uint32_t index = 0;
    GidBytes gid{};
    ibv_gid_type type = IBV_GID_TYPE_IB;
};

[[nodiscard]] bool is_zero_gid(const std::array<std::uint8_t, 16>& gid) {
    return std::all_of(gid.begin(), gid.end(), [](std::uint8_t b) { return b == 0; });
}

// ::ffff:a.b.c.d, the form RoCE v2 gives an IPv4 address.
[[nodiscard]] bool is_ipv4_mapped(const std::array<std::uint8_t, 16>& gid) {
    return std::all_of(gid.begin(), gid.begin() + 10, [](std::uint8_t b) { return b == 0; }) &&
           gid[10] == 0xff && gid[11] == 0xff;
}

// A GID is an IPv6 address; inet_ntop already writes an IPv4-mapped one as ::ffff:127.0.0.1.
[[nodiscard]] std::string format_gid(const std::array<std::uint8_t, 16>& gid) {
    char text[INET6_ADDRSTRLEN] = {};
    inet_ntop(AF_INET6, gid.data(), text, sizeof text);
    return text;
}

// "127.0.0.1" for ::ffff:127.0.0.1, nothing for any other GID.
[[nodiscard]] std::optional<std::string> ipv4_of(const std::array<std::uint8_t, 16>& gid) {
    if (!is_ipv4_mapped(gid)) {
        return std::nullopt;
    }
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, gid.data() + 12, text, sizeof text);
    return std::string(text);
}
//! [gid_format]

//! [gid_choice]
struct GidChoice {
    std::uint32_t index = 0;
    std::string reason;
};

// Prefers RoCE v2 with an IPv4-mapped address, then RoCE v2, then anything else valid (RoCE v1,
// IB); zero GIDs are skipped, and the lowest index wins among equals. Nothing when none is valid.
[[nodiscard]] std::optional<GidChoice> choose_gid(std::span<const GidEntry> table) {
    const auto rank = [](const GidEntry& entry) {
        if (entry.type == IBV_GID_TYPE_ROCE_V2) {
            return is_ipv4_mapped(entry.gid) ? 0 : 1;
        }
        return 2;
    };
    const GidEntry* best = nullptr;
    for (const GidEntry& entry : table) {
        if (is_zero_gid(entry.gid)) {
            continue;
        }
        if (best == nullptr || rank(entry) < rank(*best) ||
            (rank(entry) == rank(*best) && entry.index < best->index)) {
            best = &entry;
        }
    }
    if (best == nullptr) {
        return std::nullopt;
    }
    std::string reason;
    switch (rank(*best)) {
        case 0:
            reason = "RoCE v2 with an IPv4-mapped address";
            break;
        case 1:
            reason = "RoCE v2 with an IPv6 address; no IPv4-mapped RoCE v2 entry";
            break;
        default:
            reason = best->type == IBV_GID_TYPE_IB
                         ? "InfiniBand GID; inside a subnet the LID is enough"
                         : "RoCE v1; no RoCE v2 entry";
    }
    return GidChoice{best->index, format_gid(best->gid) + ", " + reason};
}

[[nodiscard]] std::string recommendation_line(const std::string& device, int port,
                                              const std::optional<GidChoice>& choice) {
    std::string line =
        "recommended GID index for " + device + " port " + std::to_string(port) + ": ";
    if (!choice) {
        return line + "none (the GID table has no valid entry)";
    }
    return line + std::to_string(choice->index) + " (" + choice->reason + ")";
}
//! [gid_choice]

[[nodiscard]] std::string port_warning(const std::string& device, int port, ibv_port_state state) {
    return std::string("warning: ") + device + " port " + std::to_string(port) + " is " +
           port_state_text(state) + ", not PORT_ACTIVE: connections through it will fail";
}

//! [open_device]
// Names under /sys/class/infiniband: the kernel's view, which needs no userspace provider.
[[nodiscard]] std::vector<std::string> kernel_device_names() {
    std::vector<std::string> names;
    if (DIR* dir = opendir("/sys/class/infiniband")) {
        while (const dirent* entry = readdir(dir)) {
            if (entry->d_name[0] != '.') {
                names.emplace_back(entry->d_name);
            }
        }
        closedir(dir);
    }
    std::sort(names.begin(), names.end());
    return names;
}

[[nodiscard]] std::string join(const std::vector<std::string>& items) {
    std::string text;
    for (const std::string& item : items) {
        text += (text.empty() ? "" : ", ") + item;
    }
    return text;
}

// Returns the device list, or throws the no-device or no-provider error.
[[nodiscard]] DeviceList get_device_list(int& count) {
    count = 0;
    DeviceList list(ibv_get_device_list(&count));
    // ENOSYS: the kernel has no RDMA support loaded at all, which is "no device" too.
    if (!list && errno != ENOSYS) {
        throw std::system_error(errno, std::generic_category(), "ibv_get_device_list");
    }
    if (count == 0) {
        const std::vector<std::string> kernel_names = kernel_device_names();
        if (!kernel_names.empty()) {
            throw TutorialError(kExitNoProvider,
                                "/sys/class/infiniband lists " + join(kernel_names) +
                                    " but libibverbs found no device",
                                "install the userspace provider: sudo apt-get install "
                                "ibverbs-providers");
        }
        throw TutorialError(kExitNoDevice, "no RDMA device found",
                            std::string("get one of: a real RDMA NIC; Soft-RoCE on this host (sudo "
                                        "modprobe rdma_rxe && sudo rdma link add rxe0 type rxe "
                                        "netdev eth0); or the lab (lab/softroce run -- ./") +
                                kProgram + ")");
    }
    return list;
}

// The named device, or the first one; an unknown name lists those that exist.
[[nodiscard]] ibv_device* select_device(std::span<ibv_device* const> devices,
                                        const std::string& name) {
    if (name.empty()) {
        return devices.front();
    }
    std::vector<std::string> found;
    for (ibv_device* device : devices) {
        if (name == ibv_get_device_name(device)) {
            return device;
        }
        found.emplace_back(ibv_get_device_name(device));
    }
    throw TutorialError(kExitNoSuchDevice,
                        "no RDMA device named '" + name + "' (found: " + join(found) + ")");
}

[[nodiscard]] Context open_device(ibv_device* device) {
    Context context(ibv_open_device(device));
    if (!context) {
        throw std::system_error(errno, std::generic_category(), "ibv_open_device");
    }
    return context;
}

[[nodiscard]] std::string ports_text(int port_count) {
    return port_count == 1 ? "1" : "1 to " + std::to_string(port_count);
}

// A port number the device does not have is exit code 5, like an unknown device.
void check_port(const std::string& device, int port, int port_count) {
    if (port < 1 || port > port_count) {
        throw TutorialError(kExitNoSuchDevice, device + " has no port " + std::to_string(port) +
                                                   " (ports: " + ports_text(port_count) + ")");
    }
}
//! [open_device]

//! [gid_table]
// Every valid GID of one port. ibv_query_gid_table (rdma-core 30+) returns the valid entries of
// every port with their types, so we ask for all of them and keep this port's.
[[nodiscard]] std::vector<GidEntry> query_gid_table(ibv_context* context, int port,
                                                    std::size_t table_size) {
    std::vector<ibv_gid_entry> entries(table_size);
    const ssize_t count = ibv_query_gid_table(context, entries.data(), entries.size(), 0);
    if (count < 0) {
        throw std::system_error(static_cast<int>(-count), std::generic_category(),
                                "ibv_query_gid_table");
    }
    std::vector<GidEntry> table;
    for (ssize_t i = 0; i < count; ++i) {
        const ibv_gid_entry& entry = entries[static_cast<std::size_t>(i)];
        if (entry.port_num != static_cast<std::uint32_t>(port)) {
            continue;
        }
        GidEntry row;
        row.index = entry.gid_index;
        std::memcpy(row.gid.data(), entry.gid.raw, row.gid.size());
        row.type = static_cast<ibv_gid_type>(entry.gid_type);
        table.push_back(row);
    }
    std::sort(table.begin(), table.end(),
              [](const GidEntry& a, const GidEntry& b) { return a.index < b.index; });
    return table;
}
//! [gid_table]

//! [limits]
// Values the options allow but this device does not: exit code 2, naming the device limit.
void check_limits(const Options& options, const ibv_device_attr& attr) {
    if (options.size > attr.max_mr_size) {
        throw TutorialError(kExitUsage, "--size " + std::to_string(options.size) +
                                            " is over the device limit max_mr_size = " +
                                            std::to_string(attr.max_mr_size));
    }
    if (options.rx_depth > attr.max_qp_wr) {
        throw TutorialError(kExitUsage, "--rx-depth " + std::to_string(options.rx_depth) +
                                            " is over the device limit max_qp_wr = " +
                                            std::to_string(attr.max_qp_wr));
    }
    if (options.tx_depth > attr.max_qp_wr) {
        throw TutorialError(kExitUsage, "--tx-depth " + std::to_string(options.tx_depth) +
                                            " is over the device limit max_qp_wr = " +
                                            std::to_string(attr.max_qp_wr));
    }
    // One CQ serves both queues, so it needs room for both depths.
    const long long cq_entries = static_cast<long long>(options.rx_depth) + options.tx_depth;
    if (cq_entries > attr.max_cqe) {
        throw TutorialError(
            kExitUsage,
            "--rx-depth " + std::to_string(options.rx_depth) + " + --tx-depth " +
                std::to_string(options.tx_depth) + " = " + std::to_string(cq_entries) +
                " CQ entries is over the device limit max_cqe = " + std::to_string(attr.max_cqe));
    }
}
//! [limits]

//! [memlock]
// "64 KiB" or "unlimited": the soft RLIMIT_MEMLOCK that ibv_reg_mr pins against.
[[nodiscard]] std::string memlock_limit_text() {
    rlimit limit{};
    if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) {
        return "unknown";
    }
    if (limit.rlim_cur == RLIM_INFINITY) {
        return "unlimited";
    }
    return std::to_string(limit.rlim_cur / 1024) + " KiB";
}

// ibv_reg_mr pins the pages; without CAP_IPC_LOCK the pinned total must fit in ulimit -l,
// and the kernel answers ENOMEM when it does not.
[[noreturn]] void throw_reg_mr_error(int err, std::size_t bytes) {
    const std::string message = std::string("ibv_reg_mr: ") + std::strerror(err) +
                                " (registering " + std::to_string(bytes) + " bytes)";
    if (err == ENOMEM) {
        throw TutorialError(kExitRdma, message,
                            "the memlock limit (ulimit -l, now " + memlock_limit_text() +
                                ") is too low to pin " + std::to_string(bytes) +
                                " bytes: raise it with ulimit -l unlimited or in "
                                "/etc/security/limits.conf");
    }
    throw TutorialError(kExitRdma, message);
}
//! [memlock]

//! [resources]
// Declared parent-first: C++ destroys members in reverse, so teardown runs
// QP -> CQ -> MR -> buffer -> PD -> context -> device list, each child before its parent.
struct Resources {
    DeviceList device_list;
    Context context;
    ProtectionDomain pd;
    Buffer buffer;
    MemoryRegion mr;
    CompletionQueue cq;
    QueuePair qp;
};
//! [resources]

struct QueuePairCaps {
    ibv_qp_cap requested{};
    ibv_qp_cap granted{};
    ibv_qp_state state = IBV_QPS_RESET;
};

// -m 1024 -> IBV_MTU_1024; nothing for a size that is not an IB MTU.
[[nodiscard]] std::optional<ibv_mtu> mtu_from_bytes(int bytes) {
    for (const ibv_mtu mtu : {IBV_MTU_256, IBV_MTU_512, IBV_MTU_1024, IBV_MTU_2048, IBV_MTU_4096}) {
        if (mtu_bytes(mtu) == bytes) {
            return mtu;
        }
    }
    return std::nullopt;
}

//! [wire_format]
// ibv_rc_pingpong's handshake message: "%04x:%06x:%06x:%s" (LID, QPN, PSN, GID as 32 hex digits)
// and the terminating NUL, 52 bytes. The client sends first; the server answers; the client ends
// with the 5 bytes "done" plus NUL.
inline constexpr std::size_t kWireMessageSize =
    sizeof "0000:000000:000000:00000000000000000000000000000000";
static_assert(kWireMessageSize == 52);
inline constexpr char kDoneMessage[] = "done";  // sent with its NUL: 5 bytes
using WireMessage = std::array<char, kWireMessageSize>;

// What one side tells the other about its QP.
struct QpEndpointInfo {
    std::uint16_t lid = 0;
    std::uint32_t qpn = 0;  // 24 bits
    std::uint32_t psn = 0;  // 24 bits
    GidBytes gid{};
};

[[nodiscard]] WireMessage format_wire_message(const QpEndpointInfo& info) {
    WireMessage message{};
    // gid_to_wire_gid: the 16 GID bytes in order, as 32 lowercase hex digits.
    char gid_hex[33];
    for (std::size_t i = 0; i < info.gid.size(); ++i) {
        std::snprintf(gid_hex + 2 * i, 3, "%02x", info.gid[i]);
    }
    std::snprintf(message.data(), message.size(), "%04x:%06x:%06x:%s", info.lid,
                  info.qpn & 0xffffff, info.psn & 0xffffff, gid_hex);
    return message;
}

// The bytes as a C string literal would show them, for error messages: "ab\x01\0".
[[nodiscard]] std::string printable_bytes(std::span<const char> bytes, std::size_t limit = 64) {
    std::string text = "\"";
    for (std::size_t i = 0; i < bytes.size() && i < limit; ++i) {
        const auto c = static_cast<unsigned char>(bytes[i]);
        if (c == '\0') {
            text += "\\0";
        } else if (c == '"' || c == '\\') {
            text += '\\';
            text += static_cast<char>(c);
        } else if (c >= 0x20 && c < 0x7f) {
            text += static_cast<char>(c);
        } else {
            char escaped[5];
            std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
            text += escaped;
        }
    }
    return text + (bytes.size() > limit ? "\"..." : "\"");
}

// Checks one field: hex digits only, value at most `max`, exactly `width` digits. Returns what is
// wrong, or nothing (and `value` holds the number).
[[nodiscard]] std::optional<std::string> parse_hex_field(std::string_view field, const char* name,
                                                         std::size_t width, std::uint32_t max,
                                                         std::uint32_t& value) {
    const std::string quoted = " ('" + std::string(field) + "')";
    if (field.empty()) {
        return std::string(name) + " is empty";
    }
    if (field.find_first_not_of("0123456789abcdefABCDEF") != std::string_view::npos) {
        return std::string(name) + " is not hex" + quoted;
    }
    const std::size_t first_significant = std::min(field.find_first_not_of('0'), field.size());
    std::uint64_t number = 0;
    if (field.size() - first_significant <= 8) {
        [[maybe_unused]] const auto parsed = std::from_chars(
            field.data() + first_significant, field.data() + field.size(), number, 16);
    } else {
        number = std::uint64_t{max} + 1;  // more than 8 significant digits: too big anyway
    }
    if (number > max) {
        char limit[48];
        std::snprintf(limit, sizeof limit, " is out of range (at most 0x%x)", max);
        return std::string(name) + limit + quoted;
    }
    if (field.size() != width) {
        return std::string(name) + " must be exactly " + std::to_string(width) +
               " hex digits, got " + std::to_string(field.size()) + quoted;
    }
    value = static_cast<std::uint32_t>(number);
    return std::nullopt;
}

// Strict parser: exactly 52 bytes, the NUL last, four ':'-separated fields of exactly 4, 6, 6 and
// 32 hex digits. Returns the info, or sets `error` to what is wrong.
[[nodiscard]] std::optional<QpEndpointInfo> parse_wire_message(std::span<const char> bytes,
                                                               std::string& error) {
    if (bytes.size() != kWireMessageSize) {
        error = "expected " + std::to_string(kWireMessageSize) + " bytes, got " +
                std::to_string(bytes.size());
        return std::nullopt;
    }
    if (bytes.back() != '\0') {
        error = "the message does not end with a NUL byte";
        return std::nullopt;
    }
    const std::string_view text(bytes.data(), bytes.size() - 1);
    if (const auto nul = text.find('\0'); nul != std::string_view::npos) {
        error = "NUL byte at offset " + std::to_string(nul) + ", before the end of the message";
        return std::nullopt;
    }
    std::array<std::string_view, 4> fields;
    std::size_t start = 0;
    for (std::size_t i = 0; i < fields.size(); ++i) {
        const std::size_t colon = i + 1 < fields.size() ? text.find(':', start) : text.size();
        if (colon == std::string_view::npos) {
            error = "expected 4 fields LID:QPN:PSN:GID separated by ':', found " +
                    std::to_string(i + 1);
            return std::nullopt;
        }
        fields[i] = text.substr(start, colon - start);
        start = colon + 1;
    }
    QpEndpointInfo info;
    std::uint32_t lid = 0;
    if (auto problem = parse_hex_field(fields[0], "LID", 4, 0xffff, lid)) {
        error = *problem;
        return std::nullopt;
    }
    info.lid = static_cast<std::uint16_t>(lid);
    if (auto problem = parse_hex_field(fields[1], "QPN", 6, 0xffffff, info.qpn)) {
        error = *problem;
        return std::nullopt;
    }
    if (auto problem = parse_hex_field(fields[2], "PSN", 6, 0xffffff, info.psn)) {
        error = *problem;
        return std::nullopt;
    }
    if (info.qpn < 2) {
        error = "QPN " + std::to_string(info.qpn) + " is a special QP (QP0/QP1), never an RC QP";
        return std::nullopt;
    }
    const std::string_view gid = fields[3];
    if (gid.size() != 2 * info.gid.size()) {
        error = "GID must be exactly 32 hex digits, got " + std::to_string(gid.size()) + " ('" +
                std::string(gid) + "')";
        return std::nullopt;
    }
    for (std::size_t i = 0; i < info.gid.size(); ++i) {
        std::uint32_t byte = 0;
        if (parse_hex_field(gid.substr(2 * i, 2), "GID", 2, 0xff, byte)) {
            error = "GID is not hex ('" + std::string(gid) + "')";
            return std::nullopt;
        }
        info.gid[i] = static_cast<std::uint8_t>(byte);
    }
    return info;
}
//! [wire_format]

//! [qp_masks]
// The attributes ibv_modify_qp(3) requires, and allows, for each step of an RC QP's life.
// RESET->INIT: where the QP lives (port, P_Key) and what the peer may do to our memory.
inline constexpr int kInitMask =
    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
// INIT->RTR: who the peer is (address vector, QPN), how big its packets are, its first PSN,
// how many RDMA reads it may have in flight at our side, and how long it waits after an RNR NAK.
inline constexpr int kRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
// RTR->RTS: our sending side: first PSN, ACK timeout, retry counts, our RDMA reads in flight.
inline constexpr int kRtsMask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;

// The mask for one RC transition, or 0 for a transition this tutorial does not make.
[[nodiscard]] constexpr int rc_transition_mask(ibv_qp_state from, ibv_qp_state to) {
    if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) {
        return kInitMask;
    }
    if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
        return kRtrMask;
    }
    if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
        return kRtsMask;
    }
    return 0;
}

// "IBV_QP_STATE | IBV_QP_PKEY_INDEX | ...", for printing a transition.
[[nodiscard]] std::string attr_mask_text(int mask) {
    static constexpr std::pair<int, const char*> kNames[] = {
        {IBV_QP_STATE, "IBV_QP_STATE"},
        {IBV_QP_PKEY_INDEX, "IBV_QP_PKEY_INDEX"},
        {IBV_QP_PORT, "IBV_QP_PORT"},
        {IBV_QP_ACCESS_FLAGS, "IBV_QP_ACCESS_FLAGS"},
        {IBV_QP_AV, "IBV_QP_AV"},
        {IBV_QP_PATH_MTU, "IBV_QP_PATH_MTU"},
        {IBV_QP_DEST_QPN, "IBV_QP_DEST_QPN"},
        {IBV_QP_RQ_PSN, "IBV_QP_RQ_PSN"},
        {IBV_QP_MAX_DEST_RD_ATOMIC, "IBV_QP_MAX_DEST_RD_ATOMIC"},
        {IBV_QP_MIN_RNR_TIMER, "IBV_QP_MIN_RNR_TIMER"},
        {IBV_QP_TIMEOUT, "IBV_QP_TIMEOUT"},
        {IBV_QP_RETRY_CNT, "IBV_QP_RETRY_CNT"},
        {IBV_QP_RNR_RETRY, "IBV_QP_RNR_RETRY"},
        {IBV_QP_SQ_PSN, "IBV_QP_SQ_PSN"},
        {IBV_QP_MAX_QP_RD_ATOMIC, "IBV_QP_MAX_QP_RD_ATOMIC"},
    };
    std::string text;
    for (const auto& [bit, name] : kNames) {
        if ((mask & bit) != 0) {
            text += (text.empty() ? "" : " | ") + std::string(name);
            mask &= ~bit;
        }
    }
    if (mask != 0) {
        text += (text.empty() ? "" : " | ") + std::to_string(mask);
    }
    return text;
}
//! [qp_masks]

//! [qp_attributes]
// The retry policy decides how fast a dead peer is noticed: a send that is not acknowledged is
// retried retry_cnt times, each after 4.096 us * 2^timeout. 14 gives 67 ms, so 7 tries: ~0.5 s.
// Not 7 retries, as ibv_rc_pingpong asks: Soft-RoCE (rxe) takes retry_cnt 7 to mean "for ever".
inline constexpr std::uint8_t kAckTimeout = 14;
inline constexpr std::uint8_t kRetryCount = 6;
inline constexpr std::uint8_t kRnrRetry =
    7;  // 7 means "retry for ever" on a receiver-not-ready NAK
inline constexpr std::uint8_t kMinRnrTimer = 12;  // 0.64 ms, as ibv_rc_pingpong

[[nodiscard]] ibv_qp_attr init_attributes(int ib_port) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = static_cast<std::uint8_t>(ib_port);
    attr.qp_access_flags = 0;  // two-sided SEND/RECV only: the peer may not touch our memory
    return attr;
}

// On Ethernet (RoCE) every packet carries a GRH, so we always give one: with the remote GID and
// our source GID index. On InfiniBand the LID routes inside the subnet; a GRH is added only when
// the peer sent a GID (as ibv_rc_pingpong does).
[[nodiscard]] ibv_qp_attr rtr_attributes(const QpEndpointInfo& remote, ibv_mtu path_mtu,
                                         bool ethernet, int sgid_index, int ib_port) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = path_mtu;
    attr.dest_qp_num = remote.qpn;
    attr.rq_psn = remote.psn;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = kMinRnrTimer;
    attr.ah_attr.dlid = remote.lid;
    attr.ah_attr.sl = 0;
    attr.ah_attr.src_path_bits = 0;
    attr.ah_attr.port_num = static_cast<std::uint8_t>(ib_port);
    if (ethernet || !is_zero_gid(remote.gid)) {
        attr.ah_attr.is_global = 1;
        attr.ah_attr.grh.hop_limit = 1;
        std::memcpy(attr.ah_attr.grh.dgid.raw, remote.gid.data(), remote.gid.size());
        attr.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(sgid_index);
    }
    return attr;
}

[[nodiscard]] ibv_qp_attr rts_attributes(std::uint32_t local_psn) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = kAckTimeout;
    attr.retry_cnt = kRetryCount;
    attr.rnr_retry = kRnrRetry;
    attr.sq_psn = local_psn;
    attr.max_rd_atomic = 1;
    return attr;
}
//! [qp_attributes]

//! [socket]
// A TCP socket that closes itself: the handshake's only state besides the QP.
class Socket {
  public:
    Socket() = default;
    explicit Socket(int fd) : fd_(fd) {}
    Socket(Socket&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
    Socket& operator=(Socket&& other) noexcept {
        if (this != &other) {
            reset();
            fd_ = std::exchange(other.fd_, -1);
        }
        return *this;
    }
    Socket(const Socket&) = delete;
    Socket& operator=(const Socket&) = delete;
    ~Socket() { reset(); }
    [[nodiscard]] int get() const noexcept { return fd_; }
    void reset() noexcept {
        if (fd_ >= 0) {
            ::close(fd_);
            fd_ = -1;
        }
    }

  private:
    int fd_ = -1;
};

using Clock = std::chrono::steady_clock;

// SIGINT/SIGTERM set this flag; every wait checks it, so ^C ends the program through main().
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int signal_number) {
    g_stop_signal = signal_number;
}

void install_stop_handlers() {
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;  // no SA_RESTART: a blocked poll() returns EINTR and we look at the flag
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
}

void throw_if_stopped() {
    if (g_stop_signal != 0) {
        throw TutorialError(kExitInterrupted, std::string("interrupted by ") +
                                                  (g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM"));
    }
}

[[nodiscard]] int milliseconds_left(Clock::time_point deadline) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    return static_cast<int>(std::max<std::int64_t>(0, left.count()));
}

// Waits until fd is readable (POLLIN) or writable (POLLOUT). False when the deadline passed.
[[nodiscard]] bool wait_for(int fd, short events, Clock::time_point deadline) {
    for (;;) {
        throw_if_stopped();
        pollfd entry{fd, events, 0};
        const int ready = ::poll(&entry, 1, milliseconds_left(deadline));
        if (ready > 0) {
            return true;
        }
        if (ready == 0) {
            return false;
        }
        if (errno != EINTR) {
            throw std::system_error(errno, std::generic_category(), "poll");
        }
    }
}

[[nodiscard]] std::string endpoint_text(const sockaddr* address, socklen_t length) {
    char host[NI_MAXHOST] = "?";
    char service[NI_MAXSERV] = "?";
    getnameinfo(address, length, host, sizeof host, service, sizeof service,
                NI_NUMERICHOST | NI_NUMERICSERV);
    return std::string(std::strchr(host, ':') != nullptr ? "[" : "") + host +
           (std::strchr(host, ':') != nullptr ? "]" : "") + ":" + service;
}

struct AddressList {
    addrinfo* list = nullptr;
    AddressList(const char* host, int port, bool passive) {
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = passive ? AI_PASSIVE : 0;
        const std::string service = std::to_string(port);
        if (const int rc = getaddrinfo(host, service.c_str(), &hints, &list); rc != 0) {
            throw TutorialError(kExitUsage, std::string("cannot resolve '") +
                                                (host != nullptr ? host : "*") +
                                                "': " + gai_strerror(rc));
        }
    }
    AddressList(const AddressList&) = delete;
    AddressList& operator=(const AddressList&) = delete;
    ~AddressList() { freeaddrinfo(list); }
};

// The server's listening socket on --bind ADDR (default: every address) and -p PORT.
[[nodiscard]] Socket listen_on(const std::string& bind_address, int port) {
    const AddressList addresses(bind_address.empty() ? nullptr : bind_address.c_str(), port, true);
    int last_error = 0;
    for (const addrinfo* a = addresses.list; a != nullptr; a = a->ai_next) {
        Socket listener(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
        if (listener.get() < 0) {
            last_error = errno;
            continue;
        }
        const int on = 1;
        setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
        if (::bind(listener.get(), a->ai_addr, a->ai_addrlen) == 0 &&
            ::listen(listener.get(), 1) == 0) {
            return listener;
        }
        last_error = errno;
    }
    const std::string where =
        (bind_address.empty() ? "port " : bind_address + " port ") + std::to_string(port);
    if (last_error == EADDRINUSE) {
        throw TutorialError(kExitPeer,
                            "cannot listen on " + where + ": " + std::strerror(last_error),
                            "another program (another server, or ibv_rc_pingpong) listens there: "
                            "stop it or choose another port with -p");
    }
    throw TutorialError(kExitPeer, "cannot listen on " + where + ": " + std::strerror(last_error));
}

// Waits for one client, at most timeout; returns the connected socket and names the peer.
[[nodiscard]] Socket accept_client(const Socket& listener, int port, std::chrono::seconds timeout,
                                   std::string& peer_name) {
    if (!wait_for(listener.get(), POLLIN, Clock::now() + timeout)) {
        throw TutorialError(kExitTimeout,
                            "no client connected to port " + std::to_string(port) + " within " +
                                std::to_string(timeout.count()) + " s",
                            "start the client, or give it more time with --timeout");
    }
    sockaddr_storage address{};
    socklen_t length = sizeof address;
    Socket client(::accept4(listener.get(), reinterpret_cast<sockaddr*>(&address), &length,
                            SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (client.get() < 0) {
        throw std::system_error(errno, std::generic_category(), "accept");
    }
    peer_name = endpoint_text(reinterpret_cast<sockaddr*>(&address), length);
    return client;
}

// Connects to HOST:PORT, retrying a refused connection (no server yet) until the timeout.
[[nodiscard]] Socket connect_to(const std::string& host, int port, std::chrono::seconds timeout,
                                std::string& peer_name) {
    const AddressList addresses(host.c_str(), port, false);
    const Clock::time_point deadline = Clock::now() + timeout;
    int last_error = 0;
    for (;;) {
        for (const addrinfo* a = addresses.list; a != nullptr; a = a->ai_next) {
            Socket peer(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                                 a->ai_protocol));
            if (peer.get() < 0) {
                last_error = errno;
                continue;
            }
            int error = 0;
            if (::connect(peer.get(), a->ai_addr, a->ai_addrlen) != 0) {
                error = errno;
                if (error == EINPROGRESS || error == EINTR) {
                    socklen_t length = sizeof error;
                    error =
                        wait_for(peer.get(), POLLOUT, deadline) &&
                                getsockopt(peer.get(), SOL_SOCKET, SO_ERROR, &error, &length) == 0
                            ? error
                            : ETIMEDOUT;
                }
            }
            if (error == 0) {
                peer_name = endpoint_text(a->ai_addr, a->ai_addrlen);
                return peer;
            }
            last_error = error;
        }
        if (last_error != ECONNREFUSED || Clock::now() >= deadline) {
            break;
        }
        // Nobody listens yet: the server may still be starting. Try again shortly.
        (void)wait_for(-1, 0, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
    }
    const std::string what = "cannot connect to " + host + " port " + std::to_string(port) + ": " +
                             std::strerror(last_error) + " (tried for " +
                             std::to_string(timeout.count()) + " s)";
    if (last_error == ECONNREFUSED) {
        throw TutorialError(kExitPeer, what,
                            "no server listens there: start the server first, or check -p");
    }
    throw TutorialError(last_error == ETIMEDOUT ? kExitTimeout : kExitPeer, what);
}

// Sends every byte, whatever the kernel takes per call (partial writes, EINTR, EAGAIN).
void send_all(const Socket& peer, std::span<const char> bytes, std::chrono::seconds timeout,
              const char* what) {
    const Clock::time_point deadline = Clock::now() + timeout;
    while (!bytes.empty()) {
        const ssize_t sent = ::send(peer.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (sent > 0) {
            bytes = bytes.subspan(static_cast<std::size_t>(sent));
        } else if (errno == EAGAIN || errno == EINTR) {
            if (!wait_for(peer.get(), POLLOUT, deadline)) {
                throw TutorialError(kExitTimeout, std::string("timed out sending ") + what);
            }
        } else {
            throw TutorialError(kExitPeer, std::string("cannot send ") + what + ": " +
                                               std::strerror(errno) + " (the peer went away)");
        }
    }
}

// Reads up to bytes.size() bytes, looping over short reads; stops early only at end of stream.
// Returns how many bytes arrived. A silent peer is a timeout error.
[[nodiscard]] std::size_t receive_all(const Socket& peer, std::span<char> bytes,
                                      std::chrono::seconds timeout, const char* what) {
    const Clock::time_point deadline = Clock::now() + timeout;
    std::size_t received = 0;
    while (received < bytes.size()) {
        const ssize_t got = ::recv(peer.get(), bytes.data() + received, bytes.size() - received, 0);
        if (got > 0) {
            received += static_cast<std::size_t>(got);
        } else if (got == 0) {
            break;  // the peer closed the connection
        } else if (errno == EAGAIN || errno == EINTR) {
            if (!wait_for(peer.get(), POLLIN, deadline)) {
                throw TutorialError(kExitTimeout,
                                    std::string("timed out after ") +
                                        std::to_string(timeout.count()) + " s waiting for " + what +
                                        " (got " + std::to_string(received) + " of " +
                                        std::to_string(bytes.size()) + " bytes)",
                                    "the peer connected but does not speak the handshake: is it "
                                    "ibv_rc_pingpong-compatible?");
            }
        } else {
            throw TutorialError(kExitPeer,
                                std::string("cannot read ") + what + ": " + std::strerror(errno));
        }
    }
    return received;
}
//! [socket]

//! [handshake]
// Reads the peer's 52-byte message and parses it strictly; anything else is a peer error that
// shows what arrived.
[[nodiscard]] QpEndpointInfo receive_endpoint_info(const Socket& peer, const std::string& peer_name,
                                                   std::chrono::seconds timeout) {
    WireMessage message{};
    const std::size_t got = receive_all(peer, message, timeout, "the peer's QP address");
    const std::span<const char> bytes(message.data(), got);
    if (got == 0) {
        throw TutorialError(kExitPeer,
                            peer_name + " closed the connection before sending its QP address",
                            "the peer failed before the handshake: look at its own error message");
    }
    std::string error;
    const std::optional<QpEndpointInfo> info = parse_wire_message(bytes, error);
    if (!info) {
        throw TutorialError(
            kExitPeer,
            "bad handshake from " + peer_name + ": " + error + "; received " + std::to_string(got) +
                " bytes: " + printable_bytes(bytes),
            "the peer must speak ibv_rc_pingpong's format LID:QPN:PSN:GID (52 bytes)");
    }
    return *info;
}

// Client side: send ours, read theirs, connect our QP (connect_qp), then "done".
// Our QP is in RTR before "done", so the server may send as soon as it reads it.
template <typename ConnectQp>
[[nodiscard]] QpEndpointInfo client_handshake(const Socket& server, const std::string& server_name,
                                              const QpEndpointInfo& local,
                                              std::chrono::seconds timeout, ConnectQp connect_qp) {
    // One send() for the whole message: ibv_rc_pingpong's server takes it in a single read().
    const WireMessage message = format_wire_message(local);
    send_all(server, message, timeout, "our QP address");
    const QpEndpointInfo remote = receive_endpoint_info(server, server_name, timeout);
    connect_qp(remote);
    send_all(server, std::span(kDoneMessage, sizeof kDoneMessage), timeout, "\"done\"");
    return remote;
}

// Server side: read theirs, connect our QP, answer with ours, wait for "done".
// The server connects before it answers: the client may send right after it has our address.
template <typename ConnectQp>
[[nodiscard]] QpEndpointInfo server_handshake(const Socket& client, const std::string& client_name,
                                              const QpEndpointInfo& local,
                                              std::chrono::seconds timeout, ConnectQp connect_qp) {
    const QpEndpointInfo remote = receive_endpoint_info(client, client_name, timeout);
    connect_qp(remote);
    const WireMessage message = format_wire_message(local);
    send_all(client, message, timeout, "our QP address");
    std::array<char, sizeof kDoneMessage> done{};
    const std::size_t got = receive_all(client, done, timeout, "\"done\"");
    if (got != done.size() || std::memcmp(done.data(), kDoneMessage, done.size()) != 0) {
        throw TutorialError(
            kExitPeer, "bad handshake from " + client_name +
                           ": expected \"done\" and a NUL, received " + std::to_string(got) +
                           " bytes: " + printable_bytes(std::span<const char>(done.data(), got)));
    }
    return remote;
}
//! [handshake]

//! [local_port]
// What the peer needs to reach us, besides the QPN: the port's LID, link layer and MTU, and the
// GID index, chosen as in step 01 or given with -g.
struct LocalPort {
    ibv_port_attr attr{};
    int gid_index = 0;
    GidBytes gid{};
};

[[nodiscard]] LocalPort query_local_port(ibv_context* context, const Options& options,
                                         int port_count) {
    LocalPort local;
    if (const int rc =
            ibv_query_port(context, static_cast<std::uint8_t>(options.ib_port), &local.attr);
        rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_query_port");
    }
    const std::vector<GidEntry> table = query_gid_table(
        context, options.ib_port, static_cast<std::size_t>(local.attr.gid_tbl_len) * port_count);
    std::optional<std::uint32_t> index;
    if (options.gid_index >= 0) {
        index = static_cast<std::uint32_t>(options.gid_index);
    } else if (const std::optional<GidChoice> choice = choose_gid(table)) {
        index = choice->index;
    }
    const auto entry = std::find_if(table.begin(), table.end(),
                                    [&](const GidEntry& e) { return index && e.index == *index; });
    if (entry != table.end()) {
        local.gid_index = static_cast<int>(entry->index);
        local.gid = entry->gid;
    } else if (options.gid_index >= 0) {
        throw TutorialError(kExitNoSuchDevice,
                            "port " + std::to_string(options.ib_port) +
                                " has no valid GID at index " + std::to_string(options.gid_index),
                            "step01_devices lists the GID table");
    } else if (local.attr.link_layer == IBV_LINK_LAYER_ETHERNET) {
        throw TutorialError(kExitNoSuchDevice, "port " + std::to_string(options.ib_port) +
                                                   " has no valid GID, and RoCE needs one");
    }
    return local;
}
//! [local_port]

//! [wc_status]
// ibv_wc_status_str() says "transport retry counter exceeded"; the enum name is what you grep for.
[[nodiscard]] const char* wc_status_name(ibv_wc_status status) {
    switch (status) {
        case IBV_WC_SUCCESS:
            return "IBV_WC_SUCCESS";
        case IBV_WC_LOC_LEN_ERR:
            return "IBV_WC_LOC_LEN_ERR";
        case IBV_WC_LOC_QP_OP_ERR:
            return "IBV_WC_LOC_QP_OP_ERR";
        case IBV_WC_LOC_PROT_ERR:
            return "IBV_WC_LOC_PROT_ERR";
        case IBV_WC_WR_FLUSH_ERR:
            return "IBV_WC_WR_FLUSH_ERR";
        case IBV_WC_REM_INV_REQ_ERR:
            return "IBV_WC_REM_INV_REQ_ERR";
        case IBV_WC_REM_ACCESS_ERR:
            return "IBV_WC_REM_ACCESS_ERR";
        case IBV_WC_REM_OP_ERR:
            return "IBV_WC_REM_OP_ERR";
        case IBV_WC_RETRY_EXC_ERR:
            return "IBV_WC_RETRY_EXC_ERR";
        case IBV_WC_RNR_RETRY_EXC_ERR:
            return "IBV_WC_RNR_RETRY_EXC_ERR";
        default:
            return "IBV_WC_(other)";
    }
}

// The usual reason behind a failed work completion, as a hint for the reader. Providers differ:
// a message longer than the receive buffer is IBV_WC_LOC_LEN_ERR at the receiver and
// IBV_WC_REM_INV_REQ_ERR at the sender on most NICs; Soft-RoCE (rxe) reports
// IBV_WC_LOC_QP_OP_ERR and IBV_WC_REM_OP_ERR.
[[nodiscard]] std::string wc_status_cause(ibv_wc_status status, bool receive) {
    const std::string same_size = "both sides must use the same -s";
    switch (status) {
        case IBV_WC_LOC_LEN_ERR:
            return "a message was longer than the receive buffer posted for it: " + same_size;
        case IBV_WC_LOC_QP_OP_ERR:
            return receive ? "the incoming message did not fit the posted receive (Soft-RoCE "
                             "reports a too-long message so): " +
                                 same_size
                           : "the send request was invalid for this QP";
        case IBV_WC_REM_INV_REQ_ERR:
        case IBV_WC_REM_OP_ERR:
            return "the peer could not take our message, usually because it is longer than the "
                   "peer's receive buffer: " +
                   same_size;
        case IBV_WC_RETRY_EXC_ERR:
            return "the peer's QP stopped acknowledging (after retries): the peer process died or "
                   "was killed, or the path (GID, MTU) is wrong";
        case IBV_WC_RNR_RETRY_EXC_ERR:
            return "the peer had no receive posted for too long";
        case IBV_WC_WR_FLUSH_ERR:
            return "the QP was already in the error state; an earlier completion says why";
        default:
            return "";
    }
}

// A failed work completion: exit code 1, naming the status and its likely cause. (In an error
// completion only wr_id, status and qp_num are valid, not opcode: the caller says which it was.)
[[noreturn]] void throw_wc_error(const ibv_wc& wc, bool receive) {
    throw TutorialError(kExitRdma,
                        std::string(receive ? "receive" : "send") + " failed: " +
                            wc_status_name(wc.status) + " (" + ibv_wc_status_str(wc.status) + ")",
                        wc_status_cause(wc.status, receive));
}
//! [wc_status]

//! [transitions]
// One transition, printed with the attributes it sets.
void modify_qp(ibv_qp* qp, ibv_qp_attr& attr, ibv_qp_state from, ibv_qp_state to) {
    const int mask = rc_transition_mask(from, to);
    // ibv_modify_qp returns the errno value, it does not set errno.
    if (const int rc = ibv_modify_qp(qp, &attr, mask); rc != 0) {
        throw std::system_error(
            rc, std::generic_category(),
            std::string("ibv_modify_qp ") + qp_state_text(from) + "->" + qp_state_text(to));
    }
    std::printf("QP 0x%06x: %s -> %s (%s)\n", qp->qp_num, qp_state_text(from), qp_state_text(to),
                attr_mask_text(mask).c_str());
    std::fflush(stdout);
}

// INIT->RTR->RTS once the peer's address is known.
void connect_qp(ibv_qp* qp, const LocalPort& port, const Options& options,
                const QpEndpointInfo& local, const QpEndpointInfo& remote) {
    const bool ethernet = port.attr.link_layer == IBV_LINK_LAYER_ETHERNET;
    if (ethernet && is_zero_gid(remote.gid)) {
        throw TutorialError(kExitPeer, "the peer sent GID :: (all zeros), but RoCE routes by GID",
                            "start the peer with a GID index (-g), e.g. ibv_rc_pingpong -g 1");
    }
    // Both sides must use the same path MTU: see the chapter.
    const ibv_mtu mtu = options.mtu != 0 ? *mtu_from_bytes(options.mtu) : port.attr.active_mtu;
    ibv_qp_attr rtr = rtr_attributes(remote, mtu, ethernet, port.gid_index, options.ib_port);
    modify_qp(qp, rtr, IBV_QPS_INIT, IBV_QPS_RTR);
    ibv_qp_attr rts = rts_attributes(local.psn);
    modify_qp(qp, rts, IBV_QPS_RTR, IBV_QPS_RTS);
}

[[nodiscard]] std::uint32_t random_psn() {
    std::random_device entropy;
    return std::uniform_int_distribution<std::uint32_t>(0, 0xffffff)(entropy);
}

void print_address(const char* which, const QpEndpointInfo& info) {
    // The same line as ibv_rc_pingpong prints, so the two programs' outputs compare line by line.
    std::printf("  %s LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", which, info.lid, info.qpn,
                info.psn, format_gid(info.gid).c_str());
    std::fflush(stdout);
}
//! [transitions]

//! [check_negotiation]
// --check must be on at both ends, and ibv_rc_pingpong knows nothing of it. After the standard
// handshake (which ends with "done"), ibv_rc_pingpong closes the socket. So each step04 side
// sends "check" (and a NUL) only when --check is on, then reads until the peer closes:
// a peer that closes without a word has no --check, whoever it is, and the wire stays exactly
// ibv_rc_pingpong's when --check is off.
inline constexpr char kCheckMessage[] = "check";

[[nodiscard]] bool peer_offers_check(std::span<const char> bytes, const std::string& peer_name) {
    if (bytes.empty()) {
        return false;
    }
    if (bytes.size() == sizeof kCheckMessage &&
        std::memcmp(bytes.data(), kCheckMessage, sizeof kCheckMessage) == 0) {
        return true;
    }
    throw TutorialError(kExitPeer, "bad handshake from " + peer_name +
                                       ": after \"done\" expected nothing or \"check\", received " +
                                       std::to_string(bytes.size()) +
                                       " bytes: " + printable_bytes(bytes));
}

// Both sides agree, or both refuse. The client speaks first, then half-closes; the server
// answers once it has seen the client's end of stream.
void agree_on_check(const Socket& peer, const std::string& peer_name, bool client, bool check,
                    std::chrono::seconds timeout) {
    std::array<char, 16> reply{};
    const auto offer = [&] {
        if (check) {
            send_all(peer, std::span(kCheckMessage, sizeof kCheckMessage), timeout, "\"check\"");
        }
    };
    if (client) {
        offer();
        ::shutdown(peer.get(), SHUT_WR);
    }
    const std::size_t got = receive_all(peer, reply, timeout, "the end of the handshake");
    const bool peer_check = peer_offers_check(std::span<const char>(reply.data(), got), peer_name);
    if (!client) {
        offer();
    }
    if (check && !peer_check) {
        throw TutorialError(kExitPeer, "--check is on here, but " + peer_name + " did not offer it",
                            "start both sides with --check; ibv_rc_pingpong has no --check");
    }
    if (!check && peer_check) {
        throw TutorialError(kExitPeer, peer_name + " runs with --check, but this side does not",
                            "start both sides with --check, or neither");
    }
}
//! [check_negotiation]

//! [connect]
// Both roles: TCP connect or accept, then the handshake, which calls connect_qp in the middle.
void connect_to_peer(const Resources& resources, const LocalPort& port, const Options& options,
                     const QpEndpointInfo& local) {
    const std::chrono::seconds timeout(options.timeout_seconds);
    print_address("local address: ", local);
    const auto connect = [&](const QpEndpointInfo& remote) {
        print_address("remote address:", remote);
        connect_qp(resources.qp.get(), port, options, local, remote);
    };
    std::string peer_name;
    if (!options.host.empty()) {
        const Socket server = connect_to(options.host, options.tcp_port, timeout, peer_name);
        (void)client_handshake(server, peer_name, local, timeout, connect);
        agree_on_check(server, peer_name, true, options.check, timeout);
    } else {
        const Socket listener = listen_on(options.bind_address, options.tcp_port);
        std::printf("waiting for a client on port %d\n", options.tcp_port);
        std::fflush(stdout);
        const Socket client = accept_client(listener, options.tcp_port, timeout, peer_name);
        (void)server_handshake(client, peer_name, local, timeout, connect);
        agree_on_check(client, peer_name, false, options.check, timeout);
    }
}  // the QPs are connected: TCP has done its job, and the sockets close here
//! [connect]

//! [stats]
// perftest's latency figures (ib_send_lat, print_report_lat), reproduced:
//  - one sample per iteration: the time between two consecutive sends, a full round trip;
//  - sorted, then the 2 largest samples are dropped (LAT_MEASURE_TAIL) from the count m;
//  - every figure is halved (a send latency test reports one way: rtt_factor 2);
//  - t_typical is the median of the first m samples;
//  - t_max is sample[m], 99% is sample[ceil(m * 0.99)], 99.9% is sample[ceil(m * 0.999)]:
//    indexes one past the nearest-rank position, as perftest does;
//  - t_stdev is the population standard deviation of the first m samples. (perftest truncates
//    each deviation to a whole microsecond first; we do not: see the chapter.)
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

//! [latency_file]
// --latency-file: the samples behind the table, for plotting. A few "# " lines say what they
// are; then one line per sample, in the order they were taken: one way (round trip / 2) in usec.
// A sample is the time from one send to the next, so -n iterations give -n - 1 lines, the count
// that "# iterations" gives.
[[nodiscard]] std::string latency_file_text(std::size_t size,
                                            std::span<const double> round_trips_usec) {
    std::string text = std::string("# label: step04 busy poll\n# program: ") + kProgram +
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
    if (path.empty()) {
        return nullptr;
    }
    OutputFile file(std::fopen(path.c_str(), "w"));
    if (!file) {
        throw UsageError("cannot open --latency-file '" + path + "': " + std::strerror(errno));
    }
    return file;
}

void write_latency_file(std::FILE* file, const std::string& path, const std::string& text) {
    if (std::fputs(text.c_str(), file) == EOF || std::fflush(file) != 0) {
        throw std::system_error(errno, std::generic_category(), "writing --latency-file " + path);
    }
}
//! [latency_file]

//! [pattern]
// --check: byte j of message i is (i + j) mod 251. A prime period never lines up with the
// buffer, so a message from the wrong iteration or a shifted one does not pass.
void fill_pattern(std::span<std::byte> message, std::uint64_t iteration) {
    for (std::size_t j = 0; j < message.size(); ++j) {
        message[j] = static_cast<std::byte>((iteration + j) % 251);
    }
}

// The offset of the first byte that breaks the pattern, or nothing.
[[nodiscard]] std::optional<std::size_t> find_pattern_mismatch(std::span<const std::byte> message,
                                                               std::uint64_t iteration) {
    for (std::size_t j = 0; j < message.size(); ++j) {
        if (message[j] != static_cast<std::byte>((iteration + j) % 251)) {
            return j;
        }
    }
    return std::nullopt;
}
//! [pattern]

//! [pingpong_setup]
// Send work requests carry their sequence number; receives and the probe carry these.
inline constexpr std::uint64_t kReceiveWrId = UINT64_MAX;
inline constexpr std::uint64_t kProbeWrId = UINT64_MAX - 1;

// What the loop needs to know, fixed before it starts.
struct PingPongPlan {
    std::size_t size = 0;
    long long iters = 0;   // measured iterations
    long long warmup = 0;  // iterations before them, left out of the figures
    int rx_depth = 0;
    int tx_depth = 0;
    bool inline_send = false;  // size <= the max_inline_data the QP was granted
    bool check = false;
    bool client = false;
    std::chrono::seconds timeout{10};
};

struct PingPongResult {
    double usec = 0;                  // wall time of the measured iterations
    std::vector<double> round_trips;  // usec, one per measured iteration but the last
};

// Posts `count` receives of the whole buffer in one call: a chained list of work requests.
void post_receives(const Resources& resources, std::size_t size, int count) {
    std::vector<ibv_recv_wr> requests(static_cast<std::size_t>(count));
    ibv_sge sge{};
    sge.addr = reinterpret_cast<std::uintptr_t>(resources.buffer.get());
    sge.length = static_cast<std::uint32_t>(size);
    sge.lkey = resources.mr->lkey;
    for (std::size_t i = 0; i < requests.size(); ++i) {
        requests[i].wr_id = kReceiveWrId;
        requests[i].sg_list = &sge;  // every receive lands in the same buffer, as in rc_pingpong
        requests[i].num_sge = 1;
        requests[i].next = i + 1 < requests.size() ? &requests[i + 1] : nullptr;
    }
    ibv_recv_wr* bad = nullptr;
    if (const int rc = ibv_post_recv(resources.qp.get(), requests.data(), &bad); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_post_recv");
    }
}
//! [pingpong_setup]

//! [pingpong_loop]
// The traffic of ibv_rc_pingpong: the client sends first; each side sends its next message as
// soon as the peer's has arrived, `warmup + iters` times each way. Only every signal_every-th
// send asks for a completion: the peer's answer already tells us the send arrived.
class PingPong {
  public:
    PingPong(const Resources& resources, const PingPongPlan& plan)
        : resources_(resources),
          plan_(plan),
          signal_every_(std::max(1, plan.tx_depth / 2)),
          total_(plan.warmup + plan.iters),
          refill_batch_(std::max(1, std::min(kRefillBatch, plan.rx_depth / 2))),
          posted_receives_(plan.rx_depth) {
        send_times_.reserve(static_cast<std::size_t>(plan.iters));
    }

    [[nodiscard]] PingPongResult run() {
        if (plan_.client) {
            send_next();
        }
        std::array<ibv_wc, 16> completions{};
        last_progress_ = Clock::now();
        // Like ibv_rc_pingpong, wait for our last send's completion too: destroying the QP
        // earlier could drop that message before it left.
        while (received_ < total_ || completed_sends_ < total_) {
            const int n = ibv_poll_cq(resources_.cq.get(), static_cast<int>(completions.size()),
                                      completions.data());
            if (n < 0) {
                throw std::system_error(EIO, std::generic_category(), "ibv_poll_cq");
            }
            if (n == 0) {
                if (++idle_polls_ % 4096 == 0) {
                    check_idle();
                }
                continue;
            }
            idle_polls_ = 0;
            last_progress_ = Clock::now();
            // Send completions first. The CQ does not order a send's completion before the
            // peer's answer to it; handled in CQ order, a receive's reply could wait for
            // queue room that a send completion later in this very batch already freed.
            for (const bool receives : {false, true}) {
                for (int i = 0; i < n; ++i) {
                    const ibv_wc& wc = completions[static_cast<std::size_t>(i)];
                    if ((wc.wr_id == kReceiveWrId) == receives) {
                        handle(wc);
                    }
                }
            }
        }
        PingPongResult result;
        const Clock::time_point end = Clock::now();
        if (!send_times_.empty()) {
            result.usec =
                std::chrono::duration<double, std::micro>(end - send_times_.front()).count();
        }
        for (std::size_t i = 0; i + 1 < send_times_.size(); ++i) {
            result.round_trips.push_back(
                std::chrono::duration<double, std::micro>(send_times_[i + 1] - send_times_[i])
                    .count());
        }
        return result;
    }

  private:
    void handle(const ibv_wc& wc) {
        if (wc.status != IBV_WC_SUCCESS) {
            throw_wc_error(wc, wc.wr_id == kReceiveWrId);
        }
        if (wc.wr_id != kReceiveWrId) {
            send_completed(wc.wr_id);
            return;
        }
        if (wc.byte_len != plan_.size) {
            throw TutorialError(kExitPeer,
                                "received a " + std::to_string(wc.byte_len) +
                                    "-byte message, but -s is " + std::to_string(plan_.size),
                                "both sides must use the same -s");
        }
        if (plan_.check) {
            const std::span<const std::byte> message(resources_.buffer.get(), plan_.size);
            if (const auto offset =
                    find_pattern_mismatch(message, pattern_id(received_, !plan_.client))) {
                throw TutorialError(kExitPeer, "--check: message " + std::to_string(received_) +
                                                   " is wrong at byte " + std::to_string(*offset));
            }
        }
        ++received_;
        if (--posted_receives_ <= plan_.rx_depth - refill_batch_) {
            post_receives(resources_, plan_.size, plan_.rx_depth - posted_receives_);
            posted_receives_ = plan_.rx_depth;
        }
        if (sent_ < total_) {
            send_next();
        }
    }

    // A signaled send completed: it and every unsignaled send before it are done.
    void send_completed(std::uint64_t wr_id) {
        completed_sends_ = static_cast<long long>(wr_id) + 1;
        unsignaled_ = sent_ - completed_sends_;  // sends still in flight
    }

    // Client and server messages of the same iteration carry different patterns.
    [[nodiscard]] static std::uint64_t pattern_id(long long iteration, bool from_client) {
        return static_cast<std::uint64_t>(iteration) * 2 + (from_client ? 0 : 1);
    }

    void send_next() {
        if (sent_ >= plan_.warmup) {
            send_times_.push_back(Clock::now());
        }
        if (plan_.check) {
            fill_pattern(std::span(resources_.buffer.get(), plan_.size),
                         pattern_id(sent_, plan_.client));
        }
        // The send queue holds tx_depth requests; unsignaled ones are freed by a later
        // signaled completion, so wait for one before the queue can overflow. (Not
        // unsignaled_ + 1 >= tx_depth: with -t 1 that waited for a send never posted.)
        while (unsignaled_ >= plan_.tx_depth) {
            ibv_wc wc{};
            const int n = ibv_poll_cq(resources_.cq.get(), 1, &wc);
            if (n < 0) {
                throw std::system_error(EIO, std::generic_category(), "ibv_poll_cq");
            }
            if (n == 1) {
                if (wc.status != IBV_WC_SUCCESS || wc.wr_id == kReceiveWrId) {
                    handle(wc);  // (a receive cannot come first: the peer waits for this send)
                } else {
                    send_completed(wc.wr_id);
                }
            } else if (++idle_polls_ % 4096 == 0) {
                check_idle();
            }
        }
        ibv_sge sge{};
        sge.addr = reinterpret_cast<std::uintptr_t>(resources_.buffer.get());
        sge.length = static_cast<std::uint32_t>(plan_.size);
        sge.lkey = resources_.mr->lkey;
        ibv_send_wr wr{};
        wr.wr_id = static_cast<std::uint64_t>(sent_);
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        const bool signaled = (sent_ + 1) % signal_every_ == 0 || sent_ + 1 == total_;
        wr.send_flags =
            (signaled ? IBV_SEND_SIGNALED : 0) | (plan_.inline_send ? IBV_SEND_INLINE : 0);
        ibv_send_wr* bad = nullptr;
        if (const int rc = ibv_post_send(resources_.qp.get(), &wr, &bad); rc != 0) {
            throw std::system_error(rc, std::generic_category(), "ibv_post_send");
        }
        ++sent_;
        ++unsignaled_;
    }

    // Nothing for --timeout seconds. RC has no "peer gone" event: a side that only waits for a
    // receive would wait for ever. So we probe: one more send. If the peer's QP is gone it is not
    // acknowledged, and after the retries it fails with IBV_WC_RETRY_EXC_ERR.
    void check_idle() {
        throw_if_stopped();
        if (Clock::now() - last_progress_ < plan_.timeout) {
            return;
        }
        const std::string waited =
            "nothing from the peer for " + std::to_string(plan_.timeout.count()) + " s (after " +
            std::to_string(received_) + " of " + std::to_string(total_) + " messages)";
        std::fprintf(stderr, "%s: %s; probing its QP\n", kProgram, waited.c_str());
        ibv_sge sge{};
        sge.addr = reinterpret_cast<std::uintptr_t>(resources_.buffer.get());
        sge.length = 0;
        sge.lkey = resources_.mr->lkey;
        ibv_send_wr wr{};
        wr.wr_id = kProbeWrId;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        ibv_send_wr* bad = nullptr;
        if (ibv_post_send(resources_.qp.get(), &wr, &bad) == 0) {
            const Clock::time_point deadline = Clock::now() + std::chrono::seconds(5);
            while (Clock::now() < deadline) {
                ibv_wc wc{};
                if (ibv_poll_cq(resources_.cq.get(), 1, &wc) == 1) {
                    if (wc.status != IBV_WC_SUCCESS) {
                        throw_wc_error(wc, wc.wr_id == kReceiveWrId);
                    }
                    if (wc.wr_id == kProbeWrId) {
                        throw TutorialError(kExitTimeout, waited,
                                            "its QP acknowledged a probe, so the peer's program "
                                            "is alive but stuck (or stopped)");
                    }
                }
            }
        }
        throw TutorialError(kExitTimeout, waited, "is the peer still running?");
    }

    const Resources& resources_;
    const PingPongPlan& plan_;
    const long long signal_every_;
    const long long total_;
    // Receives are re-posted 16 at a time (fewer when -r is small): often enough that one
    // refill is a short pause, and never 250 at once, which shows in the latency's tail.
    static constexpr int kRefillBatch = 16;
    const int refill_batch_;
    long long sent_ = 0;
    long long received_ = 0;
    long long completed_sends_ = 0;
    long long unsignaled_ = 0;
    int posted_receives_;
    long long idle_polls_ = 0;
    Clock::time_point last_progress_;
    std::vector<Clock::time_point> send_times_;
};
//! [pingpong_loop]

//! [open]
// Opens the chosen device and checks the port; prints the device, port and GID choice.
[[nodiscard]] ibv_device_attr open_and_check(Resources& resources, const Options& options) {
    int count = 0;
    resources.device_list = get_device_list(count);
    const std::span<ibv_device* const> devices(resources.device_list.get(),
                                               static_cast<std::size_t>(count));
    ibv_device* device = select_device(devices, options.device_name);
    const std::string name = ibv_get_device_name(device);
    resources.context = open_device(device);

    ibv_device_attr attr{};
    if (const int rc = ibv_query_device(resources.context.get(), &attr); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_query_device");
    }
    check_port(name, options.ib_port, attr.phys_port_cnt);
    ibv_port_attr port_attr{};
    // ibv_query_port returns the errno value, it does not set errno.
    if (const int rc = ibv_query_port(resources.context.get(),
                                      static_cast<std::uint8_t>(options.ib_port), &port_attr);
        rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_query_port");
    }
    std::printf("device:  %s port %d, %s, %s\n", name.c_str(), options.ib_port,
                port_state_text(port_attr.state), link_layer_text(port_attr.link_layer));
    if (port_attr.state != IBV_PORT_ACTIVE) {
        std::fflush(stdout);
        std::fprintf(stderr, "%s: %s\n", kProgram,
                     port_warning(name, options.ib_port, port_attr.state).c_str());
    }
    const auto choice = choose_gid(
        query_gid_table(resources.context.get(), options.ib_port,
                        static_cast<std::size_t>(port_attr.gid_tbl_len) * attr.phys_port_cnt));
    std::printf("%s\n", recommendation_line(name, options.ib_port, choice).c_str());
    check_limits(options, attr);
    return attr;
}
//! [open]

//! [build]
// Creates the objects in dependency order; if one fails, the ones made so far are
// destroyed by Resources' members on the way out.
[[nodiscard]] QueuePairCaps build_resources(Resources& resources, const Options& options) {
    const long page_size = sysconf(_SC_PAGESIZE);
    const std::size_t page = page_size > 0 ? static_cast<std::size_t>(page_size) : 4096;
    const std::size_t allocated = (options.size + page - 1) / page * page;

    resources.pd.reset(ibv_alloc_pd(resources.context.get()));
    if (!resources.pd) {
        throw std::system_error(errno, std::generic_category(), "ibv_alloc_pd");
    }
    std::printf("PD:      created\n");

    resources.buffer.reset(static_cast<std::byte*>(std::aligned_alloc(page, allocated)));
    if (!resources.buffer) {
        throw std::system_error(ENOMEM, std::generic_category(), "aligned_alloc");
    }
    std::memset(resources.buffer.get(), 0, allocated);
    std::printf("buffer:  %zu bytes, page-aligned (page size %zu)\n", options.size, page);

    // Least privilege: only this process's own receives may write into the buffer.
    resources.mr.reset(ibv_reg_mr(resources.pd.get(), resources.buffer.get(), options.size,
                                  IBV_ACCESS_LOCAL_WRITE));
    if (!resources.mr) {
        throw_reg_mr_error(errno, options.size);
    }
    std::printf("MR:      lkey 0x%08x, rkey 0x%08x, %zu bytes, access LOCAL_WRITE\n",
                resources.mr->lkey, resources.mr->rkey, resources.mr->length);

    const int cq_entries = options.rx_depth + options.tx_depth;
    resources.cq.reset(ibv_create_cq(resources.context.get(), cq_entries, nullptr, nullptr, 0));
    if (!resources.cq) {
        throw std::system_error(errno, std::generic_category(), "ibv_create_cq");
    }
    // The device may round the size up: cq->cqe is what we really got.
    std::printf("CQ:      %d entries (asked for %d)\n", resources.cq->cqe, cq_entries);

    ibv_qp_init_attr init_attr{};
    init_attr.send_cq = resources.cq.get();
    init_attr.recv_cq = resources.cq.get();
    init_attr.qp_type = IBV_QPT_RC;
    init_attr.cap.max_send_wr = static_cast<std::uint32_t>(options.tx_depth);
    init_attr.cap.max_recv_wr = static_cast<std::uint32_t>(options.rx_depth);
    init_attr.cap.max_send_sge = 1;
    init_attr.cap.max_recv_sge = 1;
    init_attr.cap.max_inline_data = 64;
    QueuePairCaps caps;
    caps.requested = init_attr.cap;
    resources.qp.reset(ibv_create_qp(resources.pd.get(), &init_attr));
    if (!resources.qp) {
        throw std::system_error(errno, std::generic_category(), "ibv_create_qp");
    }

    // RESET -> INIT: bind the QP to a port and P_Key; no remote access is allowed yet.
    ibv_qp_attr attr = init_attributes(options.ib_port);
    modify_qp(resources.qp.get(), attr, IBV_QPS_RESET, IBV_QPS_INIT);

    ibv_qp_attr queried{};
    ibv_qp_init_attr queried_init{};
    if (const int rc =
            ibv_query_qp(resources.qp.get(), &queried, IBV_QP_STATE | IBV_QP_CAP, &queried_init);
        rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_query_qp");
    }
    caps.granted = queried.cap;
    caps.state = queried.qp_state;
    return caps;
}
//! [build]

//! [print_qp]
void print_queue_pair(const ibv_qp& qp, const QueuePairCaps& caps) {
    std::printf("QP:      qp_num %u (0x%06x), type RC, state %s\n", qp.qp_num, qp.qp_num,
                qp_state_text(caps.state));
    std::printf("QP caps (ibv_query_qp):\n");
    const auto row = [](const char* name, std::uint32_t requested, std::uint32_t granted) {
        std::printf("    %-16s requested %u, granted %u\n", name, requested, granted);
    };
    row("max_send_wr", caps.requested.max_send_wr, caps.granted.max_send_wr);
    row("max_recv_wr", caps.requested.max_recv_wr, caps.granted.max_recv_wr);
    row("max_send_sge", caps.requested.max_send_sge, caps.granted.max_send_sge);
    row("max_recv_sge", caps.requested.max_recv_sge, caps.granted.max_recv_sge);
    row("max_inline_data", caps.requested.max_inline_data, caps.granted.max_inline_data);
}
//! [print_qp]

//! [run]
void run(const Options& options) {
    const OutputFile latency_file = open_latency_file(options.latency_file);
    install_stop_handlers();
    Resources resources;
    const ibv_device_attr attr = open_and_check(resources, options);
    const QueuePairCaps caps = build_resources(resources, options);
    print_queue_pair(*resources.qp, caps);
    const LocalPort port = query_local_port(resources.context.get(), options, attr.phys_port_cnt);
    // ibv_rc_pingpong posts all its receives before the handshake, and so do we: the peer may
    // send as soon as it has our address.
    post_receives(resources, options.size, options.rx_depth);

    QpEndpointInfo local;
    local.lid = port.attr.lid;
    local.qpn = resources.qp->qp_num;
    local.psn = random_psn();
    local.gid = port.gid;
    connect_to_peer(resources, port, options, local);

    PingPongPlan plan;
    plan.size = options.size;
    plan.iters = options.iters;
    plan.warmup = options.warmup;
    plan.rx_depth = options.rx_depth;
    plan.tx_depth = options.tx_depth;
    plan.inline_send = options.size <= caps.granted.max_inline_data;
    plan.check = options.check;
    plan.client = !options.host.empty();
    plan.timeout = std::chrono::seconds(options.timeout_seconds);
    PingPong pingpong(resources, plan);
    const PingPongResult result = pingpong.run();
    std::printf("%s", rc_pingpong_summary(options.size, options.iters, result.usec).c_str());
    std::printf(
        "%s", latency_table(options.size, options.iters, compute_latency_stats(result.round_trips))
                  .c_str());
    if (latency_file) {
        write_latency_file(latency_file.get(), options.latency_file,
                           latency_file_text(options.size, result.round_trips));
    }
}
//! [run]

}  // namespace tutorial

#ifndef RDMA_TUTORIAL_UNIT_TEST  // the unit tests include this file and bring their own main
//! [main]
int main(int argc, char** argv) {
    using namespace tutorial;
    try {
        const Options options = parse_options(argc, argv);
        if (options.help) {
            std::cout << usage_text();
            return kExitOk;
        }
        run(options);
        return kExitOk;
    } catch (const UsageError& e) {
        std::cerr << kProgram << ": " << e.what() << '\n' << usage_text();
        return kExitUsage;
    } catch (const TutorialError& e) {
        std::cout.flush();
        std::fflush(stdout);
        std::cerr << kProgram << ": " << e.what() << '\n';
        if (!e.hint().empty()) {
            std::cerr << "hint: " << e.hint() << '\n';
        }
        return e.exit_code();
    } catch (const std::system_error& e) {
        std::cout.flush();
        std::fflush(stdout);
        std::cerr << kProgram << ": " << e.what() << '\n';
        return kExitRdma;
    }
}
//! [main]
#endif
