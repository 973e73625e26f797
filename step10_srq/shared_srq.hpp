// Step 10: one shared receive queue for every connection, over one registered ring of slots.
#pragma once

#include "rdma_device.hpp"
#include "receive_ring.hpp"
#include "verbs_raii.hpp"

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <span>

namespace tutorial {

/// \brief An SRQ whose receives land in one registered buffer, one slot per receive
/// (ReceiveRing). Any QP created with it takes its next receive from here, whichever connection
/// the message comes from; the completion's wr_id is the slot.
class SharedReceiveQueue {
  public:
    /// \brief Allocates and registers depth × slot_size bytes and creates the SRQ for \p depth
    /// receives. Nothing is posted yet: post_free_slots().
    /// \throws TutorialError kExitUsage when \p depth is over the device's max_srq_wr;
    ///         std::system_error naming the verb
    SharedReceiveQueue(const Device& device, std::uint32_t depth, std::size_t slot_size);
    SharedReceiveQueue(const SharedReceiveQueue&) = delete;
    SharedReceiveQueue& operator=(const SharedReceiveQueue&) = delete;

    [[nodiscard]] ibv_srq* get() const noexcept { return srq_.get(); }
    [[nodiscard]] const ReceiveRing& ring() const noexcept { return ring_; }

    /// \brief Posts every free slot, chained, in as few ibv_post_srq_recv calls as the chain
    /// length allows; returns how many it posted.
    /// \throws std::system_error ("ibv_post_srq_recv")
    std::uint32_t post_free_slots();
    /// \brief The first \p length bytes that landed in \p slot.
    [[nodiscard]] std::span<const std::byte> received(std::uint64_t slot, std::size_t length) const;
    /// \brief A receive's completion came back: its slot is free again (not yet posted).
    void give_back(std::uint64_t slot) { ring_.give_back(slot); }
    /// \brief ibv_modify_srq(IBV_SRQ_LIMIT): arm the one-shot IBV_EVENT_SRQ_LIMIT_REACHED for when
    /// fewer than \p limit receives stay posted. The device disarms it when it fires.
    /// \throws std::system_error ("ibv_modify_srq")
    void arm_limit(std::uint32_t limit);

  private:
    ReceiveRing ring_;
    // Parent-first: C++ destroys the SRQ, then the MR, then the buffer. Every QP on the SRQ must
    // be destroyed before it (ibv_destroy_srq fails with EBUSY otherwise).
    Buffer buffer_;
    MemoryRegion mr_;
    SharedReceiveQueueHandle srq_;
};

}  // namespace tutorial
