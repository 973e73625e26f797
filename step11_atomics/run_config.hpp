// What both roles take from the options: the device's config, the handshake's settings, and
// the address lines that -v prints.
#pragma once

#include "gid.hpp"
#include "handshake.hpp"
#include "options.hpp"
#include "rdma_device.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>

namespace tutorial {

inline DeviceConfig device_config(const Options& o) {
    return {o.device_name,
            static_cast<std::uint8_t>(o.ib_port),
            o.gid_index,
            static_cast<std::uint8_t>(o.service_level),
            static_cast<std::uint8_t>(o.traffic_class),
            static_cast<std::uint16_t>(o.pkey_index)};
}

// Handshake v3's -s and -n stay 0 (not compared): the server serves any client's run.
inline HandshakeSettings handshake_settings(const Options& o) {
    HandshakeSettings h;
    h.timeout = std::chrono::seconds(o.timeout_seconds);
    return h;
}

inline void print_address(const char* which, const PeerInfo& info) {
    std::printf("  %s address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", which, info.lid,
                info.qpn, info.psn, format_gid(info.gid).c_str());
}

}  // namespace tutorial
