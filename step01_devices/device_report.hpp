// Printing a device and each of its ports: attributes, limits, port state and GID table.
#pragma once

#include "enum_text.hpp"
#include "gid.hpp"

#include <endian.h>
#include <infiniband/verbs.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace tutorial {

[[nodiscard]] inline std::string guid_text(__be64 guid_be) {
    const std::uint64_t guid = be64toh(guid_be);
    char text[20];
    std::snprintf(text, sizeof text, "%04x:%04x:%04x:%04x", static_cast<unsigned>(guid >> 48),
                  static_cast<unsigned>((guid >> 32) & 0xffff),
                  static_cast<unsigned>((guid >> 16) & 0xffff),
                  static_cast<unsigned>(guid & 0xffff));
    return text;
}

//! [print_device]
inline void print_device(ibv_device* device, const ibv_device_attr_ex& attr_ex, bool verbose) {
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

inline void print_port(const std::string& device, int port, const ibv_port_attr& port_attr,
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

}  // namespace tutorial
