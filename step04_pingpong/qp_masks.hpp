// Which attributes ibv_modify_qp needs for each RC transition, and their names.
#pragma once

#include "tcp.hpp"
#include "wire_format.hpp"

#include <infiniband/verbs.h>

#include <string>
#include <utility>

namespace tutorial {

// The attributes ibv_modify_qp(3) requires, and allows, for each step of an RC QP's life.
//! [init_mask]
// RESET->INIT: where the QP lives (port, P_Key) and what the peer may do to our memory.
inline constexpr int kInitMask =
    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
//! [init_mask]
//! [rtr_mask]
// INIT->RTR: who the peer is (address vector, QPN), how big its packets are, its first PSN,
// how many RDMA reads it may have in flight at our side, and how long it waits after an RNR NAK.
inline constexpr int kRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
//! [rtr_mask]
//! [rts_mask]
// RTR->RTS: our sending side: first PSN, ACK timeout, retry counts, our RDMA reads in flight.
inline constexpr int kRtsMask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
//! [rts_mask]

// The mask for one RC transition, or 0 for a transition this tutorial does not make.
[[nodiscard]] constexpr int rc_transition_mask(ibv_qp_state from, ibv_qp_state to) {
    if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) { return kInitMask; }
    if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) { return kRtrMask; }
    if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) { return kRtsMask; }
    return 0;
}

// "IBV_QP_STATE | IBV_QP_PKEY_INDEX | ...", for printing a transition.
[[nodiscard]] inline std::string attr_mask_text(int mask) {
    static constexpr std::pair<int, const char*> kNames[] = {
        {IBV_QP_STATE, "IBV_QP_STATE"},
        {IBV_QP_PKEY_INDEX, "IBV_QP_PKEY_INDEX"},
        {IBV_QP_PORT, "IBV_QP_PORT"},
        {IBV_QP_ACCESS_FLAGS, "IBV_QP_ACCESS_FLAGS"},
        {IBV_QP_AV, "IBV_QP_AV"},
        {IBV_QP_PATH_MTU, "IBV_QP_PATH_MTU"},
        {IBV_QP_DEST_QPN, "IBV_QP_DEST_QPN"},
        {IBV_QP_RQ_PSN, "IBV_QP_RQ_PSN"},
        {IBV_QP_MAX_DEST_RD_ATOMIC, "IBV_QP_MAX_DEST_RD_ATOMIC"},
        {IBV_QP_MIN_RNR_TIMER, "IBV_QP_MIN_RNR_TIMER"},
        {IBV_QP_TIMEOUT, "IBV_QP_TIMEOUT"},
        {IBV_QP_RETRY_CNT, "IBV_QP_RETRY_CNT"},
        {IBV_QP_RNR_RETRY, "IBV_QP_RNR_RETRY"},
        {IBV_QP_SQ_PSN, "IBV_QP_SQ_PSN"},
        {IBV_QP_MAX_QP_RD_ATOMIC, "IBV_QP_MAX_QP_RD_ATOMIC"},
    };
    std::string text;
    for (const auto& [bit, name] : kNames) {
        if ((mask & bit) != 0) {
            text += (text.empty() ? "" : " | ") + std::string(name);
            mask &= ~bit;
        }
    }
    if (mask != 0) { text += (text.empty() ? "" : " | ") + std::to_string(mask); }
    return text;
}

}  // namespace tutorial
