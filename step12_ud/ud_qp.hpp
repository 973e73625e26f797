// Step 12: a UD QP's life, RESET->INIT->RTR->RTS, with no peer in any of it.
#pragma once

#include "enum_text.hpp"
#include "qp_masks.hpp"

#include <infiniband/verbs.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <system_error>

namespace tutorial {

inline void modify_qp(ibv_qp* qp, ibv_qp_attr& attr, ibv_qp_state from, ibv_qp_state to) {
    // ibv_modify_qp returns the error number itself: use it, not errno.
    if (const int rc = ibv_modify_qp(qp, &attr, ud_transition_mask(from, to)); rc != 0) {
        throw std::system_error(
            rc, std::generic_category(),
            std::string("ibv_modify_qp ") + qp_state_text(from) + "->" + qp_state_text(to));
    }
}

//! [ud_transitions]
// INIT takes the Q_Key: a datagram whose Q_Key differs is dropped by the receiving QP. RTR takes
// nothing (every message names its own destination), RTS only the first PSN of our sends.
inline void ud_qp_to_rts(ibv_qp* qp, int ib_port, std::uint16_t pkey_index, std::uint32_t qkey,
                         std::uint32_t psn) {
    ibv_qp_attr init{};
    init.qp_state = IBV_QPS_INIT;
    init.pkey_index = pkey_index;
    init.port_num = static_cast<std::uint8_t>(ib_port);
    init.qkey = qkey;
    modify_qp(qp, init, IBV_QPS_RESET, IBV_QPS_INIT);
    ibv_qp_attr rtr{};
    rtr.qp_state = IBV_QPS_RTR;
    modify_qp(qp, rtr, IBV_QPS_INIT, IBV_QPS_RTR);
    ibv_qp_attr rts{};
    rts.qp_state = IBV_QPS_RTS;
    rts.sq_psn = psn;
    modify_qp(qp, rts, IBV_QPS_RTR, IBV_QPS_RTS);
}
//! [ud_transitions]

[[nodiscard]] inline std::uint32_t random_psn() {
    std::random_device entropy;
    return std::uniform_int_distribution<std::uint32_t>(0, 0xffffff)(entropy);
}

// The three transitions made, with the attributes each set.
inline void print_transitions(const ibv_qp& qp, std::uint32_t qkey) {
    const auto line = [&](ibv_qp_state from, ibv_qp_state to) {
        std::printf("QP 0x%06x: %s -> %s (%s)\n", qp.qp_num, qp_state_text(from), qp_state_text(to),
                    attr_mask_text(ud_transition_mask(from, to)).c_str());
    };
    line(IBV_QPS_RESET, IBV_QPS_INIT);
    line(IBV_QPS_INIT, IBV_QPS_RTR);
    line(IBV_QPS_RTR, IBV_QPS_RTS);
    std::printf("Q_Key:   0x%08x\n", qkey);
    std::fflush(stdout);
}

}  // namespace tutorial
