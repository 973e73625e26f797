// Step 01: which RDMA devices do I have, what are their limits, and which GID should I use?
#include "device_report.hpp"
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
#include <cstdio>
#include <cstring>
#include <iostream>
#include <span>
#include <string>
#include <system_error>
#include <vector>

namespace tutorial {

// The pieces of run(), defined below it.
[[nodiscard]] DeviceList get_device_list(int& count);
[[nodiscard]] std::vector<ibv_device*> select_devices(std::span<ibv_device* const> devices,
                                                      const std::string& name);
[[nodiscard]] Context open_device(ibv_device* device);
[[nodiscard]] ibv_device_attr_ex query_device(ibv_context* context);
void check_port(const std::string& device, int port, int port_count);
[[nodiscard]] std::vector<ibv_port_attr> query_ports(ibv_context* context, int port_count);
void show_port(ibv_context* context, const std::string& device, int port,
               const std::vector<ibv_port_attr>& ports, bool verbose);

//! [run]
// The outline: find the devices, then open and query each one, and print it port by port.
void run(const Options& options) {
    int count = 0;
    const DeviceList list = get_device_list(count);
    const std::span<ibv_device* const> devices(list.get(), static_cast<std::size_t>(count));
    for (ibv_device* device : select_devices(devices, options.device_name)) {
        const std::string name = ibv_get_device_name(device);
        const Context context = open_device(device);
        const ibv_device_attr_ex attr_ex = query_device(context.get());
        const int port_count = attr_ex.orig_attr.phys_port_cnt;
        if (options.ib_port != 0) { check_port(name, options.ib_port, port_count); }
        print_device(device, attr_ex, options.verbose);
        const std::vector<ibv_port_attr> ports = query_ports(context.get(), port_count);
        for (int port = 1; port <= port_count; ++port) {
            if (options.ib_port == 0 || port == options.ib_port) {
                show_port(context.get(), name, port, ports, options.verbose);
            }
        }
    }
}
//! [run]

[[nodiscard]] std::string port_warning(const std::string& device, int port, ibv_port_state state) {
    return std::string("warning: ") + device + " port " + std::to_string(port) + " is " +
           port_state_text(state) + ", not PORT_ACTIVE: connections through it will fail";
}

// Names under /sys/class/infiniband: the kernel's view, which needs no userspace provider.
[[nodiscard]] std::vector<std::string> kernel_device_names() {
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

[[nodiscard]] std::string join(const std::vector<std::string>& items) {
    std::string text;
    for (const std::string& item : items) { text += (text.empty() ? "" : ", ") + item; }
    return text;
}

//! [get_device_list]
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
//! [get_device_list]

// The devices to show: all of them, or the one named (an unknown name lists those that exist).
[[nodiscard]] std::vector<ibv_device*> select_devices(std::span<ibv_device* const> devices,
                                                      const std::string& name) {
    if (name.empty()) { return {devices.begin(), devices.end()}; }
    std::vector<std::string> found;
    for (ibv_device* device : devices) {
        if (name == ibv_get_device_name(device)) { return {device}; }
        found.emplace_back(ibv_get_device_name(device));
    }
    throw TutorialError(kExitNoSuchDevice,
                        "no RDMA device named '" + name + "' (found: " + join(found) + ")");
}

//! [open_context]
[[nodiscard]] Context open_device(ibv_device* device) {
    Context context(ibv_open_device(device));
    if (!context) { throw std::system_error(errno, std::generic_category(), "ibv_open_device"); }
    return context;
}
//! [open_context]

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

//! [query]
[[nodiscard]] ibv_device_attr_ex query_device(ibv_context* context) {
    ibv_device_attr_ex attr_ex{};
    // ibv_query_device_ex returns the error number itself: use it, not errno.
    if (const int rc = ibv_query_device_ex(context, nullptr, &attr_ex); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_query_device_ex");
    }
    return attr_ex;
}

// The attributes of ports 1 to port_count, at index port - 1.
[[nodiscard]] std::vector<ibv_port_attr> query_ports(ibv_context* context, int port_count) {
    std::vector<ibv_port_attr> ports(static_cast<std::size_t>(port_count));
    for (int port = 1; port <= port_count; ++port) {
        if (const int rc = ibv_query_port(context, static_cast<std::uint8_t>(port),
                                          &ports[static_cast<std::size_t>(port - 1)]);
            rc != 0) {
            throw std::system_error(rc, std::generic_category(), "ibv_query_port");
        }
    }
    return ports;
}
//! [query]

//! [gid_table]
// Every valid GID of one port. ibv_query_gid_table (rdma-core 32+) returns the valid entries of
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

// Prints one port with its GID table; a port that is not active is also a warning on stderr.
void show_port(ibv_context* context, const std::string& device, int port,
               const std::vector<ibv_port_attr>& ports, bool verbose) {
    std::size_t table_size = 0;  // room for every port's GIDs: the table query returns them all
    for (const ibv_port_attr& attr : ports) {
        table_size += static_cast<std::size_t>(attr.gid_tbl_len);
    }
    const ibv_port_attr& port_attr = ports[static_cast<std::size_t>(port - 1)];
    print_port(device, port, port_attr, query_gid_table(context, port, table_size), verbose);
    if (port_attr.state != IBV_PORT_ACTIVE) {
        std::fflush(stdout);
        std::fprintf(stderr, "%s: %s\n", kProgram,
                     port_warning(device, port, port_attr.state).c_str());
    }
}

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
        if (!e.hint().empty()) { std::cerr << "hint: " << e.hint() << '\n'; }
        return e.exit_code();
    } catch (const std::system_error& e) {
        std::cout.flush();
        std::cerr << kProgram << ": " << e.what() << '\n';
        return kExitRdma;
    }
}
//! [main]
#endif
