// RDMAEndpoint's completion channel: arm the CQ, take an event, acknowledge events.
#include <cerrno>
#include <stdexcept>
#include <system_error>

#include "rdma_endpoint.hpp"

namespace tutorial {

//! [events]
void RDMAEndpoint::request_notify() {
    if (const int rc = ibv_req_notify_cq(cq_.get(), 0); rc != 0) {
        throw std::system_error(rc, std::generic_category(), "ibv_req_notify_cq");
    }
}

bool RDMAEndpoint::get_event() {
    if (!channel_) { throw std::logic_error("get_event: the endpoint has no completion channel"); }
    ibv_cq* cq = nullptr;
    void* cq_context = nullptr;
    if (ibv_get_cq_event(channel_.get(), &cq, &cq_context) != 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) { return false; }
        throw std::system_error(errno, std::generic_category(), "ibv_get_cq_event");
    }
    if (cq != cq_.get()) {  // one CQ per channel here: anything else is a bug
        ibv_ack_cq_events(cq, 1);
        throw std::logic_error("ibv_get_cq_event returned a CQ this endpoint does not own");
    }
    return true;
}

void RDMAEndpoint::ack(std::uint32_t count) noexcept { ibv_ack_cq_events(cq_.get(), count); }
//! [events]

}  // namespace tutorial
