// The local port to connect through: its attributes and the GID index to use.
#pragma once

#include "device.hpp"
#include "errors.hpp"
#include "gid.hpp"

#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <vector>

namespace tutorial {

// What the peer needs to reach us, besides the QPN: the port's LID, link layer and MTU, and the
// GID index with the rule that chose it. Then this side's fabric controls for the path (-l,
// --tclass, --pkey-index): the P_Key index goes into INIT, the service level and the traffic class
// into the address vector at RTR.
struct LocalPort {
    ibv_port_attr attr{};
    int gid_index = 0;
    GidBytes gid{};
    std::string gid_rule;  // -g, the local address of the route to the peer, or step 01's rule
    std::uint8_t service_level = 0;
    std::uint8_t traffic_class = 0;
    std::uint16_t pkey_index = 0;
};

//! [gid_by_route]
// The RoCE v2 entry that holds this address: the GID of the interface on the route to the peer,
// so the RDMA packets take the route that IP takes (VLAN and all).
[[nodiscard]] inline std::optional<std::uint32_t> gid_with_address(
    std::span<const GidEntry> table, const std::array<std::uint8_t, 16>& address) {
    for (const GidEntry& entry : table) {
        if (entry.type == IBV_GID_TYPE_ROCE_V2 && entry.gid == address) { return entry.index; }
    }
    return std::nullopt;
}
//! [gid_by_route]

// -g wins; then the entry with the local address of the route to the peer; then step 01's rule.
[[nodiscard]] inline std::optional<std::uint32_t> choose_source_gid(
    std::span<const GidEntry> table, int gid_index,
    const std::optional<std::array<std::uint8_t, 16>>& local_address, std::string& rule) {
    if (gid_index >= 0) {
        rule = "given with -g";
        return static_cast<std::uint32_t>(gid_index);
    }
    if (local_address) {
        if (const auto index = gid_with_address(table, *local_address)) {
            rule = "the local address of the route to the peer";
            return index;
        }
        rule = "no RoCE v2 GID holds the local address of the route to the peer " +
               format_gid(*local_address) + ": step 01's rule";
    } else {
        rule = "step 01's rule";
    }
    const std::optional<GidChoice> choice = choose_gid(table);
    if (!choice) { return std::nullopt; }
    return choice->index;
}

// local_address: our address on the route to the peer (tcp.hpp's local_address_bytes), once there
// is one.
[[nodiscard]] inline LocalPort query_local_port(
    ibv_context* context, int ib_port, int gid_index, int port_count,
    const std::optional<std::array<std::uint8_t, 16>>& local_address) {
    LocalPort local;
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

// "GID index 1 (::ffff:10.0.2.1): the local address of the route to the peer", for the programs'
// output.
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
