// Step 01: which RDMA devices do I have, what are their limits, and which GID should I use?
#include <arpa/inet.h>
#include <dirent.h>
#include <endian.h>
#include <getopt.h>
#include <infiniband/verbs.h>

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

constexpr const char* kProgram = "step01_devices";

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
// One owner shape for every verbs object: a move-only std::unique_ptr whose
// deleter calls the destroy verb and reports, never throws, a failure.
// Step 02 explains it; here it owns the device list and the open device.
template <typename T, auto Destroy, const char* Verb>
struct VerbsDeleter {
    void operator()(T* object) const noexcept {
        const int rc = Destroy(object);
        if (rc != 0) {
            const int err = rc > 0 ? rc : errno;  // ibv_close_device returns -1 and sets errno
            std::fprintf(stderr, "destroy failed: %s: %s (errno %d)\n", Verb, std::strerror(err),
                         err);
        }
    }
};
inline constexpr char kFreeDeviceList[] = "ibv_free_device_list";
inline constexpr char kCloseDevice[] = "ibv_close_device";
inline int free_device_list(ibv_device** list) {
    ibv_free_device_list(list);
    return 0;
}
using DeviceList =
    std::unique_ptr<ibv_device*, VerbsDeleter<ibv_device*, free_device_list, kFreeDeviceList>>;
using Context =
    std::unique_ptr<ibv_context, VerbsDeleter<ibv_context, ibv_close_device, kCloseDevice>>;
//! [raii]

//! [parse_options]
struct Options {
    std::string device_name;  // empty: every device
    int ib_port = 0;          // 0: every port
    bool verbose = false;
    bool help = false;
};

[[nodiscard]] std::string usage_text() {
    return std::string("usage: ") + kProgram +
           " [options]\n"
           "Lists the RDMA devices, their limits, ports and GID tables, and recommends a GID "
           "index.\n"
           "  -d, --ib-dev=NAME   only this device (default: every device)\n"
           "  -i, --ib-port=N     only this port, 1-255 (default: every port)\n"
           "  -v, --verbose       also print capability flags and more limits\n"
           "  -h, --help          print this help and exit\n";
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
                                          {"verbose", no_argument, nullptr, 'v'},
                                          {"help", no_argument, nullptr, 'h'},
                                          {nullptr, 0, nullptr, 0}};
    Options options;
    opterr = 0;  // we print our own messages
    optind = 0;  // 0, not 1: glibc then fully restarts the scan (the unit tests parse many times)
    for (;;) {
        const int c = getopt_long(argc, argv, ":d:i:vh", long_options, nullptr);
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
            case 'v':
                options.verbose = true;
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
[[nodiscard]] const char* transport_text(ibv_transport_type transport) {
    switch (transport) {
        case IBV_TRANSPORT_IB:
            return "InfiniBand";
        case IBV_TRANSPORT_IWARP:
            return "iWARP";
        case IBV_TRANSPORT_USNIC:
            return "usNIC";
        case IBV_TRANSPORT_USNIC_UDP:
            return "usNIC UDP";
        case IBV_TRANSPORT_UNSPECIFIED:
            return "unspecified";
        default:
            return "unknown";
    }
}

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

// The physical state codes come from the InfiniBand spec (PortPhysicalState).
[[nodiscard]] const char* phys_state_text(std::uint8_t phys_state) {
    switch (phys_state) {
        case 1:
            return "SLEEP";
        case 2:
            return "POLLING";
        case 3:
            return "DISABLED";
        case 4:
            return "PORT_CONFIGURATION_TRAINING";
        case 5:
            return "LINK_UP";
        case 6:
            return "LINK_ERROR_RECOVERY";
        case 7:
            return "PHY_TEST";
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

[[nodiscard]] const char* width_text(std::uint8_t active_width) {
    switch (active_width) {
        case 1:
            return "1X";
        case 2:
            return "4X";
        case 4:
            return "8X";
        case 8:
            return "12X";
        case 16:
            return "2X";
        default:
            return "unknown";
    }
}

// Per-lane signalling rate, as ibv_devinfo prints it.
[[nodiscard]] const char* speed_text(std::uint8_t active_speed) {
    switch (active_speed) {
        case 1:
            return "2.5 Gbps";
        case 2:
            return "5.0 Gbps";
        case 4:
        case 8:
            return "10.0 Gbps";
        case 16:
            return "14.0 Gbps";
        case 32:
            return "25.0 Gbps";
        case 64:
            return "50.0 Gbps";
        case 128:
            return "100.0 Gbps";
        default:
            return "unknown";
    }
}

[[nodiscard]] const char* atomic_cap_text(ibv_atomic_cap cap) {
    switch (cap) {
        case IBV_ATOMIC_NONE:
            return "ATOMIC_NONE (no atomic operations)";
        case IBV_ATOMIC_HCA:
            return "ATOMIC_HCA (atomic within this device)";
        case IBV_ATOMIC_GLOB:
            return "ATOMIC_GLOB (atomic with the CPU too)";
        default:
            return "unknown";
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

// The devices to show: all of them, or the one named (an unknown name lists those that exist).
[[nodiscard]] std::vector<ibv_device*> select_devices(std::span<ibv_device* const> devices,
                                                      const std::string& name) {
    if (name.empty()) {
        return {devices.begin(), devices.end()};
    }
    std::vector<std::string> found;
    for (ibv_device* device : devices) {
        if (name == ibv_get_device_name(device)) {
            return {device};
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

[[nodiscard]] std::string guid_text(__be64 guid_be) {
    const std::uint64_t guid = be64toh(guid_be);
    char text[20];
    std::snprintf(text, sizeof text, "%04x:%04x:%04x:%04x", static_cast<unsigned>(guid >> 48),
                  static_cast<unsigned>((guid >> 32) & 0xffff),
                  static_cast<unsigned>((guid >> 16) & 0xffff),
                  static_cast<unsigned>(guid & 0xffff));
    return text;
}

//! [print_device]
void print_device(ibv_device* device, const ibv_device_attr_ex& attr_ex, bool verbose) {
    const ibv_device_attr& attr = attr_ex.orig_attr;
    std::printf("device %s\n", ibv_get_device_name(device));
    std::printf("    node GUID:          %s\n", guid_text(ibv_get_device_guid(device)).c_str());
    std::printf("    transport:          %s\n", transport_text(device->transport_type));
    std::printf("    vendor id:          0x%04x\n", attr.vendor_id);
    std::printf("    vendor part id:     %u\n", attr.vendor_part_id);
    std::printf("    firmware:           %s\n", attr.fw_ver[0] != '\0' ? attr.fw_ver : "n/a");
    std::printf("    ports:              %u\n", attr.phys_port_cnt);
    std::printf("  limits\n");
    std::printf("    max_qp:             %d\n", attr.max_qp);
    std::printf("    max_qp_wr:          %d\n", attr.max_qp_wr);
    std::printf("    max_cq:             %d\n", attr.max_cq);
    std::printf("    max_cqe:            %d\n", attr.max_cqe);
    std::printf("    max_mr_size:        %" PRIu64 "\n", attr.max_mr_size);
    std::printf("    max_sge:            %d\n", attr.max_sge);
    // No query reports a device-wide inline limit: ibv_create_qp grants it per QP (step 02).
    std::printf("    max_inline_data:    n/a (granted per QP by ibv_create_qp, see step 02)\n");
    std::printf("    atomic_cap:         %s\n", atomic_cap_text(attr.atomic_cap));
    if (verbose) {
        std::printf("    max_pd:             %d\n", attr.max_pd);
        std::printf("    max_mr:             %d\n", attr.max_mr);
        std::printf("    max_sge_rd:         %d\n", attr.max_sge_rd);
        std::printf("    max_qp_rd_atom:     %d\n", attr.max_qp_rd_atom);
        std::printf("    max_srq:            %d\n", attr.max_srq);
        std::printf("    max_pkeys:          %u\n", attr.max_pkeys);
        std::printf("    device_cap_flags:   0x%08x\n", attr.device_cap_flags);
        std::printf("    device_cap_flags_ex: 0x%016" PRIx64 "\n", attr_ex.device_cap_flags_ex);
        std::printf("    page_size_cap:      0x%" PRIx64 "\n", attr.page_size_cap);
    }
}

void print_port(const std::string& device, int port, const ibv_port_attr& port_attr,
                const std::vector<GidEntry>& table, bool verbose) {
    std::printf("  port %d\n", port);
    std::printf("    state:              %s (%d)\n", port_state_text(port_attr.state),
                static_cast<int>(port_attr.state));
    std::printf("    physical state:     %s (%u)\n", phys_state_text(port_attr.phys_state),
                port_attr.phys_state);
    std::printf("    link layer:         %s\n", link_layer_text(port_attr.link_layer));
    std::printf("    active MTU:         %d (max %d)\n", mtu_bytes(port_attr.active_mtu),
                mtu_bytes(port_attr.max_mtu));
    std::printf("    width x speed:      %s x %s\n", width_text(port_attr.active_width),
                speed_text(port_attr.active_speed));
    std::printf("    LID:                0x%04x\n", port_attr.lid);
    if (verbose) {
        std::printf("    SM LID:             0x%04x\n", port_attr.sm_lid);
        std::printf("    port_cap_flags:     0x%08x\n", port_attr.port_cap_flags);
        std::printf("    max_msg_sz:         %u\n", port_attr.max_msg_sz);
    }
    std::printf("    GID table (%zu valid of %d):\n", table.size(), port_attr.gid_tbl_len);
    for (const GidEntry& entry : table) {
        const std::optional<std::string> ipv4 = ipv4_of(entry.gid);
        std::printf("      [%u] %-40s %s%s\n", entry.index, format_gid(entry.gid).c_str(),
                    gid_type_text(entry.type), ipv4 ? (", IPv4 " + *ipv4).c_str() : "");
    }
    std::string line = recommendation_line(device, port, choose_gid(table));
    if (port_attr.link_layer != IBV_LINK_LAYER_ETHERNET) {
        char lid[40];
        std::snprintf(lid, sizeof lid, "; InfiniBand: LID 0x%04x is enough", port_attr.lid);
        line += lid;
    }
    std::printf("%s\n", line.c_str());
}
//! [print_device]

//! [run]
void list_devices(const Options& options) {
    int count = 0;
    const DeviceList list = get_device_list(count);
    const std::span<ibv_device* const> devices(list.get(), static_cast<std::size_t>(count));
    for (ibv_device* device : select_devices(devices, options.device_name)) {
        const std::string name = ibv_get_device_name(device);
        const Context context = open_device(device);
        ibv_device_attr_ex attr_ex{};
        // ibv_query_device_ex returns the errno value, it does not set errno.
        if (const int rc = ibv_query_device_ex(context.get(), nullptr, &attr_ex); rc != 0) {
            throw std::system_error(rc, std::generic_category(), "ibv_query_device_ex");
        }
        const int port_count = attr_ex.orig_attr.phys_port_cnt;
        if (options.ib_port != 0) {
            check_port(name, options.ib_port, port_count);
        }
        print_device(device, attr_ex, options.verbose);
        std::size_t table_size = 0;
        std::vector<ibv_port_attr> ports(static_cast<std::size_t>(port_count) + 1);
        for (int port = 1; port <= port_count; ++port) {
            if (const int rc = ibv_query_port(context.get(), static_cast<std::uint8_t>(port),
                                              &ports[static_cast<std::size_t>(port)]);
                rc != 0) {
                throw std::system_error(rc, std::generic_category(), "ibv_query_port");
            }
            table_size +=
                static_cast<std::size_t>(ports[static_cast<std::size_t>(port)].gid_tbl_len);
        }
        for (int port = 1; port <= port_count; ++port) {
            if (options.ib_port != 0 && port != options.ib_port) {
                continue;
            }
            const ibv_port_attr& port_attr = ports[static_cast<std::size_t>(port)];
            print_port(name, port, port_attr, query_gid_table(context.get(), port, table_size),
                       options.verbose);
            if (port_attr.state != IBV_PORT_ACTIVE) {
                std::fflush(stdout);
                std::fprintf(stderr, "%s: %s\n", kProgram,
                             port_warning(name, port, port_attr.state).c_str());
            }
        }
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
        list_devices(options);
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
