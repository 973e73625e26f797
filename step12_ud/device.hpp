// Finding and opening a device, checking a port, reading its GID table.
#pragma once

#include "enum_text.hpp"
#include "errors.hpp"
#include "gid.hpp"
#include "options.hpp"
#include "verbs_raii.hpp"

#include <dirent.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <system_error>
#include <vector>

namespace tutorial {

[[nodiscard]] inline std::string port_warning(const std::string& device, int port,
                                              ibv_port_state state) {
    return std::string("warning: ") + device + " port " + std::to_string(port) + " is " +
           port_state_text(state) + ", not PORT_ACTIVE: connections through it will fail";
}

//! [open_device]
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

[[nodiscard]] inline Context open_device(ibv_device* device) {
    Context context(ibv_open_device(device));
    if (!context) { throw std::system_error(errno, std::generic_category(), "ibv_open_device"); }
    return context;
}

[[nodiscard]] inline std::string ports_text(int port_count) {
    return port_count == 1 ? "1" : "1 to " + std::to_string(port_count);
}

// A port number the device does not have is exit code 5, like an unknown device.
inline void check_port(const std::string& device, int port, int port_count) {
    if (port < 1 || port > port_count) {
        throw TutorialError(kExitNoSuchDevice, device + " has no port " + std::to_string(port) +
                                                   " (ports: " + ports_text(port_count) + ")");
    }
}
//! [open_device]

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

//! [gid_table]
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
//! [gid_table]

}  // namespace tutorial
