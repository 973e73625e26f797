// Verbs enums and codes as text (transport, port state, MTU, width, speed, link layer...).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace tutorial {

//! [enum_text]
[[nodiscard]] inline const char* transport_text(ibv_transport_type transport) {
    switch (transport) {
        case IBV_TRANSPORT_IB: return "InfiniBand";
        case IBV_TRANSPORT_IWARP: return "iWARP";
        case IBV_TRANSPORT_USNIC: return "usNIC";
        case IBV_TRANSPORT_USNIC_UDP: return "usNIC UDP";
        case IBV_TRANSPORT_UNSPECIFIED: return "unspecified";
        default: return "unknown";
    }
}

[[nodiscard]] inline const char* port_state_text(ibv_port_state state) {
    switch (state) {
        case IBV_PORT_NOP: return "PORT_NOP";
        case IBV_PORT_DOWN: return "PORT_DOWN";
        case IBV_PORT_INIT: return "PORT_INIT";
        case IBV_PORT_ARMED: return "PORT_ARMED";
        case IBV_PORT_ACTIVE: return "PORT_ACTIVE";
        case IBV_PORT_ACTIVE_DEFER: return "PORT_ACTIVE_DEFER";
        default: return "unknown";
    }
}

// The physical state codes come from the InfiniBand spec (PortPhysicalState).
[[nodiscard]] inline const char* phys_state_text(std::uint8_t phys_state) {
    switch (phys_state) {
        case 1: return "SLEEP";
        case 2: return "POLLING";
        case 3: return "DISABLED";
        case 4: return "PORT_CONFIGURATION_TRAINING";
        case 5: return "LINK_UP";
        case 6: return "LINK_ERROR_RECOVERY";
        case 7: return "PHY_TEST";
        default: return "unknown";
    }
}

[[nodiscard]] inline const char* link_layer_text(std::uint8_t link_layer) {
    switch (link_layer) {
        case IBV_LINK_LAYER_UNSPECIFIED:  // old kernels report 0 for InfiniBand
        case IBV_LINK_LAYER_INFINIBAND: return "InfiniBand";
        case IBV_LINK_LAYER_ETHERNET: return "Ethernet";
        default: return "unknown";
    }
}

// The MTU enum is not the MTU: IBV_MTU_1024 is 3. Returns 0 for an unknown value.
[[nodiscard]] inline int mtu_bytes(ibv_mtu mtu) {
    switch (mtu) {
        case IBV_MTU_256: return 256;
        case IBV_MTU_512: return 512;
        case IBV_MTU_1024: return 1024;
        case IBV_MTU_2048: return 2048;
        case IBV_MTU_4096: return 4096;
        default: return 0;
    }
}

[[nodiscard]] inline const char* width_text(std::uint8_t active_width) {
    switch (active_width) {
        case 1: return "1X";
        case 2: return "4X";
        case 4: return "8X";
        case 8: return "12X";
        case 16: return "2X";
        default: return "unknown";
    }
}

// Per-lane signalling rate, as ibv_devinfo prints it.
[[nodiscard]] inline const char* speed_text(std::uint8_t active_speed) {
    switch (active_speed) {
        case 1: return "2.5 Gbps";
        case 2: return "5.0 Gbps";
        case 4:
        case 8: return "10.0 Gbps";
        case 16: return "14.0 Gbps";
        case 32: return "25.0 Gbps";
        case 64: return "50.0 Gbps";
        case 128: return "100.0 Gbps";
        default: return "unknown";
    }
}

[[nodiscard]] inline const char* atomic_cap_text(ibv_atomic_cap cap) {
    switch (cap) {
        case IBV_ATOMIC_NONE: return "ATOMIC_NONE (no atomic operations)";
        case IBV_ATOMIC_HCA: return "ATOMIC_HCA (atomic within this device)";
        case IBV_ATOMIC_GLOB: return "ATOMIC_GLOB (atomic with the CPU too)";
        default: return "unknown";
    }
}

[[nodiscard]] inline const char* gid_type_text(ibv_gid_type type) {
    switch (type) {
        case IBV_GID_TYPE_IB: return "IB";
        case IBV_GID_TYPE_ROCE_V1: return "RoCE v1";
        case IBV_GID_TYPE_ROCE_V2: return "RoCE v2";
        default: return "unknown";
    }
}
//! [enum_text]

}  // namespace tutorial
