// Work completion status names, their likely causes, and the error a failed completion throws.
#pragma once

#include "errors.hpp"

#include <infiniband/verbs.h>

#include <string>

namespace tutorial {

// ibv_wc_status_str() says "transport retry counter exceeded"; the enum name is what you grep for.
[[nodiscard]] inline const char* wc_status_name(ibv_wc_status status) {
    static constexpr const char* kNames[] = {
        "IBV_WC_SUCCESS",         "IBV_WC_LOC_LEN_ERR",      "IBV_WC_LOC_QP_OP_ERR",
        "IBV_WC_LOC_EEC_OP_ERR",  "IBV_WC_LOC_PROT_ERR",     "IBV_WC_WR_FLUSH_ERR",
        "IBV_WC_MW_BIND_ERR",     "IBV_WC_BAD_RESP_ERR",     "IBV_WC_LOC_ACCESS_ERR",
        "IBV_WC_REM_INV_REQ_ERR", "IBV_WC_REM_ACCESS_ERR",   "IBV_WC_REM_OP_ERR",
        "IBV_WC_RETRY_EXC_ERR",   "IBV_WC_RNR_RETRY_EXC_ERR"};
    return status <= IBV_WC_RNR_RETRY_EXC_ERR ? kNames[status] : "IBV_WC_(other)";
}

// The usual reason behind a failed work completion, as a hint for the reader. Providers differ:
// a message longer than the receive buffer is IBV_WC_LOC_LEN_ERR at the receiver and
// IBV_WC_REM_INV_REQ_ERR at the sender on most NICs; Soft-RoCE (rxe) reports
// IBV_WC_LOC_QP_OP_ERR and IBV_WC_REM_OP_ERR.
[[nodiscard]] inline std::string wc_status_cause(ibv_wc_status status, bool receive) {
    const std::string same_size = "both sides must use the same -s";
    switch (status) {
        case IBV_WC_LOC_LEN_ERR:
            return "a message was longer than the receive buffer posted for it: " + same_size;
        case IBV_WC_LOC_QP_OP_ERR:
            return receive ? "the incoming message did not fit the posted receive (Soft-RoCE "
                             "reports a too-long message so): " +
                                 same_size
                           : "the send request was invalid for this QP, or the packet could not go "
                             "out (Soft-RoCE reports a network link that is down so)";
        case IBV_WC_REM_INV_REQ_ERR:
        case IBV_WC_REM_OP_ERR:
            return "the peer could not take our message, usually because it is longer than the "
                   "peer's receive buffer: " +
                   same_size;
        case IBV_WC_RETRY_EXC_ERR:
            return "the peer's QP stopped acknowledging (after retries): the peer process died or "
                   "was killed, the network link between the hosts is down, or the path (GID, MTU) "
                   "is wrong";
        case IBV_WC_RNR_RETRY_EXC_ERR: return "the peer had no receive posted for too long";
        case IBV_WC_WR_FLUSH_ERR:
            return "the QP was already in the error state; an earlier completion says why";
        default: return "";
    }
}

// A failed work completion: exit code 1, naming the status and its likely cause. (In an error
// completion only wr_id, status and qp_num are valid, not opcode: the caller says which it was.)
[[noreturn]] inline void throw_wc_error(const ibv_wc& wc, bool receive) {
    throw TutorialError(kExitRdma,
                        std::string(receive ? "receive" : "send") + " failed: " +
                            wc_status_name(wc.status) + " (" + ibv_wc_status_str(wc.status) + ")",
                        wc_status_cause(wc.status, receive));
}

}  // namespace tutorial
