// The local port to connect through: its attributes and the GID index to use.
#pragma once

#include "device.hpp"
#include "errors.hpp"
#include "gid.hpp"

#include <infiniband/verbs.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

namespace tutorial {

// What the peer needs to reach us, besides the QPN: the port's LID, link layer and MTU, and the
// GID index, chosen as in step 01 or given with -g.
struct LocalPort {
    ibv_port_attr attr{};
    int gid_index = 0;
    GidBytes gid{};
};

[[nodiscard]] inline LocalPort query_local_port(ibv_context* context, int ib_port, int gid_index,
                                                int port_count) {
    LocalPort local;
    if (const int rc = ibv_query_port(context, static_cast<std::uint8_t>(ib_port), &local.attr);
        rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_query_port");
    }
    const std::vector<GidEntry> table =
        query_gid_table(context, ib_port, gid_table_size(context, port_count));
    std::optional<std::uint32_t> index;
    if (gid_index >= 0) {
        index = static_cast<std::uint32_t>(gid_index);
    } else if (const std::optional<GidChoice> choice = choose_gid(table)) {
        index = choice->index;
    }
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

}  // namespace tutorial
