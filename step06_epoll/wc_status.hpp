// Work completion status names, and their likely causes.
#pragma once

#include <infiniband/verbs.h>

#include <string>

namespace tutorial {

//! [wc_status]
// ibv_wc_status_str() says "transport retry counter exceeded"; the enum name is what you grep for.
[[nodiscard]] inline const char* wc_status_name(ibv_wc_status status) {
    switch (status) {
        case IBV_WC_SUCCESS:
            return "IBV_WC_SUCCESS";
        case IBV_WC_LOC_LEN_ERR:
            return "IBV_WC_LOC_LEN_ERR";
        case IBV_WC_LOC_QP_OP_ERR:
            return "IBV_WC_LOC_QP_OP_ERR";
        case IBV_WC_LOC_PROT_ERR:
            return "IBV_WC_LOC_PROT_ERR";
        case IBV_WC_WR_FLUSH_ERR:
            return "IBV_WC_WR_FLUSH_ERR";
        case IBV_WC_REM_INV_REQ_ERR:
            return "IBV_WC_REM_INV_REQ_ERR";
        case IBV_WC_REM_ACCESS_ERR:
            return "IBV_WC_REM_ACCESS_ERR";
        case IBV_WC_REM_OP_ERR:
            return "IBV_WC_REM_OP_ERR";
        case IBV_WC_RETRY_EXC_ERR:
            return "IBV_WC_RETRY_EXC_ERR";
        case IBV_WC_RNR_RETRY_EXC_ERR:
            return "IBV_WC_RNR_RETRY_EXC_ERR";
        default:
            return "IBV_WC_(other)";
    }
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
            return "the peer could not take our request: a message longer than its receive "
                   "buffer (" +
                   same_size +
                   "), or an RDMA READ or WRITE that its QP does not allow (no remote access)";
        case IBV_WC_RETRY_EXC_ERR:
            return "the peer stopped answering: it died or was killed, the network link to it is "
                   "down, its QP is not in RTR, or the address (GID, LID, QPN) is wrong";
        case IBV_WC_RNR_RETRY_EXC_ERR:
            return "the peer had no receive posted for too long";
        case IBV_WC_WR_FLUSH_ERR:
            return "the QP was already in the error state; an earlier completion says why";
        case IBV_WC_LOC_PROT_ERR:
            return "a local address or lkey lies outside the registered memory region";
        case IBV_WC_REM_ACCESS_ERR:
            return "the remote range or rkey is outside what the peer registered, or its memory "
                   "region lacks REMOTE_WRITE/REMOTE_READ";
        case IBV_WC_REM_INV_RD_REQ_ERR:
            return "the peer's QP allows fewer outstanding RDMA READs than were sent";
        default:
            return "";
    }
}
//! [wc_status]

}  // namespace tutorial
