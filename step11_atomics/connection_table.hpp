// Step 10: which connection a completion belongs to, by its QP number, free of any device.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace tutorial {

/// \brief qp_num → the connection that owns the QP now, for one shared CQ's completions. A
/// destroyed QP's number is retired: a completion that still carries it (Soft-RoCE leaves them in
/// the CQ) is found as retired, not as another's; a reused number gets the next generation.
class ConnectionTable {
  public:
    enum class Found { live, retired, unknown };
    struct Entry {
        Found found = Found::unknown;
        std::uint64_t connection = 0;  ///< the owner's id (live or retired)
        std::uint32_t generation = 0;  ///< how many QPs had this number before, in this table
    };

    /// \p retired_kept: how many retired numbers the table remembers (the oldest is forgotten).
    explicit ConnectionTable(std::size_t retired_kept = 1024) : retired_kept_(retired_kept) {}

    /// \brief \p qp_num now belongs to \p connection; returns its generation.
    /// \throws std::logic_error when the number is live already
    std::uint32_t add(std::uint32_t qp_num, std::uint64_t connection);
    /// \brief The QP was destroyed: its number is retired. A number not live is ignored.
    void retire(std::uint32_t qp_num);
    [[nodiscard]] Entry find(std::uint32_t qp_num) const;
    [[nodiscard]] std::size_t live() const noexcept { return live_.size(); }

  private:
    struct Slot {
        std::uint64_t connection;
        std::uint32_t generation;
    };
    std::size_t retired_kept_;
    std::unordered_map<std::uint32_t, Slot> live_;
    std::unordered_map<std::uint32_t, Slot> retired_;
    std::deque<std::uint32_t> retired_order_;  // oldest first, to forget beyond retired_kept_
};

inline std::uint32_t ConnectionTable::add(std::uint32_t qp_num, std::uint64_t connection) {
    if (live_.count(qp_num) != 0) {
        throw std::logic_error("QP number " + std::to_string(qp_num) + " is live already");
    }
    std::uint32_t generation = 0;
    if (auto it = retired_.find(qp_num); it != retired_.end()) {
        generation = it->second.generation + 1;
        retired_.erase(it);  // its place in retired_order_ is skipped when it comes up
    }
    live_[qp_num] = {connection, generation};
    return generation;
}

inline void ConnectionTable::retire(std::uint32_t qp_num) {
    auto it = live_.find(qp_num);
    if (it == live_.end()) { return; }
    retired_[qp_num] = it->second;
    live_.erase(it);
    retired_order_.push_back(qp_num);
    while (retired_order_.size() > retired_kept_) {
        const std::uint32_t oldest = retired_order_.front();
        retired_order_.pop_front();
        // Forget it only if it is still retired and no later retirement of it is queued.
        if (retired_.count(oldest) != 0 && std::find(retired_order_.begin(), retired_order_.end(),
                                                     oldest) == retired_order_.end()) {
            retired_.erase(oldest);
        }
    }
}

inline ConnectionTable::Entry ConnectionTable::find(std::uint32_t qp_num) const {
    if (auto it = live_.find(qp_num); it != live_.end()) {
        return {Found::live, it->second.connection, it->second.generation};
    }
    if (auto it = retired_.find(qp_num); it != retired_.end()) {
        return {Found::retired, it->second.connection, it->second.generation};
    }
    return {};
}

}  // namespace tutorial
