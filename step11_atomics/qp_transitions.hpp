// Moving an RC QP through RESET->INIT->RTR->RTS: the attributes and mask of each step, and
// modify_qp.
#pragma once

#include "device.hpp"
#include "errors.hpp"
#include "gid.hpp"
#include "wire_format.hpp"

#include <infiniband/verbs.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <system_error>

namespace tutorial {

// The attributes ibv_modify_qp(3) requires, and allows, for each step of an RC QP's life.
// RESET->INIT: where the QP lives (port, P_Key) and what the peer may do to our memory.
inline constexpr int kInitMask =
    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
// INIT->RTR: who the peer is (address vector, QPN), how big its packets are, its first PSN,
// how many RDMA reads it may have in flight at our side, and how long it waits after an RNR NAK.
inline constexpr int kRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
// RTR->RTS: our sending side: first PSN, ACK timeout, retry counts, our RDMA reads in flight.
inline constexpr int kRtsMask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;

// The mask for one RC transition, or 0 for a transition this tutorial does not make.
[[nodiscard]] constexpr int rc_transition_mask(ibv_qp_state from, ibv_qp_state to) {
    if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) { return kInitMask; }
    if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) { return kRtrMask; }
    if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) { return kRtsMask; }
    return 0;
}

// The retry policy decides how fast a dead peer is noticed: a send that is not acknowledged is
// retried retry_cnt times, each after 4.096 us * 2^timeout. 14 gives 67 ms, so 7 tries: ~0.5 s.
// Not 7 retries, as ibv_rc_pingpong asks: Soft-RoCE (rxe) takes retry_cnt 7 to mean "for ever".
inline constexpr std::uint8_t kAckTimeout = 14;
inline constexpr std::uint8_t kRetryCount = 6;
inline constexpr std::uint8_t kRnrRetry =
    7;  // 7 means "retry for ever" on a receiver-not-ready NAK
inline constexpr std::uint8_t kMinRnrTimer = 12;  // 0.64 ms, as ibv_rc_pingpong

// pkey_index: the entry of the port's P_Key table (the partition) this QP belongs to; 0 unless
// --pkey-index. Both sides' partitions must match.
[[nodiscard]] inline ibv_qp_attr init_attributes(int ib_port, std::uint16_t pkey_index) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = pkey_index;
    attr.port_num = static_cast<std::uint8_t>(ib_port);
    attr.qp_access_flags = 0;  // two-sided SEND/RECV only: the peer may not touch our memory
    return attr;
}

// On Ethernet (RoCE) a port is addressed by its GID, so the address vector always has the GRH
// fields: the remote GID and our source GID index. On InfiniBand the LID routes inside the
// subnet; a GRH is added only when the peer sent a GID (as ibv_rc_pingpong does).
[[nodiscard]] inline ibv_qp_attr rtr_attributes(const QpEndpointInfo& remote, ibv_mtu path_mtu,
                                                const LocalPort& port, int ib_port) {
    const bool ethernet = port.attr.link_layer == IBV_LINK_LAYER_ETHERNET;
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = path_mtu;
    attr.dest_qp_num = remote.qpn;
    attr.rq_psn = remote.psn;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = kMinRnrTimer;
    attr.ah_attr.dlid = remote.lid;
    attr.ah_attr.sl = port.service_level;  // IB: mapped to a virtual lane; RoCE: a priority
    attr.ah_attr.src_path_bits = 0;
    attr.ah_attr.port_num = static_cast<std::uint8_t>(ib_port);
    if (ethernet || !is_zero_gid(remote.gid)) {
        attr.ah_attr.is_global = 1;
        attr.ah_attr.grh.hop_limit = 1;
        std::memcpy(attr.ah_attr.grh.dgid.raw, remote.gid.data(), remote.gid.size());
        attr.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(port.gid_index);
        // Its upper six bits are the DSCP, which RoCE v2 carries in the IP header.
        attr.ah_attr.grh.traffic_class = port.traffic_class;
    }
    return attr;
}

[[nodiscard]] inline ibv_qp_attr rts_attributes(std::uint32_t local_psn) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = kAckTimeout;
    attr.retry_cnt = kRetryCount;
    attr.rnr_retry = kRnrRetry;
    attr.sq_psn = local_psn;
    attr.max_rd_atomic = 1;
    return attr;
}

// The MTU enum is not the MTU: IBV_MTU_1024 is 3, and 128 << 3 is 1024. 0 for an unknown value.
[[nodiscard]] inline int mtu_bytes(ibv_mtu mtu) {
    return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128 << mtu : 0;
}

[[nodiscard]] inline std::optional<ibv_mtu> mtu_from_bytes(int bytes) {
    for (const ibv_mtu mtu : {IBV_MTU_256, IBV_MTU_512, IBV_MTU_1024, IBV_MTU_2048, IBV_MTU_4096}) {
        if (mtu_bytes(mtu) == bytes) { return mtu; }
    }
    return std::nullopt;
}

[[nodiscard]] inline const char* qp_state_text(ibv_qp_state state) {
    static constexpr const char* kNames[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
    return state >= IBV_QPS_RESET && state <= IBV_QPS_ERR ? kNames[state] : "unknown";
}

inline void modify_qp(ibv_qp* qp, ibv_qp_attr& attr, ibv_qp_state from, ibv_qp_state to) {
    // ibv_modify_qp returns the error number itself: use it, not errno.
    if (const int rc = ibv_modify_qp(qp, &attr, rc_transition_mask(from, to)); rc != 0) {
        throw std::system_error(
            rc, std::generic_category(),
            std::string("ibv_modify_qp ") + qp_state_text(from) + "->" + qp_state_text(to));
    }
}

// INIT->RTR->RTS once the peer's address is known. Both sides must use the same path MTU: see
// the chapter. read_depth: the RDMA READs in flight, each way, that both sides agreed on.
inline void connect_qp(ibv_qp* qp, const LocalPort& port, int ib_port, ibv_mtu path_mtu,
                       std::uint32_t local_psn, const QpEndpointInfo& remote,
                       std::uint8_t read_depth) {
    const bool ethernet = port.attr.link_layer == IBV_LINK_LAYER_ETHERNET;
    if (ethernet && is_zero_gid(remote.gid)) {
        throw TutorialError(kExitPeer, "the peer sent GID :: (all zeros), but RoCE routes by GID",
                            "start the peer with a GID index (-g), e.g. ibv_rc_pingpong -g 1");
    }
    ibv_qp_attr rtr = rtr_attributes(remote, path_mtu, port, ib_port);
    rtr.max_dest_rd_atomic = read_depth;  // the peer's READs we serve at once
    modify_qp(qp, rtr, IBV_QPS_INIT, IBV_QPS_RTR);
    ibv_qp_attr rts = rts_attributes(local_psn);
    rts.max_rd_atomic = read_depth;  // our READs in flight at the peer
    modify_qp(qp, rts, IBV_QPS_RTR, IBV_QPS_RTS);
}

[[nodiscard]] inline std::uint32_t random_psn() {
    std::random_device entropy;
    return std::uniform_int_distribution<std::uint32_t>(0, 0xffffff)(entropy);
}

}  // namespace tutorial
