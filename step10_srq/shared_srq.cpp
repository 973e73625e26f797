// Step 10: the shared receive queue: one buffer, one MR, a slot per receive, a limit to refill by.
#include "shared_srq.hpp"

#include "resources.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <stdexcept>
#include <string>
#include <system_error>

namespace tutorial {

//! [create]
SharedReceiveQueue::SharedReceiveQueue(const Device& device, std::uint32_t depth,
                                       std::size_t slot_size)
    : ring_(depth, slot_size) {
    const auto max_srq_wr = static_cast<std::uint64_t>(device.attr().max_srq_wr);
    if (depth > max_srq_wr) {
        over_limit("--srq-depth", depth, device.name(), "max_srq_wr", max_srq_wr);
    }
    const std::size_t bytes = std::size_t{depth} * slot_size;
    buffer_ = allocate_buffer(bytes);
    mr_.reset(ibv_reg_mr(device.pd(), buffer_.get(), bytes, IBV_ACCESS_LOCAL_WRITE));
    if (!mr_) { throw_reg_mr_error(errno, bytes); }
    ibv_srq_init_attr init{};
    init.attr.max_wr = depth;  // the device may give more; the ring posts depth at most
    init.attr.max_sge = 1;
    srq_.reset(ibv_create_srq(device.pd(), &init));
    if (!srq_) { throw std::system_error(errno, std::generic_category(), "ibv_create_srq"); }
}
//! [create]

//! [post]
// step09's post_receive_batch, on the SRQ: one chain of work requests per call, each with its
// own slot, whose index is the wr_id.
std::uint32_t SharedReceiveQueue::post_free_slots() {
    constexpr std::size_t kChain = 32;
    std::array<std::uint32_t, kChain> slots{};
    std::array<ibv_sge, kChain> sges{};
    std::array<ibv_recv_wr, kChain> wrs{};
    std::uint32_t posted = 0;
    while (const std::size_t n = ring_.take_free(slots)) {
        for (std::size_t i = 0; i < n; ++i) {
            sges[i] = {reinterpret_cast<std::uintptr_t>(buffer_.get() + ring_.offset(slots[i])),
                       static_cast<std::uint32_t>(ring_.slot_size()), mr_->lkey};
            wrs[i] = {};
            wrs[i].wr_id = slots[i];
            wrs[i].sg_list = &sges[i];
            wrs[i].num_sge = 1;
            wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
        }
        ibv_recv_wr* bad = nullptr;
        if (const int rc = ibv_post_srq_recv(srq_.get(), wrs.data(), &bad); rc != 0) {
            // The ones from bad on were not posted: their slots are free again.
            for (ibv_recv_wr* wr = bad; wr != nullptr; wr = wr->next) {
                ring_.give_back(wr->wr_id);
            }
            throw std::system_error(rc, std::generic_category(), "ibv_post_srq_recv");
        }
        posted += static_cast<std::uint32_t>(n);
    }
    return posted;
}
//! [post]

std::span<const std::byte> SharedReceiveQueue::received(std::uint64_t slot,
                                                        std::size_t length) const {
    if (slot >= ring_.depth()) {
        throw std::out_of_range("receive wr_id " + std::to_string(slot) + " is no slot");
    }
    const auto index = static_cast<std::uint32_t>(slot);
    return {buffer_.get() + ring_.offset(index), std::min(length, ring_.slot_size())};
}

//! [arm]
void SharedReceiveQueue::arm_limit(std::uint32_t limit) {
    ibv_srq_attr attr{};
    attr.srq_limit = limit;
    if (const int rc = ibv_modify_srq(srq_.get(), &attr, IBV_SRQ_LIMIT); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_modify_srq(IBV_SRQ_LIMIT)");
    }
}
//! [arm]

}  // namespace tutorial
