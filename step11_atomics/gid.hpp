// GIDs: formatting one, and choosing which GID index to use.
#pragma once

#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace tutorial {

using GidBytes = std::array<std::uint8_t, 16>;

// One row of a port's GID table, as the GID choice sees it.
struct GidEntry {
    std::uint32_t index = 0;
    GidBytes gid{};
    ibv_gid_type type = IBV_GID_TYPE_IB;
};

[[nodiscard]] inline bool is_zero_gid(const GidBytes& gid) {
    return std::all_of(gid.begin(), gid.end(), [](std::uint8_t b) { return b == 0; });
}

// ::ffff:a.b.c.d, the form RoCE v2 gives an IPv4 address.
[[nodiscard]] inline bool is_ipv4_mapped(const GidBytes& gid) {
    return std::all_of(gid.begin(), gid.begin() + 10, [](std::uint8_t b) { return b == 0; }) &&
           gid[10] == 0xff && gid[11] == 0xff;
}

// A GID is an IPv6 address; inet_ntop already writes an IPv4-mapped one as ::ffff:127.0.0.1.
[[nodiscard]] inline std::string format_gid(const GidBytes& gid) {
    char text[INET6_ADDRSTRLEN] = {};
    inet_ntop(AF_INET6, gid.data(), text, sizeof text);
    return text;
}

// Prefers RoCE v2 with an IPv4-mapped address, then RoCE v2, then anything else valid (RoCE v1,
// IB); zero GIDs are skipped, and the lowest index wins among equals. Nothing when none is valid.
[[nodiscard]] inline std::optional<std::uint32_t> choose_gid(std::span<const GidEntry> table) {
    const auto rank = [](const GidEntry& entry) {
        if (entry.type == IBV_GID_TYPE_ROCE_V2) { return is_ipv4_mapped(entry.gid) ? 0 : 1; }
        return 2;
    };
    const GidEntry* best = nullptr;
    for (const GidEntry& entry : table) {
        if (is_zero_gid(entry.gid)) { continue; }
        if (best == nullptr || rank(entry) < rank(*best) ||
            (rank(entry) == rank(*best) && entry.index < best->index)) {
            best = &entry;
        }
    }
    return best != nullptr ? std::optional<std::uint32_t>(best->index) : std::nullopt;
}

}  // namespace tutorial
