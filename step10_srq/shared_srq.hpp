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

/// \brief An SRQ whose receives land in one registered buffer, a slot each (ReceiveRing): any QP
/// created with it takes its next receive from here; the completion's wr_id is the slot.
class SharedReceiveQueue {
  public:
    /// \brief Registers depth × slot_size bytes and creates the SRQ; nothing is posted yet.
    /// \throws TutorialError kExitUsage (over max_srq_wr); std::system_error naming the verb
    SharedReceiveQueue(const Device& device, std::uint32_t depth, std::size_t slot_size);
    SharedReceiveQueue(const SharedReceiveQueue&) = delete;
    SharedReceiveQueue& operator=(const SharedReceiveQueue&) = delete;

    [[nodiscard]] ibv_srq* get() const noexcept { return srq_.get(); }
    [[nodiscard]] const ReceiveRing& ring() const noexcept { return ring_; }

    /// \brief Posts every free slot, 32 to a chained ibv_post_srq_recv; returns how many.
    /// \throws std::system_error ("ibv_post_srq_recv")
    std::uint32_t post_free_slots();
    /// \brief The first \p length bytes that landed in \p slot.
    [[nodiscard]] std::span<const std::byte> received(std::uint64_t slot, std::size_t length) const;
    /// \brief A receive's completion came back: its slot is free again (not yet posted).
    void give_back(std::uint64_t slot) { ring_.give_back(slot); }
    /// \brief Arms the one-shot IBV_EVENT_SRQ_LIMIT_REACHED for fewer than \p limit posted.
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
