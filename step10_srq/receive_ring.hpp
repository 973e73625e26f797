// Step 10: which slots of the shared receive buffer are posted, free of any device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace tutorial {

/// \brief Slots 0 .. depth-1 of one buffer, slot i at bytes [i × slot_size, +slot_size); a
/// receive's wr_id is its slot. A slot is free or posted (a receive owns it until its completion
/// comes back); free slots are handed out in the order they came back.
class ReceiveRing {
  public:
    ReceiveRing(std::uint32_t depth, std::size_t slot_size)
        : slot_size_(slot_size), posted_(depth, false), free_(depth), free_count_(depth) {
        if (depth == 0 || slot_size == 0) {
            throw std::invalid_argument("a receive ring needs at least one slot of one byte");
        }
        for (std::uint32_t i = 0; i < depth; ++i) { free_[i] = i; }
    }

    [[nodiscard]] std::uint32_t depth() const noexcept {
        return static_cast<std::uint32_t>(posted_.size());
    }
    [[nodiscard]] std::size_t slot_size() const noexcept { return slot_size_; }
    [[nodiscard]] std::size_t offset(std::uint32_t slot) const noexcept {
        return std::size_t{slot} * slot_size_;
    }
    /// \brief Slots that a receive owns now.
    [[nodiscard]] std::uint32_t posted() const noexcept { return depth() - free_count(); }
    [[nodiscard]] std::uint32_t free_count() const noexcept { return free_count_; }

    /// \brief Moves up to out.size() free slots, oldest first, to posted and into \p out: how many.
    std::size_t take_free(std::span<std::uint32_t> out) {
        std::size_t n = 0;
        while (n < out.size() && free_count_ > 0) {
            const std::uint32_t slot = free_[head_];
            head_ = (head_ + 1) % depth();
            --free_count_;
            posted_[slot] = true;
            out[n++] = slot;
        }
        return n;
    }

    /// \brief A receive's completion for \p slot came back (with any status): the slot is free.
    /// \throws std::out_of_range (no slot), std::logic_error (a slot that is not posted)
    void give_back(std::uint64_t slot) {
        if (slot >= posted_.size()) {
            throw std::out_of_range("receive wr_id " + std::to_string(slot) +
                                    " is no slot of a ring of " + std::to_string(depth()));
        }
        if (!posted_[slot]) {
            throw std::logic_error("receive slot " + std::to_string(slot) +
                                   " came back but was not posted");
        }
        posted_[slot] = false;
        free_[(head_ + free_count_) % depth()] = static_cast<std::uint32_t>(slot);
        ++free_count_;
    }

  private:
    std::size_t slot_size_;
    std::vector<bool> posted_;
    // The free slots, a circular queue in the order they came back: free_count_ of them from head_.
    std::vector<std::uint32_t> free_;
    std::uint32_t free_count_ = 0;
    std::uint32_t head_ = 0;
};

}  // namespace tutorial
