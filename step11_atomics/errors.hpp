// Exit codes, the two error types every step throws and main() catches, and what a failed work
// completion's status means.
#pragma once

#include <infiniband/verbs.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace tutorial {

constexpr int kExitOk = 0, kExitRdma = 1, kExitUsage = 2, kExitNoDevice = 3, kExitNoProvider = 4,
              kExitNoSuchDevice = 5, kExitPeer = 6, kExitTimeout = 7, kExitInterrupted = 130;

// A bad option or value: main() prints it with the usage text and exits with kExitUsage.
class UsageError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// Everything that is not a failing verb: no device, no provider, unknown device or port, ...
class TutorialError : public std::runtime_error {
  public:
    TutorialError(int exit_code, const std::string& message, std::string hint = {})
        : std::runtime_error(message), exit_code_(exit_code), hint_(std::move(hint)) {}
    [[nodiscard]] int exit_code() const noexcept { return exit_code_; }
    [[nodiscard]] const std::string& hint() const noexcept { return hint_; }

  private:
    int exit_code_;
    std::string hint_;
};

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
            return "the peer could not take our request: a message longer than its receive "
                   "buffer (" +
                   same_size +
                   "), an RDMA READ or WRITE its QP does not allow (no remote access), or more "
                   "RDMA READs at once than its max_dest_rd_atomic";
        case IBV_WC_RETRY_EXC_ERR:
            return "the peer stopped answering: it died or was killed, the network link to it is "
                   "down, its QP is not in RTR, or the address (GID, LID, QPN) is wrong";
        case IBV_WC_RNR_RETRY_EXC_ERR: return "the peer had no receive posted for too long";
        case IBV_WC_WR_FLUSH_ERR:
            return "the QP was already in the error state; an earlier completion says why";
        case IBV_WC_LOC_PROT_ERR:
            return "a local address or lkey lies outside the registered memory region";
        case IBV_WC_REM_ACCESS_ERR:
            return "the remote range or rkey is outside what the peer registered, or its memory "
                   "region lacks REMOTE_WRITE/REMOTE_READ";
        default: return "";
    }
}

}  // namespace tutorial
