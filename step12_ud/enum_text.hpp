// Verbs enums as text: port state, link layer, MTU in bytes, QP state.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace tutorial {

//! [enum_text]
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

[[nodiscard]] inline const char* qp_state_text(ibv_qp_state state) {
    switch (state) {
        case IBV_QPS_RESET: return "RESET";
        case IBV_QPS_INIT: return "INIT";
        case IBV_QPS_RTR: return "RTR";
        case IBV_QPS_RTS: return "RTS";
        case IBV_QPS_SQD: return "SQD";
        case IBV_QPS_SQE: return "SQE";
        case IBV_QPS_ERR: return "ERR";
        default: return "unknown";
    }
}
//! [enum_text]

}  // namespace tutorial
