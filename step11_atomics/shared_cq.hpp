// Step 10: one completion queue and one completion channel for every connection.
#pragma once

#include "cq_events.hpp"
#include "rdma_device.hpp"
#include "verbs_raii.hpp"

#include <infiniband/verbs.h>

#include <cstdint>
#include <span>

namespace tutorial {

/// \brief One CQ, on one O_NONBLOCK completion channel, for every QP's sends and receives: the
/// `Source` of cq_events.hpp's protocol. Shared fate: an overrun puts every QP on it in error, so
/// the caller sizes it for every WR that can be outstanding at once.
class SharedCompletionQueue {
  public:
    /// \brief Creates the channel (O_NONBLOCK) and a CQ of at least \p entries on it.
    /// \throws TutorialError kExitUsage (over max_cqe); std::system_error naming the verb
    SharedCompletionQueue(const Device& device, std::uint32_t entries);
    SharedCompletionQueue(const SharedCompletionQueue&) = delete;
    SharedCompletionQueue& operator=(const SharedCompletionQueue&) = delete;
    /// \brief Acks the events not yet acked (ibv_destroy_cq waits for them).
    ~SharedCompletionQueue();

    [[nodiscard]] ibv_cq* get() const noexcept { return cq_.get(); }
    /// \brief The entries the device gave: ibv_cq::cqe, at least what was asked.
    [[nodiscard]] std::uint32_t capacity() const noexcept {
        return static_cast<std::uint32_t>(cq_->cqe);
    }
    /// \brief The channel's fd, O_NONBLOCK, for epoll(7): the only one for every connection.
    [[nodiscard]] int channel_fd() const noexcept { return channel_->fd; }

    /// \brief ibv_req_notify_cq(cq, 0): the next completion raises one event (one-shot).
    void request_notify();
    /// \brief ibv_get_cq_event(): true when it took an event, false when none is queued.
    [[nodiscard]] bool get_event();
    /// \brief ibv_ack_cq_events(cq, \p count).
    void ack(std::uint32_t count) noexcept;
    /// \brief ibv_poll_cq into \p completions: how many it filled, failed ones included.
    [[nodiscard]] int poll(std::span<ibv_wc> completions) {
        const int n =
            ibv_poll_cq(cq_.get(), static_cast<int>(completions.size()), completions.data());
        if (n < 0) [[unlikely]]
            throw_poll_failed();
        return n;
    }
    [[nodiscard]] CqEventTracker& events() noexcept { return events_; }

  private:
    [[noreturn]] static void throw_poll_failed();

    CqEventTracker events_{kAckBatch};
    // Parent-first: C++ destroys the CQ before the channel it is bound to (else EBUSY).
    CompletionChannel channel_;
    CompletionQueue cq_;
};

}  // namespace tutorial
