// Step 11: a type-2 memory window: remote access to one slice of an MR, bound on one QP, that the
// owner can take back without deregistering the MR.
#pragma once

#include "atomics.hpp"

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

namespace tutorial {

/// \brief The owner of an ibv_mw (ibv_alloc_mw / ibv_dealloc_mw), in verbs_raii.hpp's shape.
struct MwDeleter {
    void operator()(ibv_mw* mw) const noexcept {
        if (const int rc = ibv_dealloc_mw(mw); rc != 0) {
            std::fprintf(stderr, "destroy failed: ibv_dealloc_mw: %s\n", std::strerror(rc));
        }
    }
};
using MemoryWindow = std::unique_ptr<ibv_mw, MwDeleter>;

/// \brief A type-2 window and the rkey it was last bound with. The program keeps the key:
/// ibv_mw::rkey holds the key from ibv_alloc_mw, and a bind posted as a work request does not
/// update it (ibv_bind_mw(3), for type 1, does).
struct Window {
    MemoryWindow mw;
    std::uint32_t rkey = 0;
};

[[nodiscard]] inline Window allocate_window(ibv_pd* pd) {
    MemoryWindow mw(ibv_alloc_mw(pd, IBV_MW_TYPE_2));
    if (!mw) { throw std::system_error(errno, std::generic_category(), "ibv_alloc_mw"); }
    const std::uint32_t rkey = mw->rkey;
    return Window{std::move(mw), rkey};
}

//! [bind]
/// Posts the bind of \p mw over [addr, addr + length) of \p mr, on \p qp: the QP whose peer
/// will use it (a type-2 window answers to that QP alone). The MR must have been registered with
/// IBV_ACCESS_MW_BIND. The WR carries the window's next key, \p window's last one with its low
/// byte stepped (ibv_inc_rkey), so a holder of the old key is refused; \p window keeps it.
[[nodiscard]] inline std::uint32_t post_bind(ibv_qp* qp, Window& window, ibv_mr* mr,
                                             std::uint64_t addr, std::uint64_t length,
                                             unsigned access, std::uint64_t wr_id) {
    // A window past the MR's end fails the bind, and a failed bind moves the QP to ERR: refuse
    // it here, before anything is posted.
    const auto mr_start = reinterpret_cast<std::uintptr_t>(mr->addr);
    if (addr < mr_start || length > mr->length || addr - mr_start > mr->length - length) {
        throw std::invalid_argument("a window of " + std::to_string(length) + " bytes at offset " +
                                    std::to_string(addr - mr_start) +
                                    " would pass the end of the " + std::to_string(mr->length) +
                                    "-byte MR");
    }
    const std::uint32_t rkey = ibv_inc_rkey(window.rkey);
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = window.mw.get();
    wr.bind_mw.rkey = rkey;
    wr.bind_mw.bind_info.mr = mr;
    wr.bind_mw.bind_info.addr = addr;
    wr.bind_mw.bind_info.length = length;
    wr.bind_mw.bind_info.mw_access_flags = access;
    detail::post(qp, wr);
    return rkey;
}

/// After the bind's successful completion: the window's key is now \p rkey. ibv_mw::rkey is
/// set too, as ibv_bind_mw(3) does for type 1: the next bind WR names the window by it, and
/// rxe refuses a bind whose ibv_mw::rkey is not the window's current key (rxe_bind_mw()).
inline void bound(Window& window, std::uint32_t rkey) {
    window.rkey = rkey;
    window.mw->rkey = rkey;
}
//! [bind]

//! [invalidate]
/// Takes the window back, on the QP it was bound on: after this WR completes, a request that
/// names \p rkey fails at the target (IBV_WC_REM_ACCESS_ERR at the requester).
inline void post_local_invalidate(ibv_qp* qp, std::uint32_t rkey, std::uint64_t wr_id) {
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_LOCAL_INV;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.invalidate_rkey = rkey;
    detail::post(qp, wr);
}

//! [invalidate]

}  // namespace tutorial
