// Step 11: IBV_WR_ATOMIC_WRITE (Linux 6.2 and later on rxe): an 8-byte store that the target
// places as one piece, through the extended post API.
#pragma once

#include "atomics.hpp"

#include <infiniband/verbs.h>

#include <cstdint>
#include <system_error>

namespace tutorial {

//! [atomic_write_cap]
/// The device's ATOMIC_WRITE capability: bit 40 of device_cap_flags_ex, the kernel's
/// IB_UVERBS_DEVICE_ATOMIC_WRITE (include/uapi/rdma/ib_user_verbs.h). rdma-core 44's verbs.h
/// has no name for it.
inline constexpr std::uint64_t kDeviceCapAtomicWrite = std::uint64_t{1} << 40;

[[nodiscard]] inline bool supports_atomic_write(ibv_context* context) {
    ibv_device_attr_ex attr{};
    if (const int rc = ibv_query_device_ex(context, nullptr, &attr); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_query_device_ex");
    }
    return (attr.device_cap_flags_ex & kDeviceCapAtomicWrite) != 0;
}
//! [atomic_write_cap]

//! [atomic_write]
/// Posts one ATOMIC_WRITE of \p value to \p target on \p qp, a QP created with
/// IBV_QP_EX_WITH_ATOMIC_WRITE in its send_ops_flags (ibv_create_qp_ex). Signaled.
inline void post_atomic_write(ibv_qp_ex* qp, RemoteWord target, std::uint64_t value,
                              std::uint64_t wr_id) {
    require_aligned(target.addr);
    ibv_wr_start(qp);
    qp->wr_id = wr_id;
    qp->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_atomic_write(qp, target.rkey, target.addr, &value);  // the 8 bytes are copied here
    if (const int rc = ibv_wr_complete(qp); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_wr_complete");
    }
}
//! [atomic_write]

}  // namespace tutorial
