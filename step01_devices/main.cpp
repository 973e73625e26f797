// Step 01: which RDMA devices do I have, what are their limits, and which GID should I use?
#include "enum_text.hpp"
#include "errors.hpp"
#include "gid.hpp"
#include "options.hpp"
#include "verbs_raii.hpp"

#include <dirent.h>
#include <endian.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <vector>

namespace tutorial {

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
