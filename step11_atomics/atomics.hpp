// Step 11: one-sided operations on a remote 8-byte word: READ, WRITE, FETCH_AND_ADD and
// COMPARE_AND_SWAP, and the three ways of counting that the chapter compares.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <system_error>

namespace tutorial {

/// \brief Where a remote word lives: its address in the peer's MR, and the rkey that grants it.
struct RemoteWord {
    std::uint64_t addr = 0;
    std::uint32_t rkey = 0;
};

/// \brief The registered local 8 bytes that a READ of a word, or an atomic's original value,
/// lands in (and that a WRITE of a word is sent from).
struct LocalWord {
    std::uint64_t* value = nullptr;  ///< inside \p mr
    std::uint32_t lkey = 0;
};

//! [alignment]
/// An atomic's remote address must be 8-byte aligned, and its local buffer 8 bytes long (the
/// InfiniBand specification); a device refuses the post (rxe: EINVAL) or NAKs the request.
inline void require_aligned(std::uint64_t remote_addr) {
    if (remote_addr % 8 != 0) {
        throw std::invalid_argument("remote address 0x" + [&] {
            char text[17];
            std::snprintf(text, sizeof text, "%llx", static_cast<unsigned long long>(remote_addr));
            return std::string(text);
        }() + " is not 8-byte aligned: an atomic needs an aligned 8-byte word");
    }
}
//! [alignment]

//! [atomic_cap]
/// \brief Why a device cannot run this step's atomics, or empty. ibv_query_device(3)'s
/// atomic_cap: IBV_ATOMIC_NONE, none; IBV_ATOMIC_HCA, atomic among the atomics that go through
/// this device; IBV_ATOMIC_GLOB, also against the other agents on the memory (the CPU's atomic
/// instructions).
[[nodiscard]] inline std::string atomic_cap_refusal(const std::string& device, ibv_atomic_cap cap) {
    if (cap != IBV_ATOMIC_NONE) { return {}; }
    return device +
           " reports atomic_cap IBV_ATOMIC_NONE: it runs no FETCH_AND_ADD or "
           "COMPARE_AND_SWAP; use a device that reports IBV_ATOMIC_HCA or GLOB (Soft-RoCE "
           "reports HCA)";
}
//! [atomic_cap]

namespace detail {
inline void post(ibv_qp* qp, ibv_send_wr& wr) {
    ibv_send_wr* bad = nullptr;
    if (const int rc = ibv_post_send(qp, &wr, &bad); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_post_send");
    }
}
}  // namespace detail

//! [one_sided]
/// RDMA READ of \p length bytes at \p from into \p into (registered, lkey \p lkey).
inline void post_read(ibv_qp* qp, void* into, std::uint32_t length, std::uint32_t lkey,
                      RemoteWord from, std::uint64_t wr_id) {
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(into), length, lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = from.addr;
    wr.wr.rdma.rkey = from.rkey;
    detail::post(qp, wr);
}

/// RDMA WRITE of \p length bytes from \p from (registered, lkey \p lkey) to \p to.
inline void post_write(ibv_qp* qp, const void* from, std::uint32_t length, std::uint32_t lkey,
                       RemoteWord to, std::uint64_t wr_id) {
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(from), length, lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = to.addr;
    wr.wr.rdma.rkey = to.rkey;
    detail::post(qp, wr);
}
//! [one_sided]

//! [atomics]
/// FETCH_AND_ADD: the device adds \p add to the word at \p target, as one indivisible step
/// among all atomics on it, and writes the word's value from before into \p original.
inline void post_fetch_add(ibv_qp* qp, LocalWord original, RemoteWord target, std::uint64_t add,
                           std::uint64_t wr_id) {
    require_aligned(target.addr);
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(original.value), 8, original.lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.atomic.remote_addr = target.addr;
    wr.wr.atomic.rkey = target.rkey;
    wr.wr.atomic.compare_add = add;
    detail::post(qp, wr);
}

/// COMPARE_AND_SWAP: if the word at \p target equals \p expected, the device stores \p desired;
/// either way it writes the word's value from before into \p original. The swap happened
/// exactly when *original == expected.
inline void post_compare_swap(ibv_qp* qp, LocalWord original, RemoteWord target,
                              std::uint64_t expected, std::uint64_t desired, std::uint64_t wr_id) {
    require_aligned(target.addr);
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(original.value), 8, original.lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.atomic.remote_addr = target.addr;
    wr.wr.atomic.rkey = target.rkey;
    wr.wr.atomic.compare_add = expected;
    wr.wr.atomic.swap = desired;
    detail::post(qp, wr);
}
//! [atomics]

}  // namespace tutorial
