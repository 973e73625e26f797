// Which attributes ibv_modify_qp needs for each UD transition, and their names.
#pragma once

#include <infiniband/verbs.h>

#include <string>
#include <utility>

namespace tutorial {

// The attributes ibv_modify_qp(3) requires for each step of a UD QP's life: no peer anywhere.
//! [ud_masks]
// RESET->INIT: the port, the P_Key, and the Q_Key that every datagram to this QP must carry.
inline constexpr int kUdInitMask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
// INIT->RTR: nothing but the state. RTR->RTS: the first PSN of our sends.
inline constexpr int kUdRtrMask = IBV_QP_STATE;
inline constexpr int kUdRtsMask = IBV_QP_STATE | IBV_QP_SQ_PSN;
//! [ud_masks]

// The mask for one UD transition, or 0 for a transition this step does not make.
[[nodiscard]] constexpr int ud_transition_mask(ibv_qp_state from, ibv_qp_state to) {
    if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) { return kUdInitMask; }
    if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) { return kUdRtrMask; }
    if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) { return kUdRtsMask; }
    return 0;
}

// "IBV_QP_STATE | IBV_QP_PKEY_INDEX | ...", for printing a transition.
[[nodiscard]] inline std::string attr_mask_text(int mask) {
    static constexpr std::pair<int, const char*> kNames[] = {
        {IBV_QP_STATE, "IBV_QP_STATE"},   {IBV_QP_PKEY_INDEX, "IBV_QP_PKEY_INDEX"},
        {IBV_QP_PORT, "IBV_QP_PORT"},     {IBV_QP_QKEY, "IBV_QP_QKEY"},
        {IBV_QP_SQ_PSN, "IBV_QP_SQ_PSN"},
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
