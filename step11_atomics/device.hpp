// Finding and opening a device, checking a port, reading its GID table, choosing the local GID.
#pragma once

#include "errors.hpp"
#include "gid.hpp"
#include "options.hpp"
#include "verbs_raii.hpp"

#include <dirent.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <vector>

namespace tutorial {

// Names under /sys/class/infiniband: the kernel's view, which needs no userspace provider.
[[nodiscard]] inline std::vector<std::string> kernel_device_names() {
    std::vector<std::string> names;
    if (DIR* dir = opendir("/sys/class/infiniband")) {
        while (const dirent* entry = readdir(dir)) {
            if (entry->d_name[0] != '.') { names.emplace_back(entry->d_name); }
        }
        closedir(dir);
    }
    std::sort(names.begin(), names.end());
    return names;
}

[[nodiscard]] inline std::string join(const std::vector<std::string>& items) {
    std::string text;
    for (const std::string& item : items) { text += (text.empty() ? "" : ", ") + item; }
    return text;
}

// Returns the device list, or throws the no-device or no-provider error.
[[nodiscard]] inline DeviceList get_device_list(int& count) {
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
[[nodiscard]] inline ibv_device* select_device(std::span<ibv_device* const> devices,
                                               const std::string& name) {
    if (name.empty()) { return devices.front(); }
    std::vector<std::string> found;
    for (ibv_device* device : devices) {
        if (name == ibv_get_device_name(device)) { return device; }
        found.emplace_back(ibv_get_device_name(device));
    }
    throw TutorialError(kExitNoSuchDevice,
                        "no RDMA device named '" + name + "' (found: " + join(found) + ")");
}

// A port number the device does not have is exit code 5, like an unknown device.
inline void check_port(const std::string& device, int port, int port_count) {
    if (port < 1 || port > port_count) {
        const std::string ports = port_count == 1 ? "1" : "1 to " + std::to_string(port_count);
        throw TutorialError(kExitNoSuchDevice, device + " has no port " + std::to_string(port) +
                                                   " (ports: " + ports + ")");
    }
}

// Room for every port's GIDs: ibv_query_gid_table returns the whole device's table, and each
// port's table has its own length (step01 adds them up the same way).
[[nodiscard]] inline std::size_t gid_table_size(ibv_context* context, int port_count) {
    std::size_t size = 0;
    for (int port = 1; port <= port_count; ++port) {
        ibv_port_attr attr{};
        if (const int rc = ibv_query_port(context, static_cast<std::uint8_t>(port), &attr);
            rc != 0) {
            throw std::system_error(rc, std::generic_category(), "ibv_query_port");
        }
        size += static_cast<std::size_t>(attr.gid_tbl_len);
    }
    return size;
}

// Every valid GID of one port. ibv_query_gid_table (rdma-core 32+) returns the valid entries of
// every port with their types, so we ask for all of them and keep this port's.
[[nodiscard]] inline std::vector<GidEntry> query_gid_table(ibv_context* context, int port,
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
        if (entry.port_num != static_cast<std::uint32_t>(port)) { continue; }
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

// What the peer needs to reach us, besides the QPN: the port's LID, link layer and MTU, and the
// GID index with the rule that chose it. Then this side's fabric controls for the path (-l,
// --tclass, --pkey-index): the P_Key index goes into INIT, the service level and the traffic class
// into the address vector at RTR.
struct LocalPort {
    ibv_port_attr attr{};
    int gid_index = 0;
    GidBytes gid{};
    std::string gid_rule;  // -g, the TCP connection's local address, or step 01's rule
    std::uint8_t service_level = 0;
    std::uint8_t traffic_class = 0;
    std::uint16_t pkey_index = 0;
};

// step03's choice: the RoCE v2 entry that holds the TCP connection's local address.
[[nodiscard]] inline std::optional<std::uint32_t> gid_with_address(
    std::span<const GidEntry> table, const std::array<std::uint8_t, 16>& address) {
    for (const GidEntry& entry : table) {
        if (entry.type == IBV_GID_TYPE_ROCE_V2 && entry.gid == address) { return entry.index; }
    }
    return std::nullopt;
}

// -g wins; then the entry with the TCP connection's local address; then step 01's rule.
[[nodiscard]] inline std::optional<std::uint32_t> choose_source_gid(
    std::span<const GidEntry> table, int gid_index,
    const std::optional<std::array<std::uint8_t, 16>>& local_address, std::string& rule) {
    if (gid_index >= 0) {
        rule = "given with -g";
        return static_cast<std::uint32_t>(gid_index);
    }
    if (local_address) {
        if (const auto index = gid_with_address(table, *local_address)) {
            rule = "the TCP connection's local address";
            return index;
        }
        rule = "no RoCE v2 GID holds the TCP connection's local address " +
               format_gid(*local_address) + ": step 01's rule";
    } else {
        rule = "step 01's rule";
    }
    return choose_gid(table);
}

// local_address: the TCP connection's own address (tcp.hpp's local_address_bytes), once there is
// one; nothing before.
[[nodiscard]] inline LocalPort query_local_port(
    ibv_context* context, int ib_port, int gid_index, int port_count,
    const std::optional<std::array<std::uint8_t, 16>>& local_address) {
    LocalPort local;
    // ibv_query_port returns the error number itself: use it, not errno.
    if (const int rc = ibv_query_port(context, static_cast<std::uint8_t>(ib_port), &local.attr);
        rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_query_port");
    }
    const std::vector<GidEntry> table =
        query_gid_table(context, ib_port, gid_table_size(context, port_count));
    const std::optional<std::uint32_t> index =
        choose_source_gid(table, gid_index, local_address, local.gid_rule);
    const auto entry = std::find_if(table.begin(), table.end(),
                                    [&](const GidEntry& e) { return index && e.index == *index; });
    if (entry != table.end()) {
        local.gid_index = static_cast<int>(entry->index);
        local.gid = entry->gid;
    } else if (gid_index >= 0) {
        throw TutorialError(kExitNoSuchDevice,
                            "port " + std::to_string(ib_port) + " has no valid GID at index " +
                                std::to_string(gid_index),
                            "step01_devices lists the GID table");
    } else if (local.attr.link_layer == IBV_LINK_LAYER_ETHERNET) {
        throw TutorialError(kExitNoSuchDevice, "port " + std::to_string(ib_port) +
                                                   " has no valid GID, and RoCE needs one");
    }
    return local;
}

// "GID index 1 (::ffff:10.0.2.1): the TCP connection's local address", for the programs' output.
[[nodiscard]] inline std::string gid_choice_line(const LocalPort& port) {
    return "GID index " + std::to_string(port.gid_index) + " (" + format_gid(port.gid) +
           "): " + port.gid_rule;
}

// --pkey-index names an entry of the port's P_Key table: one beyond it is refused, with the limit.
inline void check_pkey_index(const ibv_port_attr& attr, int ib_port, int pkey_index) {
    if (pkey_index < attr.pkey_tbl_len) { return; }
    throw TutorialError(kExitUsage,
                        "--pkey-index " + std::to_string(pkey_index) + " is beyond port " +
                            std::to_string(ib_port) + "'s P_Key table, whose pkey_tbl_len is " +
                            std::to_string(attr.pkey_tbl_len),
                        "ibv_devinfo -v shows pkey_tbl_len; index 0 holds the default partition");
}
}  // namespace tutorial
