// Step 02: the objects every RDMA program needs (buffer, PD, MR, CQ, QP), owned by one RAII shape.
#include <arpa/inet.h>
#include <dirent.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace tutorial {

constexpr const char* kProgram = "step02_resources";

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
    bool help = false;
};

[[nodiscard]] std::string usage_text() {
    return std::string("usage: ") + kProgram +
           " [options]\n"
           "Creates a buffer, PD, MR, CQ and RC QP, moves the QP to INIT, prints them and tears\n"
           "them down in reverse order.\n"
           "  -d, --ib-dev=NAME    use this device (default: the first one found)\n"
           "  -i, --ib-port=N      use this port, 1-255 (default 1)\n"
           "  -s, --size=BYTES     buffer and MR size, 1-1073741824 (default 4096)\n"
           "  -r, --rx-depth=N     receive queue depth, 1-16777216 (default 500)\n"
           "  -t, --tx-depth=N     send queue depth, 1-16777216 (default 16)\n"
           "  -h, --help           print this help and exit\n";
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

[[nodiscard]] Options parse_options(int argc, char** argv) {
    static const option long_options[] = {{"ib-dev", required_argument, nullptr, 'd'},
                                          {"ib-port", required_argument, nullptr, 'i'},
                                          {"size", required_argument, nullptr, 's'},
                                          {"rx-depth", required_argument, nullptr, 'r'},
                                          {"tx-depth", required_argument, nullptr, 't'},
                                          {"help", no_argument, nullptr, 'h'},
                                          {nullptr, 0, nullptr, 0}};
    Options options;
    opterr = 0;  // we print our own messages
    optind = 0;  // 0, not 1: glibc then fully restarts the scan (the unit tests parse many times)
    for (;;) {
        const int c = getopt_long(argc, argv, ":d:i:s:r:t:h", long_options, nullptr);
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
        throw UsageError(std::string("unexpected argument '") + argv[optind] + "'");
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
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = static_cast<std::uint8_t>(options.ib_port);
    attr.qp_access_flags = 0;
    if (const int rc =
            ibv_modify_qp(resources.qp.get(), &attr,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_modify_qp(INIT)");
    }

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
    trace_teardown = true;
    Resources resources;
    (void)open_and_check(resources, options);
    const QueuePairCaps caps = build_resources(resources, options);
    print_queue_pair(*resources.qp, caps);
    std::printf("tearing down in reverse order of creation:\n");
}  // resources goes out of scope here: the teardown lines come from its members' deleters
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
        std::cerr << kProgram << ": " << e.what() << '\n';
        if (!e.hint().empty()) {
            std::cerr << "hint: " << e.hint() << '\n';
        }
        return e.exit_code();
    } catch (const std::system_error& e) {
        std::cout.flush();
        std::cerr << kProgram << ": " << e.what() << '\n';
        return kExitRdma;
    }
}
//! [main]
#endif
