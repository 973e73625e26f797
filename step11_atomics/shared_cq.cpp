// Step 10: the shared CQ's channel: create it, arm the CQ, take an event, acknowledge events.
#include "shared_cq.hpp"

#include <fcntl.h>

#include <cerrno>
#include <stdexcept>
#include <system_error>

namespace tutorial {

//! [create]
SharedCompletionQueue::SharedCompletionQueue(const Device& device, std::uint32_t entries) {
    const auto max_cqe = static_cast<std::uint64_t>(device.attr().max_cqe);
    if (entries > max_cqe) {
        over_limit("the shared CQ's", entries, device.name(), "max_cqe", max_cqe);
    }
    channel_.reset(ibv_create_comp_channel(device.context()));
    if (!channel_) {
        throw std::system_error(errno, std::generic_category(), "ibv_create_comp_channel");
    }
    // Non-blocking: with no event queued, ibv_get_cq_event fails with EAGAIN instead of blocking.
    const int flags = ::fcntl(channel_->fd, F_GETFL);
    if (flags < 0 || ::fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        throw std::system_error(errno, std::generic_category(), "fcntl O_NONBLOCK");
    }
    cq_.reset(
        ibv_create_cq(device.context(), static_cast<int>(entries), nullptr, channel_.get(), 0));
    if (!cq_) { throw std::system_error(errno, std::generic_category(), "ibv_create_cq"); }
}
//! [create]

SharedCompletionQueue::~SharedCompletionQueue() {
    // ibv_destroy_cq waits until every event taken with ibv_get_cq_event is acked.
    if (cq_ && events_.acks_outstanding() > 0) { ack_all_before_destroy(*this, events_); }
}

void SharedCompletionQueue::request_notify() {
    if (const int rc = ibv_req_notify_cq(cq_.get(), 0); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_req_notify_cq");
    }
}

bool SharedCompletionQueue::get_event() {
    ibv_cq* cq = nullptr;
    void* cq_context = nullptr;
    if (ibv_get_cq_event(channel_.get(), &cq, &cq_context) != 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) { return false; }
        throw std::system_error(errno, std::generic_category(), "ibv_get_cq_event");
    }
    if (cq != cq_.get()) {  // one CQ per channel here: anything else is a bug
        ibv_ack_cq_events(cq, 1);
        throw std::logic_error("ibv_get_cq_event returned a CQ this program does not own");
    }
    return true;
}

void SharedCompletionQueue::ack(std::uint32_t count) noexcept {
    ibv_ack_cq_events(cq_.get(), count);
}

void SharedCompletionQueue::throw_poll_failed() {
    throw std::system_error(EIO, std::generic_category(), "ibv_poll_cq");
}

}  // namespace tutorial
